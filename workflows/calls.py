"""One call of a turn, taken from where it is to an output.

It waits for a person when it must (`Decisions.wait`), answers a rejected or expired call with
its message, and runs an approved one: an agent tool as a nested run, any other tool as an
activity (`uncertain.run_tool`), each in its trace span.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from hitl.wire import AgentSpec, CallRecord
    from hitl.workflows import nested, tracing, turn, uncertain
    from hitl.workflows.approvers import edit_note
    from hitl.workflows.reservations import settle_call

if TYPE_CHECKING:
    from hitl.workflows.tracing import RunTracer


class Driver(uncertain.Runs, nested.Host, Protocol):
    """What driving a call reads and changes of a run.

    Running tools and nested runs, and tracing them.
    """

    trace: RunTracer


async def drive(run: Driver, agent: AgentSpec, rec: CallRecord) -> None:
    """Take one call from its current state to an output."""
    tool = turn.tool_of(agent, rec)
    if rec.state == "awaiting_approval":
        await run.decisions.wait(rec, tool)
    decision = rec.decision
    if decision is not None:
        run.trace.close(
            rec.call_id,
            **{
                "hitl.decision": decision.kind,
                "hitl.decision.source": decision.source,
                "hitl.decision.approver": decision.approver,
            },
        )
        if decision.kind != "approve":  # rejected, or expired: nothing runs
            rec.output = decision.message or await run.steps.rejection_text(agent, rec, tool)
            rec.state = "expired" if decision.kind == "expired" else "rejected"
            await settle_call(_holds(rec), decision=decision.kind)  # limits: released
            return
    if rec.state not in ("uncertain", "awaiting_input"):  # (carried over: waits on)
        rec.state = "running"
        run.events.emit("tool_started", call_id=rec.call_id, tool=rec.tool_name)
    if tool.kind == "agent":
        out = await nested.run_child(run, agent, rec, tool)
    else:
        attrs = {
            "hitl.tool": rec.tool_name,
            "hitl.call_id": rec.call_id,
            "hitl.agent": agent.name,
            "hitl.tool.arguments": tracing.sensitive(run, rec.arguments),
        }
        with run.trace.span("hitl.tool_call", **attrs) as span:
            out = await uncertain.run_tool(run, agent, rec, tool)
            if span is not None:
                span.set_attribute("hitl.tool.is_error", out.is_error)
                output = tracing.sensitive(run, out.output)
                if output is not None:
                    span.set_attribute("hitl.tool.output", output)
    note = edit_note(rec) if rec.original_arguments is not None else ""
    rec.output, rec.is_error, rec.state = note + out.output, out.is_error, "done"
    await settle_call(_holds(rec), out=out)  # limits: committed, or released when it failed


def _holds(rec: CallRecord) -> list[Any]:
    """The limit reservations the call's policy verdict holds (none: nothing to settle)."""
    return list(rec.policy.reservations) if rec.policy is not None else []
