"""Following a run's events while it runs and while it is paused (workflow streams).

Every run publishes `RunEvent`s (model messages and text deltas, tool calls started and finished,
approvals requested and decided, handoffs, pauses, the final output) on its workflow stream,
topic `events`. Each event has an offset: a subscriber that disconnects resumes from the offset
after the last one it saw and gets every later event exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.service import RPCError, RPCStatusCode

from hitl.wire import EVENTS_TOPIC, RunEvent

TERMINAL = ("final_output", "run_failed")

# A poll the server gave up on: a worker too busy, paused or restarting to answer the stream's
# query (30 s on the dev server) or a connection lost. The stream resumes from the next offset,
# so nothing is lost or repeated; any other error (no such run, a rejected query) is final.
TRANSIENT = frozenset(
    {RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAVAILABLE}
)
RESUBSCRIBE_ATTEMPTS = 5

log = logging.getLogger("hitl.stream")


async def stream_events(
    client: Client,
    workflow_id: str,
    *,
    from_offset: int = 0,
    stop_after: tuple[str, ...] = TERMINAL,
    poll_cooldown: timedelta = timedelta(milliseconds=50),
) -> AsyncIterator[RunEvent]:
    """Yield a run's events from `from_offset` on, each with its `offset` set.

    Stops after an event whose type is in `stop_after` (by default the final output or the
    failure), or when the run has closed and every event was delivered. A poll that times out
    or loses its connection is made again from the next offset, up to `RESUBSCRIBE_ATTEMPTS`
    times in a row.
    """
    offset, failures = from_offset, 0
    while True:
        stream = WorkflowStreamClient.create(client, workflow_id)
        try:
            async for item in stream.subscribe(
                [EVENTS_TOPIC],
                from_offset=offset,
                result_type=RunEvent,
                poll_cooldown=poll_cooldown,
            ):
                failures = 0
                offset = item.offset + 1
                event = item.data.model_copy(update={"offset": item.offset})
                yield event
                if event.type in stop_after:
                    return
            return
        except RPCError as exc:
            failures += 1
            if exc.status not in TRANSIENT or failures > RESUBSCRIBE_ATTEMPTS:
                raise
            log.warning(
                "the event stream of run %s failed (%s); following it again from offset %d"
                " (retry %d of %d)",
                workflow_id,
                exc.message,
                offset,
                failures,
                RESUBSCRIBE_ATTEMPTS,
            )
            await asyncio.sleep(min(0.25 * 2**failures, 4.0))


async def current_offset(client: Client, workflow_id: str) -> int:
    """The offset the next event of the run will get."""
    offset: int = await WorkflowStreamClient.create(client, workflow_id).get_offset()
    return offset


async def events_until_settled(
    client: Client,
    workflow_id: str,
    settled: asyncio.Task[Any],
    *,
    from_offset: int = 0,
) -> AsyncIterator[RunEvent]:
    """Yield events until the run settles and every event up to that moment was delivered.

    `settled` is a task waiting for the run to pause or finish.
    """
    queue: asyncio.Queue[RunEvent | BaseException] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for event in stream_events(client, workflow_id, from_offset=from_offset):
                await queue.put(event)
        except BaseException as exc:
            await queue.put(exc)

    reader = asyncio.create_task(pump())
    next_offset = from_offset
    target: int | None = None
    try:
        while True:
            if target is None and settled.done():
                settled.result()  # surface its error, if any
                target = await current_offset(client, workflow_id)
            if target is not None and next_offset >= target:
                return
            getter = asyncio.ensure_future(queue.get())
            waiting: set[asyncio.Future[Any]] = {getter}
            if target is None:
                waiting.add(settled)
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                continue
            item = getter.result()
            if isinstance(item, BaseException):
                if target is None:
                    await settled
                    target = await current_offset(client, workflow_id)
                if next_offset >= (target or 0):
                    return
                raise item
            next_offset = (item.offset or 0) + 1
            yield item
    finally:
        reader.cancel()
        with contextlib.suppress(BaseException):
            await reader
