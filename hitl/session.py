"""Sessions: a conversation that spans runs.

Pass the same session to successive runs (`Runner.run(agent, text, session="ticket-42")`): each
run starts from the conversation so far and, when it completes, appends its own turn (the user
input and everything the run produced). A run that pauses for approval appends its turn once it
is resumed and finishes, from whichever process resumed it.

Two kinds: a `TemporalSession` (or an id) is stored durably in Temporal (`AgentSession`) and the
run itself reads and extends it. A client-managed session (`hitl.memory.SQLiteSession`, or any
object with the SDK's `get_items` / `add_items` / `pop_item` / `clear_session`) lives in the
client's process, where no worker can reach it: its items are read before the run starts and
sent as the run's input, and the run's turn is written by the client that reads the completed
result (`write_turn`). The count of items that came from the session travels with the result
and its `RunState` (`session_history`), so a run resumed in another process days later writes
exactly its own turn; a turn the session already holds is not written again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError

from hitl.client import connect
from hitl.errors import UserError
from hitl.memory import Session
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

if TYPE_CHECKING:
    from hitl.result import RunResult

log = logging.getLogger("hitl")

_ALL = 2**31 - 1
"""`get_items(limit=...)` meaning every item (`None` means the session's default limit)."""


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


SessionArg = str | TemporalSession | Session
"""What `Runner.run(..., session=...)` takes."""


def client_session(session: SessionArg | None) -> Session | None:
    """`session` when it is client-managed; `None` for no session or a Temporal one.

    Raises:
        UserError: `session` is neither an id, a `TemporalSession` nor a `Session`.
    """
    if session is None or isinstance(session, str | TemporalSession):
        return None
    if not isinstance(session, Session):
        raise UserError(
            "session must be a session id, a TemporalSession, or an object with async "
            "get_items, add_items, pop_item and clear_session (the SDK's Session protocol), "
            f"got {type(session).__name__}"
        )
    return session


async def read_history(session: Session) -> list[dict[str, Any]]:
    """The conversation a run starts from (the session's `get_items()`), checked."""
    items = await session.get_items()
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise UserError(
            f"session {session.session_id!r}: get_items() must return a list of input items (dicts)"
        )
    return [dict(i) for i in items]


async def write_turn(session: Session, result: RunResult) -> bool:
    """Append a completed run's turn to a client-managed session, once.

    The turn is everything after the `result.session_history` items the run started from: the
    user's input and what the run produced. Nothing is written while the run is paused (a tool
    call without its output would break the next run of the session), for a run not started
    with a client-managed session, or when the session already holds the turn (a second read
    of the same result, say after a crash between writing and returning).

    Returns:
        Whether the turn was written.
    """
    if result.interruptions or result.session_history is None:
        return False
    if not result.input:
        log.warning(
            "run %s finished, but its transcript could not be read: session %r was not "
            "updated; read the result again (Runner.run(agent, state, session=...)) once a "
            "worker runs",
            result.workflow_id,
            session.session_id,
        )
        return False
    turn = result.to_input_list()[result.session_history :]
    if not turn:
        return False
    if _holds(await session.get_items(limit=_ALL), turn):
        return False
    await session.add_items(turn)
    return True


def _holds(items: list[Any], turn: list[dict[str, Any]]) -> bool:
    """`turn` appears in `items` as a contiguous run (the produced items carry unique ids)."""
    n = len(turn)
    return any(items[i : i + n] == turn for i in range(len(items) - n, -1, -1))
