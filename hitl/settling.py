"""How `Runner` talks to a run's workflow, and reads back the run once it settles.

It starts a run and waits, sends a state's decisions and answers, and builds the result of a
run that paused, finished or closed.

`hitl.run` (`Runner.run`, `Runner.run_streamed`) calls these; they are split out so the
entry points read in one sitting.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, TypeAlias

from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from hitl.agent import Agent
from hitl.connection import RunnerConnection
from hitl.errors import (
    AgentsException,
    AlreadyDecidedError,
    DeadlinePassedError,
    DecisionError,
    RunFailedError,
    UserError,
    from_failure,
)
from hitl.result import RunResult, resolve_agent, typed_final_output
from hitl.starting import (
    StartRequest,
    decision_update_id,
    default_approver,
)
from hitl.state import RunState, items_from_pending
from hitl.wire import (
    QUERY_SNAPSHOT,
    UPDATE_ANSWER,
    UPDATE_APPROVE,
    UPDATE_DECIDE,
    UPDATE_WAIT,
    AnswerInput,
    DecideInput,
    DecisionInput,
    DecisionRecord,
    DecisionRequest,
    HeldTranscript,
    InputAnswer,
    RunContextData,
    RunItem,
    RunOutput,
    RunSnapshot,
    RunStatus,
    SettledStatus,
    WaitInput,
    transcript_digest,
)

log = logging.getLogger("hitl")

Transcript: TypeAlias = tuple[list[dict[str, Any]], list[RunItem]]
"""A run's input items and the items it produced."""


async def _start(conn: RunnerConnection, request: StartRequest) -> RunResult:
    wid = request.workflow_id
    try:
        status = await conn.update(
            wid,
            UPDATE_WAIT,
            WaitInput(items=True),
            start=lambda: request.operation(conn.task_queue),
            result_type=SettledStatus,
        )
    except WorkflowAlreadyStartedError:
        log.info("run %s already exists and is closed; returning its outcome", wid)
        return await _settle(conn, wid, None)
    except WorkflowUpdateFailedError as exc:
        raise _typed(exc) from None
    except RPCError as exc:
        if exc.status == RPCStatusCode.ALREADY_EXISTS:
            return await _settle(conn, wid, None)
        raise
    return await _settle(conn, wid, status)


async def _resume(conn: RunnerConnection, state: RunState, approver: str | None) -> RunResult:
    client, agent = conn.client, conn.agent
    if state.root_agent.name != agent.name:
        raise UserError(
            f"this RunState belongs to agent {state.root_agent.name!r}, not {agent.name!r}"
        )
    handle = client.get_workflow_handle(state.workflow_id)
    decisions = _decisions(state, approver)
    known = state._transcript
    try:
        status = await _send_decisions(
            conn,
            state.workflow_id,
            decisions,
            _state_context(state),
            _answers(state, approver),
            known,
        )
    except WorkflowUpdateFailedError as exc:
        raise _typed(exc) from None
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        desc = await handle.describe()
        if desc.status == WorkflowExecutionStatus.RUNNING:
            raise
        result = await _settle(conn, state.workflow_id, None)
        _check_decisions_applied(result, decisions)
        return result
    return await _settle(conn, state.workflow_id, status, known)


def _decisions(state: RunState, approver: str | None) -> list[DecisionRequest]:
    return [
        d.model_copy(
            update={"approver": d.approver or approver or default_approver(), "client": "runner"}
        )
        for d in state.decisions.values()
    ]


def _answers(state: RunState, approver: str | None) -> list[AnswerInput]:
    return [
        a.model_copy(update={"approver": a.approver or approver or default_approver()})
        for a in state.answers.values()
    ]


