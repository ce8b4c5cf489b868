"""Crashes that ask a person: a call whose effect may or may not have happened.

A tool that is not safe to retry (`retry_safe=False`) runs one attempt. When that attempt dies
midway (the worker crashed, the tool hung past its timeout) or the tool says it cannot tell
(`hitl.EffectUnknown`), nobody knows whether the refund went out. Instead of guessing (a retry
may pay twice, an error may make the model try again), the call becomes *uncertain*: the run
parks, the call is listed with the pending approvals, and a person settles it with the
`resolve` update: it `happened` (with the result the model should read), `retry` (run it
again, with the same idempotency key), or `give_up` (the model reads an error).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from hitl.limits import MAX_APPROVER_CHARS, MAX_CALL_ID_CHARS, MAX_TEXT_CHARS, text_problem
    from hitl.wire import (
        AgentSpec,
        CallRecord,
        CarriedState,
        Resolution,
        ResolveInput,
        RunInput,
        ToolOutput,
        ToolSpec,
        UncertainCall,
    )
    from hitl.workflows import elicitation, records
    from hitl.workflows.approvers import check_approver
    from hitl.workflows.checks import check_round, check_seen
    from hitl.workflows.failures import NeedsInput, Uncertain
    from hitl.workflows.inputs import read_one, refusal

if TYPE_CHECKING:
    from hitl.workflows.book import ApprovalBook
    from hitl.workflows.decisions import Decisions
    from hitl.workflows.events import Events
    from hitl.workflows.notices import Notices
    from hitl.workflows.steps import Steps


class Runs(Protocol):
    """What running a tool (and settling its uncertain attempts) reads and changes of a run."""

    inp: RunInput
    state: CarriedState
    book: ApprovalBook
    steps: Steps
    decisions: Decisions
    events: Events
    notices: Notices

    def finished(self) -> bool:
        """The run completed or failed."""
        ...


RESOLVE_EXAMPLE = '{"call_id": "<call id>", "outcome": "happened", "output": "what the tool did"}'


async def run_tool(run: Runs, agent: AgentSpec, rec: CallRecord, tool: ToolSpec) -> ToolOutput:
    """Run an approved call's tool; park it as uncertain as often as its attempts die."""
    while True:
        if rec.state == "awaiting_input":  # (also a call carried over while it asked)
            await elicitation.wait(run, rec)
        if rec.state != "uncertain":
            try:
                return await run.steps.execute_tool(agent, rec, tool)
            except NeedsInput as need:
                stop = elicitation.park(run, rec, need)
                if stop is not None:
                    return stop
                continue
            except Uncertain as lost:
                attempts = rec.uncertain.attempts + 1 if rec.uncertain else 1
                rec.uncertain = UncertainCall(
                    since=workflow.now(), error=str(lost)[:MAX_TEXT_CHARS], attempts=attempts
                )
                rec.state = "uncertain"
                rec.round += 1
                run.events.emit(
                    "call_uncertain", call_id=rec.call_id, tool=rec.tool_name, text=str(lost)
                )
                run.notices.tell("uncertain", rec)
        uncertain = rec.uncertain
        assert uncertain is not None
        await workflow.wait_condition(_resolved(uncertain))
        res = uncertain.resolution
        assert res is not None
        rec.state = "running"
        run.events.emit("call_resolved", call_id=rec.call_id, tool=rec.tool_name, text=res.outcome)
        who = res.approver or "a person"
        if res.outcome == "happened":
            return ToolOutput(
                output=res.output or f"{rec.tool_name} was completed ({who} confirmed)."
            )
        if res.outcome == "give_up":
            text = res.message or (
                f"{rec.tool_name} could not be completed and will not be retried ({who} decided)."
            )
            return ToolOutput(output=text, is_error=True)
        # retry: run it once more, with the same idempotency key
        rec.uncertain = uncertain.model_copy(update={"resolution": None})


def _resolved(uncertain: UncertainCall) -> Callable[[], bool]:
    return lambda: uncertain.resolution is not None


def read(args: tuple[Any, ...]) -> ResolveInput:
    """The payload of a `resolve` update."""
    return read_one(
        args, ResolveInput, what="a resolve request", example=RESOLVE_EXAMPLE, max_bytes=256 * 1024
    )


def check(run: Runs, d: ResolveInput) -> tuple[CallRecord, bool]:
    """Validate a resolution (read-only); the call it settles, and whether it was signed.

    It must be signed when the call's decisions must be.
    """
    problem = (
        text_problem("call_id", d.call_id, MAX_CALL_ID_CHARS)
        or text_problem("message", d.message, MAX_TEXT_CHARS)
        or text_problem("reason", d.reason, MAX_TEXT_CHARS)
        or text_problem("approver", d.approver, MAX_APPROVER_CHARS)
    )
    limit = run.inp.run_config.max_tool_output_bytes
    if problem is None and d.output is not None and len(d.output.encode("utf-8")) > limit:
        problem = f"output is larger than the run's tool output limit ({limit} bytes)"
    if problem is not None:
        raise refusal("InvalidDecision", problem)
    if run.finished():
        raise refusal("RunFinished", "the run has finished; it takes no more decisions")
    rec = run.book.calls.get(d.call_id)
    if rec is None or rec.uncertain is None:
        raise refusal("UnknownCall", f"no uncertain call '{d.call_id}'")
    if rec.state != "uncertain" or rec.uncertain.resolution is not None:
        raise refusal("NotPending", f"call '{d.call_id}' is not uncertain (it is {rec.state})")
    check_approver(d, rec.tool_name, rec.approvers, run.state.directory)
    check_seen(d, rec.arguments, len(rec.edits))
    check_round(d.call_id, d.round, rec.round)
    return rec, run.decisions.verified("resolve", d)


def resolve(run: Runs, args: tuple[Any, ...]) -> Resolution:
    """Settle an uncertain call (synchronously, after `check`)."""
    d = read(args)
    rec, verified = check(run, d)
    assert rec.uncertain is not None
    res = Resolution(
        outcome=d.outcome,
        output=d.output,
        message=d.message,
        approver=d.approver,
        reason=d.reason,
        resolved_at=workflow.now(),
        verified=verified,
    )
    rec.uncertain.resolution = res
    rec.resolutions.append(res)
    rec.round += 1
    run.book.note(records.resolved(rec, res))
    return res
