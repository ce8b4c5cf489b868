"""A parked run continues as new and loses nothing (time-skipping server).

A run that waits for people for days still grows history (decisions, refused signals, waiters),
so past its threshold it continues as new *while parked*: the new run carries the open turn,
its pending calls with their requests and deadlines, the decisions and standing rules so far,
and the event stream. These tests use the smallest threshold the run config allows.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from hitl import Agent, ModelReply, ModelRequest, RunConfig, Runner, ScriptedModel, function_tool
from hitl.limits import MIN_CONTINUE_AS_NEW_EVENTS
from hitl.stream import current_offset
from hitl.tools import ToolContext
from hitl.wire import INBOX_MEMO, DecisionInput, DecisionRecord, InboxMemo, RunOutput, RunStatus
from tests.helpers import (
    Ledger,
    local_markers,
    record_effect,
    serving,
    tool_activity_count,
    wait_for,
)


@function_tool(needs_approval=True)
def refund(ctx: ToolContext[object], order_id: int) -> str:
    """Refund an order.

    Args:
        order_id: The order.
    """
    record_effect(ctx, "refund")
    return f"refunded {order_id}"


@function_tool(needs_approval=True, approval_timeout=2 * 24 * 3600.0, required_approvals=2)
def wire_money(ctx: ToolContext[object], amount: int) -> str:
    """Wire money.

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "wire_money")
    return f"wired {amount}"


def script(req: ModelRequest) -> ModelReply:
    """Turn 1: refund order 1. Turn 2: refund order 2 and wire 500, side by side. Turn 3:
    refund order 3. Then done."""
    refunds, wires = req.results_for("refund"), req.results_for("wire_money")
    if not refunds:
        return ModelReply.call("refund", {"order_id": 1})
    if len(refunds) == 1 and not wires:
        return ModelReply.calls(("refund", {"order_id": 2}), ("wire_money", {"amount": 500}))
    if len(refunds) == 2 and wires and not wires[0].output.startswith("wired"):
        return ModelReply.say("the wire was not made")
    if len(refunds) == 2:
        return ModelReply.call("refund", {"order_id": 3})
    return ModelReply.say(" / ".join(r.output or "" for r in [*refunds, *wires]))


desk = Agent(
    name="Compaction desk",
    tools=[refund, wire_money],
    model=ScriptedModel(script, "tests.compaction"),
)
CONFIG = RunConfig(continue_as_new_after_events=MIN_CONTINUE_AS_NEW_EVENTS)
SIGNALLED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
CONTINUED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW


async def latest_run(client: Client, workflow_id: str) -> str:
    return (await client.get_workflow_handle(workflow_id).describe()).run_id


async def grow_until_continued(client: Client, workflow_id: str) -> None:
    """Send refused signals, one at a time, until the parked run continues as new."""
    first = await latest_run(client, workflow_id)
    run = client.get_workflow_handle(workflow_id, run_id=first)
    settled = (EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, CONTINUED)
    for _ in range(MIN_CONTINUE_AS_NEW_EVENTS):
        await run.signal("approve", DecisionInput(call_id="no-such-call"))

        async def handled() -> bool:
            events = (await run.fetch_history()).events
            signalled = max(i for i, e in enumerate(events) if e.event_type == SIGNALLED)
            return any(e.event_type in settled for e in events[signalled:])

        await wait_for(handled, what="the signal to be handled")
        last = (await run.fetch_history()).events[-1]
        if last.event_type == CONTINUED:
            return
    raise AssertionError("the parked run never continued as new")


async def park_on_the_wire(client: Client, tq: str) -> tuple[str, str, str]:
    """Drive the desk to its second turn: refund 1 approved with `always`, refund 2 run by
    that rule, the wire waiting (with a deadline). Returns (workflow id, refund call, wire call).
    """
    first = await Runner.run(
        desk, "refund and wire", run_config=CONFIG, client=client, task_queue=tq, serve=False
    )
    [refund_call] = first.interruptions
    state = first.to_state()
    state.approve(refund_call, always_approve=True)
    parked = await Runner.run(desk, state, client=client, task_queue=tq, serve=False)
    [wire_call] = parked.interruptions
    assert wire_call.name == "wire_money"
    return parked.workflow_id, refund_call.call_id, wire_call.call_id


