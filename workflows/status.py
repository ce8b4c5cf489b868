"""What a run answers: its result, the `status` and `snapshot` queries, `wait` and `decide`."""

from __future__ import annotations

import json
from typing import Any, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from hitl.limits import MAX_RESULT_BYTES, TRANSCRIPT_INLINE_BYTES
    from hitl.wire import (
        AgentSpec,
        CarriedState,
        DecisionRecord,
        HeldTranscript,
        PendingApproval,
        Phase,
        RunErrorInfo,
        RunInput,
        RunOutput,
        RunSnapshot,
        RunStatus,
        SettledStatus,
        transcript_digest,
    )
    from hitl.workflows.book import ApprovalBook
    from hitl.workflows.events import preview
    from hitl.workflows.failures import RunFailure
    from hitl.workflows.inputs import encoded_size, fits

SETTLED_PENDING_KEPT = 50
SETTLED_OUTPUT_BYTES = 16 * 1024
"""A final output larger than this is left out of update results (read the run's result)."""


class Reads(Protocol):
    """What the answers read of a run."""

    inp: RunInput
    state: CarriedState
    book: ApprovalBook
    output: RunOutput | None
    error: RunErrorInfo | None
    continuing: bool

    def phase(self) -> Phase:
        """Where the run is."""
        ...

    def path(self) -> list[str]:
        """Agents and agent tools from the root down to this run."""
        ...


def status(run: Reads, kind: type[RunStatus] = RunStatus, *, full: bool = True) -> RunStatus:
    """The run as the `status` query shows it (`full=False`: without the long lists)."""
    info = workflow.info()
    s = run.state
    current = s.graph.agents.get(s.current_agent) if s.graph else None
    output = run.output
    return kind(
        workflow_id=info.workflow_id,
        run_id=info.run_id,
        phase=run.phase(),
        agent=run.inp.agent,
        current_agent=current.id if current else None,
        current_agent_name=current.name if current else None,
        turn=s.turn,
        pending=run.book.pending(run.path(), info.workflow_id) if full else [],
        decisions=run.book.all_decisions() if full else [],
        refused=s.refused if full else [],
        usage=s.usage,
        items=len(s.input_items) + len(s.new_items),
        final_output=output.final_output if output is not None and full else None,
        error=run.error,
        continued_as_new=run.continuing,
        actions=s.actions if full else [],
        last_response_id=s.last_response_id,
        policy=s.policy if full else None,
        verdicts=s.verdicts if full else [],
        policy_changes=s.policy_changes if full else [],
    )


def snapshot(run: Reads) -> RunSnapshot:
    """The `snapshot` query's answer: the status, the items so far, each call's state."""
    calls = {c.call_id: c.state for c in run.book.calls.values()}
    s, st = run.state, status(run)
    schemas = {}
    for p in st.pending:
        agent = s.graph.agents.get(p.agent_id) if s.graph else None
        tool = agent.tool(p.tool_name) if agent else None
        if tool is not None and tool.kind != "agent" and tool.allow_edits:
            schemas[p.call_id] = tool.params_json_schema  # an edit form is offered by it
    return RunSnapshot(
        status=st,
        input_items=s.input_items,
        new_items=s.new_items,
        call_states=calls,
        schemas=schemas,
    )


def settled_status(
    run: Reads,
    decisions: list[DecisionRecord],
    *,
    items: bool = False,
    brief: bool = False,
    held: HeldTranscript | None = None,
) -> SettledStatus:
    """What `wait` and `decide` return; kept small, since it is stored with the update.

    `items` (from `Runner.run`): a paused run whose whole status and transcript are small
    returns them, and a completed run its transcript, so the caller needs no `snapshot` query
    (`held`: what the caller has of it already, left out). `brief` (a `decide` from
    `Runner.run`): a completed run says only that; the caller reads its result.
    """
    phase = run.phase()
    if items and phase == "awaiting_approval":
        whole = _whole(run, held)
        if whole is not None:
            return whole
    if brief and phase == "completed":
        info = workflow.info()
        result = SettledStatus(
            workflow_id=info.workflow_id, run_id=info.run_id, phase="completed", agent=run.inp.agent
        )
    else:
        result = _sparse(run, decisions)
    if items and phase == "completed":
        _add_transcript(run, result, held, TRANSCRIPT_INLINE_BYTES - encoded_size(result))
    return result