async def _send_decisions(
    conn: RunnerConnection,
    workflow_id: str,
    decisions: list[DecisionRequest],
    context: RunContextData | None = None,
    answers: list[AnswerInput] | None = None,
    known: Transcript | None = None,
) -> RunStatus:
    """Send the decisions (and a new context, if any); return once the run settles again.

    Answers to tools' questions go first, each as an `answer` update; then edited approvals,
    each as its own `approve` update (the run plans the edited call before it answers); the
    rest go together in one `decide`. The answer carries the transcript when it is small, less
    what the caller holds already (`known`).
    """
    for a in answers or []:
        digest = hashlib.sha256(a.model_dump_json().encode()).hexdigest()[:24]
        await conn.update(
            workflow_id,
            UPDATE_ANSWER,
            a,
            update_id=f"{workflow_id}:answer:{digest}",
            result_type=InputAnswer,
        )
    for d in [d for d in decisions if d.arguments is not None]:
        await conn.update(
            workflow_id,
            UPDATE_APPROVE,
            DecisionInput.model_validate(d.model_dump(exclude={"kind"})),
            update_id=decision_update_id(workflow_id, UPDATE_APPROVE, [d]),
            result_type=DecisionRecord,
        )
    decisions = [d for d in decisions if d.arguments is None]
    held = _held(known)
    if not decisions and context is None:
        waited: RunStatus = await conn.update(
            workflow_id, UPDATE_WAIT, WaitInput(items=True, held=held), result_type=SettledStatus
        )
        return waited
    settled: RunStatus = await conn.update(
        workflow_id,
        UPDATE_DECIDE,
        DecideInput(
            decisions=decisions, wait=True, context=context, brief=True, items=True, held=held
        ),
        update_id=decision_update_id(workflow_id, UPDATE_DECIDE, decisions, context),
        result_type=SettledStatus,
    )
    return settled


def _held(known: Transcript | None) -> HeldTranscript | None:
    """What to tell a run of the transcript the caller holds (`None`: nothing)."""
    if known is None:
        return None
    return HeldTranscript(new_items=len(known[1]), digest=transcript_digest(*known))


def _answered(status: RunStatus, known: Transcript | None) -> Transcript | None:
    """The transcript an answer carries (`WaitInput.items`), joined to what the caller held."""
    if not isinstance(status, SettledStatus) or status.new_items is None:
        return None
    if status.input_items is not None and status.items_from == 0:
        return status.input_items, status.new_items
    if status.input_items is not None or known is None or status.items_from != len(known[1]):
        return None  # not what this client sends: read the transcript by query
    return known[0], [*known[1], *status.new_items]


def _state_context(state: RunState) -> RunContextData | None:
    """The new context a state brings (`context_override`, `from_string_with_context`)."""
    return state.saved_context()


def _check_decisions_applied(result: RunResult, decisions: list[DecisionRequest]) -> None:
    recorded = {d.call_id: d for d in result.decisions}
    for d in decisions:
        prior = recorded.get(d.call_id)
        if prior is not None and prior.kind == "expired":
            raise DeadlinePassedError(
                f"run {result.workflow_id} finished before this decision arrived; "
                f"{prior.expiry_text()}"
            )
        if prior is None or not prior.answers(d.kind, d):
            what = f"{prior.kind} by {prior.approver or prior.source}" if prior else "not decided"
            raise AlreadyDecidedError(
                f"run {result.workflow_id} finished before this decision arrived; "
                f"call '{d.call_id}' was {what}"
            )


async def _settle(
    conn: RunnerConnection,
    workflow_id: str,
    status: RunStatus | None,
    known: Transcript | None = None,
) -> RunResult:
    """Turn a settled run into a `RunResult` (or raise its typed failure).

    `known`: the transcript the caller held when it sent what `status` answers.
    """
    agent, task_queue = conn.agent, conn.task_queue
    handle: WorkflowHandle[Any, Any] = conn.client.get_workflow_handle(
        workflow_id, result_type=RunOutput
    )
    ask: WaitInput | None = None
    for _ in range(1000):
        if status is None or status.continued_as_new or status.phase in ("starting", "running"):
            ask = ask or WaitInput(items=True, held=_held(known))
            try:
                status = await conn.update(workflow_id, UPDATE_WAIT, ask, result_type=SettledStatus)
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
                return await _closed_result(handle, agent, task_queue)
            continue
        transcript = _answered(status, known)
        if status.phase == "completed":
            return await _closed_result(handle, agent, task_queue, transcript)
        if status.phase == "failed":
            err = status.error
            if err is None:
                raise RunFailedError(f"run {workflow_id} failed")
            raise from_failure(err.type, err.message, err.details)
        if transcript is not None:
            # The run sent its whole status and transcript with the answer (they are small).
            snap = RunSnapshot(status=status, input_items=transcript[0], new_items=transcript[1])
            return _paused_result(snap, agent, task_queue)
        snap = await handle.query(QUERY_SNAPSHOT, result_type=RunSnapshot)
        if snap.status.phase != "awaiting_approval":
            status = snap.status
            continue
        return _paused_result(snap, agent, task_queue)
    raise RunFailedError(f"run {workflow_id} did not settle")


