"""Heartbeats for activities that wait: a worker that dies mid-wait is noticed in seconds."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity


@contextlib.asynccontextmanager
async def heartbeating(timeout: float | None) -> AsyncIterator[None]:
    """Heartbeat in the background so a crashed worker is noticed within `timeout`."""
    if not timeout:
        yield
        return

    async def beat() -> None:
        # The first beat after a third of the timeout (which runs from the start): a call that
        # ends sooner, as most model calls do, costs the server no heartbeat at all.
        while True:
            await asyncio.sleep(max(timeout / 3, 0.1))
            activity.heartbeat()

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def heartbeat_timeout() -> float | None:
    """The running activity's heartbeat timeout in seconds (None: it has none)."""
    timeout = activity.info().heartbeat_timeout
    return timeout.total_seconds() if timeout else None