def _sparse(run: Reads, decisions: list[DecisionRecord]) -> SettledStatus:
    """The status without its long lists: `decisions` made, pending calls cut, a small output."""
    result = status(run, SettledStatus, full=False)
    assert isinstance(result, SettledStatus)
    result.decisions = decisions
    result.pending = [_brief(p) for p in run.book.pending(run.path())[:SETTLED_PENDING_KEPT]]
    final = run.output.final_output if run.output is not None else None
    if final is not None and len(json.dumps(final, default=str)) <= SETTLED_OUTPUT_BYTES:
        result.final_output = final
    return result


def _whole(run: Reads, held: HeldTranscript | None) -> SettledStatus | None:
    """A paused run's whole status with its transcript, if they are small (else `None`)."""
    whole = status(run, SettledStatus)
    assert isinstance(whole, SettledStatus)
    whole.refused, whole.actions, whole.final_output = [], [], None
    whole.policy, whole.verdicts = None, []  # (the `status` query has them)
    whole.policy_changes = []
    if not _add_transcript(run, whole, held, TRANSCRIPT_INLINE_BYTES):
        return None
    if encoded_size(whole) > TRANSCRIPT_INLINE_BYTES:
        return None
    return whole


def _add_transcript(
    run: Reads, answer: SettledStatus, held: HeldTranscript | None, budget: int
) -> bool:
    """Put the transcript the caller lacks into `answer` if it takes at most `budget` bytes.

    What the caller holds (`held`) is left out only if its digest names exactly what the run
    has in those places (a handoff's input filter may have rewritten them since).
    """
    s = run.state
    start = 0
    inputs: list[dict[str, Any]] | None = s.input_items
    if (
        held is not None
        and held.digest
        and held.new_items <= len(s.new_items)
        and transcript_digest(s.input_items, s.new_items[: held.new_items]) == held.digest
    ):
        start, inputs = held.new_items, None
    tail = s.new_items[start:]
    if not fits([*(inputs or []), *tail], budget):
        return False
    answer.input_items, answer.new_items, answer.items_from = inputs, tail, start
    return True


def _brief(p: PendingApproval) -> PendingApproval:
    """A pending call with its long texts cut (for results stored in history)."""
    request = p.request
    if request is not None:
        request = request.model_copy(
            update={
                "message": preview(request.message, 1000),
                "preview": preview(request.preview, 1000) if request.preview else None,
            }
        )
    return p.model_copy(update={"arguments": preview(p.arguments, 1000), "request": request})


def result(run: Reads, final: Any, agent: AgentSpec) -> RunOutput:
    """The run's result, without its transcript (`transcript_omitted`).

    Every item of the transcript is in history already (model replies, tool outputs), so the
    result does not repeat it; the `snapshot` and `transcript` queries read it, also after the
    run closed, and the `wait` / `decide` answer that sees the run complete carries it to
    `Runner.run` (`WaitInput.items`).
    """
    s = run.state
    out = RunOutput(
        final_output=final,
        last_agent=agent.id,
        last_agent_name=agent.name,
        input_items=[],
        new_items=[],
        usage=s.usage,
        decisions=run.book.all_decisions(),
        turns=s.turn,
        run_id=workflow.info().run_id,
        actions=s.actions,
        last_response_id=s.last_response_id,
        transcript_omitted=True,
    )
    size = encoded_size(out)
    if size > MAX_RESULT_BYTES:  # completing with it would fail every workflow task
        raise RunFailure(
            "RunTooLarge",
            f"the run's final output is {size} bytes, more than a result may hold "
            f"({MAX_RESULT_BYTES}); have the agent return less, or a reference to it",
        )
    return out
