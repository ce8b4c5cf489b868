"""`AgentSession`: a conversation that spans runs, kept durably in Temporal.

One long-lived workflow per session id holds the transcript (OpenAI Responses input items).
A run started with `session=` reads it when it starts and appends its own turn when it
completes, so the next run continues the conversation, including a run that paused for approval
and was resumed from a `RunState` in another process. Idle sessions cost nothing (evicted), and
long ones continue as new with their items.

Like `AgentRun`, every handler takes raw payloads of any number and size and checks them
(`workflows.inputs`); a transcript keeps at most `MAX_SESSION_BYTES` (the oldest items make
room), so no append can make it too large to carry over or to hand to a run.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from hitl.limits import KB
    from hitl.wire import (
        SESSION_ADD_ITEMS,
        SESSION_APPEND,
        SESSION_CLEAR,
        SESSION_ITEMS,
        SESSION_POP_ITEM,
        SESSION_WORKFLOW_TYPE,
        SessionAppend,
        SessionInput,
        SessionItems,
    )
    from hitl.workflows.inputs import read_one, refusal

MAX_APPLIED_KEPT = 1000
MAX_APPEND_BYTES = 256 * KB
"""One turn appended at once (by a run or a client)."""
MAX_SESSION_BYTES = 1024 * KB
"""The transcript a session keeps; older items are dropped to stay below it."""
APPEND_EXAMPLE = '{"run_id": "<id>", "items": [{"role": "user", "content": "..."}]}'


@workflow.defn(name=SESSION_WORKFLOW_TYPE)
class AgentSession:
    """The transcript of one conversation; appended by runs, read by runs and clients."""

    @workflow.init
    def __init__(self, *args: Any) -> None:
        try:
            inp = read_one(
                args,
                SessionInput,
                what="the AgentSession input",
                example='{"session_id": "..."}',
                max_bytes=MAX_SESSION_BYTES * 2,
                error_type="UserError",
            )
        except ApplicationError as err:
            workflow.logger.warning("session started with a bad input: %s", err.message)
            inp = SessionInput(session_id=workflow.info().workflow_id)
        self._inp = inp
        self._items: list[dict[str, Any]] = []
        self._sizes: list[int] = []
        self._total = 0
        self._applied: list[str] = list(inp.applied)[-MAX_APPLIED_KEPT:]
        self._extend(inp.items)

    @workflow.run
    async def run(self, *args: Any) -> None:
        await workflow.wait_condition(lambda: workflow.info().is_continue_as_new_suggested())
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(
            SessionInput(session_id=self._inp.session_id, items=self._items, applied=self._applied)
        )

    def _extend(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            size = len(json.dumps(item))
            self._items.append(item)
            self._sizes.append(size)
            self._total += size
        while self._total > MAX_SESSION_BYTES and self._items:
            self._items.pop(0)
            self._total -= self._sizes.pop(0)

    def _turn(self, args: tuple[Any, ...]) -> SessionAppend:
        return read_one(
            args,
            SessionAppend,
            what="a session append",
            example=APPEND_EXAMPLE,
            max_bytes=MAX_APPEND_BYTES,
            error_type="InvalidMessage",
        )

    def _append(self, turn: SessionAppend) -> None:
        if turn.run_id in self._applied:
            return  # a retried append of the same run
        self._extend(turn.items)
        self._applied.append(turn.run_id)
        del self._applied[:-MAX_APPLIED_KEPT]

    @workflow.signal(name=SESSION_APPEND)
    def append(self, *args: Any) -> None:
        """Append a run's turn once (a retried append of the same run is ignored)."""
        try:
            self._append(self._turn(args))
        except ApplicationError as err:
            workflow.logger.warning("refused a session append: %s", err.message)

    @workflow.update(name=SESSION_ADD_ITEMS)
    def add_items(self, *args: Any) -> int:
        """Append items from a client (`TemporalSession.add_items`); returns the item count."""
        self._append(self._turn(args))
        return len(self._items)

    @add_items.validator
    def _validate_add_items(self, *args: Any) -> None:
        self._turn(args)

    @workflow.update(name=SESSION_POP_ITEM)
    def pop_item(self, *args: Any) -> dict[str, Any] | None:
        """Remove and return the latest item."""
        if not self._items:
            return None
        self._total -= self._sizes.pop()
        return self._items.pop()

    @pop_item.validator
    def _validate_pop_item(self, *args: Any) -> None:
        if args:
            raise refusal("InvalidMessage", "pop_item takes no input")

    @workflow.update(name=SESSION_CLEAR)
    def clear(self, *args: Any) -> int:
        """Forget the transcript; returns how many items were removed."""
        removed = len(self._items)
        self._items, self._sizes, self._total = [], [], 0
        return removed

    @clear.validator
    def _validate_clear(self, *args: Any) -> None:
        if args:
            raise refusal("InvalidMessage", "clear takes no input")

    @workflow.query(name=SESSION_ITEMS)
    def items(self, *args: Any) -> SessionItems:
        """The transcript."""
        return SessionItems(items=self._items)
