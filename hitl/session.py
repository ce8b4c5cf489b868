"""Sessions: a conversation that spans runs, stored durably in Temporal (`AgentSession`).

Pass the same session to successive runs (`Runner.run(agent, text, session="ticket-42")`): each
run starts from the conversation so far and, when it completes, appends its own turn (the user
input and everything the run produced). A run that pauses for approval appends its turn once it
is resumed and finishes, from whichever process resumed it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError

from hitl.client import connect
from hitl.wire import (
    DEFAULT_TASK_QUEUE,
    SESSION_ADD_ITEMS,
    SESSION_CLEAR,
    SESSION_ITEMS,
    SESSION_POP_ITEM,
    SESSION_WORKFLOW_TYPE,
    SessionAppend,
    SessionInput,
    SessionItems,
    session_workflow_id,
)


@dataclass
class TemporalSession:
    """A durable conversation, usable as `Runner.run(..., session=TemporalSession("id"))`.

    Attributes:
        session_id: The conversation's id (its workflow is `hitl-session-<id>`).
        client: A connected client (default: `connect()`).
        task_queue: The queue of the workers that host sessions (those serving the agents).
    """

    session_id: str
    client: Client | None = None
    task_queue: str = DEFAULT_TASK_QUEUE

    async def _handle(self) -> WorkflowHandle[Any, Any]:
        self.client = await connect(self.client)
        return await self.client.start_workflow(
            SESSION_WORKFLOW_TYPE,
            SessionInput(session_id=self.session_id),
            id=session_workflow_id(self.session_id),
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )

    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The conversation so far (the latest `limit` items)."""
        handle = await self._handle()
        items: SessionItems = await handle.query(SESSION_ITEMS, result_type=SessionItems)
        return items.items[-limit:] if limit else items.items

    async def add_items(self, items: list[dict[str, Any]], *, key: str | None = None) -> None:
        """Append items; `key` makes a retried call apply once."""
        import uuid

        handle = await self._handle()
        await handle.execute_update(
            SESSION_ADD_ITEMS, SessionAppend(run_id=key or f"client-{uuid.uuid4()}", items=items)
        )

    async def pop_item(self) -> dict[str, Any] | None:
        """Remove and return the latest item."""
        handle = await self._handle()
        item: dict[str, Any] | None = await handle.execute_update(SESSION_POP_ITEM)
        return item

    async def clear_session(self) -> None:
        """Forget the conversation."""
        handle = await self._handle()
        try:
            await handle.execute_update(SESSION_CLEAR)
        except RPCError:
            return
