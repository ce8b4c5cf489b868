"""`AgentSession`: a conversation that spans runs, kept durably in Temporal.

One long-lived workflow per session id holds the transcript (OpenAI Responses input items).
A run started with `session=` reads it when it starts and appends its own turn when it
completes, so the next run continues the conversation, including a run that paused for approval
and was resumed from a `RunState` in another process. Idle sessions cost nothing (evicted), and
long ones continue as new with their items.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from hitl.wire import SESSION_WORKFLOW_TYPE, SessionAppend, SessionInput, SessionItems

MAX_APPLIED_KEPT = 1000


@workflow.defn(name=SESSION_WORKFLOW_TYPE)
class AgentSession:
    """The transcript of one conversation; appended by runs, read by runs and clients."""

    @workflow.init
    def __init__(self, inp: SessionInput) -> None:
        self._inp = inp
        self._items: list[dict[str, Any]] = list(inp.items)
        self._applied: list[str] = list(inp.applied)
        self._cleared = False

    @workflow.run
    async def run(self, inp: SessionInput) -> None:
        await workflow.wait_condition(lambda: workflow.info().is_continue_as_new_suggested())
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(
            SessionInput(session_id=inp.session_id, items=self._items, applied=self._applied)
        )

    @workflow.signal(name="append")
    def append(self, turn: SessionAppend) -> None:
        """Append a run's turn once (a retried append of the same run is ignored)."""
        if turn.run_id in self._applied:
            return
        self._items.extend(turn.items)
        self._applied.append(turn.run_id)
        del self._applied[:-MAX_APPLIED_KEPT]

    @workflow.update(name="add_items")
    def add_items(self, turn: SessionAppend) -> int:
        """Append items from a client (`TemporalSession.add_items`); returns the item count."""
        self.append(turn)
        return len(self._items)

    @workflow.update(name="pop_item")
    def pop_item(self) -> dict[str, Any] | None:
        """Remove and return the latest item."""
        return self._items.pop() if self._items else None

    @workflow.update(name="clear")
    def clear(self) -> int:
        """Forget the transcript; returns how many items were removed."""
        removed = len(self._items)
        self._items = []
        return removed

    @workflow.query(name="items")
    def items(self) -> SessionItems:
        """The transcript."""
        return SessionItems(items=self._items)
