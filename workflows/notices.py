"""Telling people about waiting calls: the `notify` activity, started and never awaited.

A run started by a worker with notifiers (webhooks, callbacks; `hitl.notify`) starts one `notify`
activity when a call starts waiting, is reminded, escalates, is decided, expires or becomes
uncertain. The run never waits for it and nothing it does can fail the run: the activity itself
never raises, and this side drops whatever happens to it. Notifications carry no arguments.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Protocol

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from hitl.wire import (
        ACT_NOTIFY,
        CallRecord,
        CarriedState,
        DecisionRecord,
        NotifyEvent,
        NotifyInput,
        NotifyOutput,
        RunInput,
    )
    from hitl.wire.runs import text_digest


class Told(Protocol):
    """What notifying reads of a run.

    Its parent link (a nested run's calls are told as the root shows them) and whether its
    worker has notifiers.
    """

    inp: RunInput
    state: CarriedState


NOTIFY_TIMEOUT = timedelta(seconds=120)
"""Webhooks retry inside the activity (their own timeouts and backoff); this bounds the whole."""


def without_arguments(rec: DecisionRecord) -> DecisionRecord:
    """A decision as a notification tells it: nothing that holds or names tool arguments.

    Neither its own edit nor any approval's: an approval that edited the call carries the
    edited arguments (`Approval.arguments`). Digests go too (a short argument is guessable
    from its hash).
    """
    return rec.model_copy(
        update={
            "arguments": None,
            "original_arguments": None,
            "arguments_sha256": None,
            "approvals": [
                a.model_copy(update={"arguments": None, "arguments_sha256": None})
                for a in rec.approvals
            ],
        }
    )


class Notices:
    """Start `notify` activities for one run's calls."""

    def __init__(self, run: Told) -> None:
        self.run = run
        self._tasks: set[asyncio.Task[None]] = set()

    def tell(self, event: NotifyEvent, rec: CallRecord) -> None:
        """Notify the worker's notifiers of `event` about `rec` (if the run has any)."""
        run = self.run
        if not run.state.notify:
            return
        info = workflow.info()
        link = run.inp.parent
        # A nested run's call is decided on the root run, under its qualified id: say so.
        inp = NotifyInput(
            event=event,
            workflow_id=link.root_workflow_id if link is not None else info.workflow_id,
            run_id="" if link is not None else info.run_id,
            call_id="/".join([*link.call_path, rec.call_id]) if link else rec.call_id,
            tool_name=rec.tool_name,
            agent_name=rec.agent_name,
            title=rec.request.title if rec.request is not None else None,
            approvers=list(rec.approvers),
            deadline=rec.deadline,
            at=workflow.now(),
            decision=without_arguments(rec.decision) if rec.decision is not None else None,
            arguments_sha256=text_digest(rec.arguments),
        )
        task = asyncio.create_task(self._send(inp))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Before the run closes: let notifications in flight end (a closed run loses them)."""
        if self._tasks:
            try:
                await workflow.wait_condition(lambda: not self._tasks, timeout=NOTIFY_TIMEOUT)
            except TimeoutError:
                workflow.logger.warning("closing with %d notifications in flight", len(self._tasks))

    async def _send(self, inp: NotifyInput) -> None:
        try:
            await workflow.execute_activity(
                ACT_NOTIFY,
                inp,
                result_type=NotifyOutput,
                start_to_close_timeout=NOTIFY_TIMEOUT,
                retry_policy=RetryPolicy(maximum_attempts=1),
                summary=f"notify {inp.event} {inp.tool_name}",
            )
        except Exception:
            workflow.logger.warning("notify %s for %s did not complete", inp.event, inp.call_id)