async def _closed_result(
    handle: WorkflowHandle[Any, Any],
    agent: Agent[Any],
    task_queue: str,
    transcript: Transcript | None = None,
) -> RunResult:
    """A completed run's `RunResult`.

    Its transcript comes from `transcript` (what the answer that saw it complete carried),
    else from its result (runs of older versions), else by query.
    """
    try:
        out: RunOutput = await handle.result()
    except WorkflowFailureError as exc:
        raise _typed(exc) from None
    last = resolve_agent(agent, out.last_agent, out.last_agent_name)
    desc_run_id = out.run_id or handle.run_id or ""
    input_items, new_items = out.input_items, out.new_items
    if out.transcript_omitted:
        input_items, new_items = transcript or await _closed_transcript(handle)
    status = RunStatus(
        workflow_id=handle.id,
        run_id=desc_run_id,
        phase="completed",
        agent=agent.name,
        current_agent=out.last_agent,
        current_agent_name=out.last_agent_name,
        turn=out.turns,
        decisions=out.decisions,
        usage=out.usage,
        items=len(input_items) + len(new_items),
        final_output=out.final_output,
    )
    return RunResult(
        final_output=typed_final_output(last, out.final_output),
        interruptions=[],
        new_items=new_items,
        input=input_items,
        last_agent=last,
        workflow_id=handle.id,
        run_id=desc_run_id,
        usage=out.usage,
        decisions=out.decisions,
        status=status,
        root_agent=agent,
        task_queue=task_queue,
        last_response_id=out.last_response_id,
    )


async def _closed_transcript(
    handle: WorkflowHandle[Any, Any],
) -> tuple[list[dict[str, Any]], list[RunItem]]:
    """A closed run's transcript, by query (its result leaves it out; a worker answers)."""
    try:
        snap: RunSnapshot = await handle.query(QUERY_SNAPSHOT, result_type=RunSnapshot)
    except (RPCError, WorkflowQueryFailedError) as exc:
        log.warning(
            "run %s finished, but its transcript could not be read (%s): the result's "
            "new_items and input are empty; `hitl show %s` reads it once a worker runs",
            handle.id,
            getattr(exc, "message", exc),
            handle.id,
        )
        return [], []
    return snap.input_items, snap.new_items


def _paused_result(snap: RunSnapshot, agent: Agent[Any], task_queue: str) -> RunResult:
    st = snap.status
    last = resolve_agent(agent, st.current_agent or agent.name, st.current_agent_name or "")
    return RunResult(
        final_output=None,
        interruptions=items_from_pending(st.pending, agent, st.workflow_id),
        new_items=snap.new_items,
        input=snap.input_items,
        last_agent=last,
        workflow_id=st.workflow_id,
        run_id=st.run_id,
        usage=st.usage,
        decisions=st.decisions,
        status=st,
        root_agent=agent,
        task_queue=task_queue,
        last_response_id=st.last_response_id,
    )


def _typed(exc: BaseException) -> AgentsException:
    """The `hitl` exception for a Temporal failure (update refused, run failed)."""
    cause: BaseException | None = exc.cause if hasattr(exc, "cause") else exc.__cause__
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = getattr(cause, "cause", None)
    if isinstance(cause, ApplicationError):
        details = cause.details[0] if cause.details else None
        typed = from_failure(cause.type, cause.message, details)
        if isinstance(exc, WorkflowUpdateFailedError) and not isinstance(typed, DecisionError):
            return DecisionError(cause.message, details={"type": cause.type})
        return typed
    return RunFailedError(str(exc))
