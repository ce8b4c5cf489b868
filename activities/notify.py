"""The `notify` activity: hand one event to every notifier of the worker; never fail."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from temporalio import activity

from hitl.wire import ACT_NOTIFY, NotifierResult, NotifyInput, NotifyOutput


class NotifyActivities:
    """The worker's notifiers (`hitl.notify`), run for the events runs report."""

    def __init__(self, notifiers: Sequence[Any]) -> None:
        self.notifiers = list(notifiers)

    @activity.defn(name=ACT_NOTIFY)
    async def notify(self, inp: NotifyInput) -> NotifyOutput:
        """Run every notifier at once; report each one's outcome (never raises)."""
        inp = inp.model_copy(update={"namespace": activity.info().workflow_namespace})
        results = await asyncio.gather(*(self._one(n, inp) for n in self.notifiers))
        return NotifyOutput(results=list(results))

    async def _one(self, notifier: Any, inp: NotifyInput) -> NotifierResult:
        name = str(getattr(notifier, "name", type(notifier).__name__))[:200]
        try:
            await notifier.notify(inp)
        except Exception as exc:  # a notifier never fails the run, whatever it raises
            error = f"{type(exc).__name__}: {exc}"[:300]
            activity.logger.warning(
                "notifier %s failed for %s of %s/%s: %s",
                name,
                inp.event,
                inp.workflow_id,
                inp.call_id,
                error,
            )
            return NotifierResult(
                notifier=name, delivered=False, attempts=_attempts(notifier), error=error
            )
        return NotifierResult(notifier=name, delivered=True, attempts=_attempts(notifier))


def _attempts(notifier: Any) -> int:
    return int(getattr(notifier, "last_attempts", 1) or 1)
