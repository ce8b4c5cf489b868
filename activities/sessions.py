"""Activities that read and extend sessions (`AgentSession` workflows) for runs."""

from __future__ import annotations

from temporalio import activity
from temporalio.common import WorkflowIDConflictPolicy

from hitl.wire import (
    ACT_LOAD_SESSION,
    ACT_SAVE_SESSION,
    SESSION_APPEND,
    SESSION_ITEMS,
    SESSION_WORKFLOW_TYPE,
    SessionInput,
    SessionItems,
    SessionRef,
    session_workflow_id,
)


class SessionActivities:
    """Load a session's transcript at run start; append the run's turn at its end."""

    @activity.defn(name=ACT_LOAD_SESSION)
    async def load_session(self, ref: SessionRef) -> SessionItems:
        """The session's items (starting the session workflow if it does not exist yet)."""
        client = activity.client()
        handle = await client.start_workflow(
            SESSION_WORKFLOW_TYPE,
            SessionInput(session_id=ref.session_id),
            id=session_workflow_id(ref.session_id),
            task_queue=ref.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        items: SessionItems = await handle.query(SESSION_ITEMS, result_type=SessionItems)
        return items

    @activity.defn(name=ACT_SAVE_SESSION)
    async def save_session(self, ref: SessionRef) -> None:
        """Append the run's turn (signal-with-start: works even if the session was closed)."""
        assert ref.append is not None
        await activity.client().start_workflow(
            SESSION_WORKFLOW_TYPE,
            SessionInput(session_id=ref.session_id),
            id=session_workflow_id(ref.session_id),
            task_queue=ref.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            start_signal=SESSION_APPEND,
            start_signal_args=[ref.append],
        )