async def test_a_parked_run_continues_as_new_and_carries_everything(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, desk) as tq:
        wid, refund_call, wire_call = await park_on_the_wire(client, tq)
        handle: WorkflowHandle[object, object] = client.get_workflow_handle(wid)
        before = await handle.query("status", result_type=RunStatus)
        [pending] = before.pending
        assert pending.deadline is not None
        # One of the wire's two approvals is given before the run continues as new.
        half = await handle.execute_update(
            "approve",
            DecisionInput(call_id=wire_call, approver="cfo"),
            result_type=DecisionRecord,
        )
        assert half.still_needed == 1
        offset_before = await current_offset(client, wid)
        assert offset_before > 0

        # Refused signals grow the parked run's history past its threshold: it continues as
        # new without a decision, a model call or a tool call.
        await grow_until_continued(client, wid)
        after = await client.get_workflow_handle(wid).query("status", result_type=RunStatus)

        assert after.phase == "awaiting_approval"
        assert after.run_id != before.run_id
        [carried] = after.pending
        assert (carried.call_id, carried.tool_name) == (wire_call, "wire_money")
        assert carried.deadline == pending.deadline, "the deadline is not restarted"
        assert carried.request == pending.request
        assert [a.approver for a in carried.approvals] == ["cfo"], "the half approval carried"
        assert [(d.call_id, d.source) for d in after.decisions] == [
            (refund_call, "person"),
            (after.decisions[1].call_id, "always_rule"),
        ]
        assert {(r.name, r.error_type) for r in after.refused} == {("approve", "UnknownCall")}
        assert len(after.refused) > len(before.refused), "refusals of both runs are kept"
        assert await current_offset(client, wid) >= offset_before, "the event stream carried"
        latest = await client.get_workflow_handle(wid, run_id=after.run_id).fetch_history()
        assert tool_activity_count(latest) == 0
        assert local_markers(latest) == [], "no model call"
        # The inbox memo came along (listed with no query), and was not written again.
        desc = await client.get_workflow_handle(wid, run_id=after.run_id).describe()
        memo = await desc.memo_value(INBOX_MEMO, type_hint=InboxMemo)
        assert [(c.call_id, c.approved_by) for c in memo.calls] == [(wire_call, ["cfo"])]
        assert not any(
            e.event_type == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED for e in latest.events
        )

        # A decision by workflow id reaches the new run; a late duplicate of the first run's
        # decision is answered from the record, a conflicting one refused.
        again = await handle.execute_update(
            "approve",
            DecisionInput(call_id=refund_call, always=True, approver=after.decisions[0].approver),
            result_type=DecisionRecord,
        )
        assert again.call_id == refund_call and again.source == "person"
        with pytest.raises(WorkflowUpdateFailedError) as conflict:
            await handle.execute_update("reject", DecisionInput(call_id=refund_call))
        assert conflict.value.cause.type == "AlreadyDecided"  # type: ignore[union-attr]
        with pytest.raises(WorkflowUpdateFailedError) as twice:
            await handle.execute_update(
                "approve", DecisionInput(call_id=wire_call, approver="cfo", reason="again")
            )
        assert twice.value.cause.type == "AlreadyDecided"  # type: ignore[union-attr]
        await handle.execute_update(
            "approve", DecisionInput(call_id=wire_call, approver="controller")
        )
        out = await client.get_workflow_handle(wid, result_type=RunOutput).result()
        final = await client.get_workflow_handle(wid).query("status", result_type=RunStatus)

    assert out.final_output == "refunded 1 / refunded 2 / refunded 3 / wired 500"
    # The standing rule granted in the first run approved the third refund in the last one.
    assert [(d.tool_name, d.source) for d in final.decisions] == [
        ("refund", "person"),
        ("refund", "always_rule"),
        ("wire_money", "person"),
        ("refund", "always_rule"),
    ]
    assert sorted(r[1] for r in ledger.rows()) == ["refund", "refund", "refund", "wire_money"]


async def test_a_deadline_carried_across_continue_as_new_still_expires(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, desk) as tq:
        wid, _, wire_call = await park_on_the_wire(client, tq)
        await grow_until_continued(client, wid)
        await ts_env.sleep(timedelta(days=2, minutes=1))
        out = await client.get_workflow_handle(wid, result_type=RunOutput).result()
        status = await client.get_workflow_handle(wid).query("status", result_type=RunStatus)

    [expired] = [d for d in status.decisions if d.call_id == wire_call]
    assert (expired.kind, expired.source) == ("expired", "deadline")
    assert "wire_money" not in [r[1] for r in ledger.rows()], "an expired call never runs"
    assert out.final_output == "the wire was not made"
