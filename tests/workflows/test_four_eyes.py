"""Four eyes: a call that needs several distinct approvers runs only when they all approved
(time-skipping server). The refund desk's rule: refunds over $1,000 need two people from
finance; smaller ones need one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from hitl import (
    Agent,
    ModelReply,
    ModelRequest,
    RunConfig,
    Runner,
    ScriptedModel,
    ToolApproved,
    ToolContext,
    function_tool,
)
from hitl.wire import DecisionInput, DecisionRecord, RunOutput, RunStatus
from tests.helpers import Ledger, record_effect, serving, tool_activity_count
from tests.workflows.test_invariants import refused_type

FINANCE = ["ann", "bob", "cy"]


def two_over_a_thousand(ctx: Any, params: dict[str, Any], call_id: str) -> int:
    return 2 if params["amount"] > 1000 else 1


def finance_approves(ctx: Any, call: Any) -> ToolApproved:
    """An approver callback that approves everything (it may not approve a four-eyes call)."""
    return ToolApproved(reason="the callback says yes")


@function_tool(
    needs_approval=True,
    required_approvals=two_over_a_thousand,
    approvers=FINANCE,
    auto_approve=True,
    approver=finance_approves,
)
def refund(ctx: ToolContext[object], order: int, amount: int) -> str:
    """Refund an order.

    Args:
        order: The order.
        amount: Dollars.
    """
    record_effect(ctx, "refund")
    return f"refunded ${amount} on order {order}"


@function_tool(needs_approval=True, required_approvals=2, approvers=FINANCE)
def wire(ctx: ToolContext[object], amount: int) -> str:
    """Wire money.

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "wire")
    return f"wired ${amount}"


def refunds(req: ModelRequest) -> ModelReply:
    """One refund per `order:amount` pair in the message, one per turn, then the outcomes."""
    pairs = [p.split(":") for p in req.last_user_text().split()]
    done = req.results_for("refund")
    if len(done) < len(pairs):
        order, amount = pairs[len(done)]
        return ModelReply.call("refund", {"order": int(order), "amount": int(amount)})
    return ModelReply.say(" | ".join(r.output or "" for r in done))


def wires(req: ModelRequest) -> ModelReply:
    done = req.results_for("wire")
    if not done:
        return ModelReply.call("wire", {"amount": 5000})
    return ModelReply.say(done[0].output or "")


desk = Agent(name="Refund desk", tools=[refund], model=ScriptedModel(refunds, "tests.4eyes"))
treasury = Agent(name="Treasury", tools=[wire], model=ScriptedModel(wires, "tests.4eyes.wire"))


async def _approve(handle: Any, call_id: str, approver: str | None, **kw: Any) -> DecisionRecord:
    rec: DecisionRecord = await handle.execute_update(
        "approve",
        DecisionInput(call_id=call_id, approver=approver, **kw),
        result_type=DecisionRecord,
    )
    return rec


async def test_two_different_people_must_approve(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, treasury) as tq:
        result = await Runner.run(treasury, "pay", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        assert (item.required_approvals, item.approved_by) == (2, [])
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)

        first = await _approve(handle, item.call_id, "ann", reason="invoice checked")
        assert (first.approver, first.still_needed) == ("ann", 1)
        again = await _approve(handle, item.call_id, "ann", reason="invoice checked")
        assert again == first, "the same approval again is a retry"
        refusals = {
            "the same person again": DecisionInput(
                call_id=item.call_id, approver="ann", reason="really"
            ),
            "no name": DecisionInput(call_id=item.call_id),
            "a standing rule": DecisionInput(call_id=item.call_id, approver="bob", always=True),
            "someone not in finance": DecisionInput(call_id=item.call_id, approver="dan"),
        }
        for what, d in refusals.items():
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await handle.execute_update("approve", d)
            assert refused_type(err) in ("AlreadyDecided", "InvalidDecision", "NotAuthorized"), what
        status = await handle.query("status", result_type=RunStatus)
        [pending] = status.pending
        assert [a.approver for a in pending.approvals] == ["ann"]
        assert (pending.required_approvals, status.decisions) == (2, [])
        assert ledger.count() == 0 and tool_activity_count(await handle.fetch_history()) == 0

        second = await _approve(handle, item.call_id, "bob")
        assert second.still_needed == 0
        out = await handle.result()
    assert out.final_output == "wired $5000"
    [decision] = out.decisions
    assert (decision.kind, decision.approver) == ("approve", "bob")
    assert [(a.approver, a.reason) for a in decision.approvals] == [
        ("ann", "invoice checked"),
        ("bob", None),
    ]
    assert ledger.count("wire") == 1


async def test_one_rejection_rejects_and_runs_nothing(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, treasury) as tq:
        result = await Runner.run(treasury, "pay", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        await _approve(handle, item.call_id, "ann")
        await handle.execute_update(
            "reject", DecisionInput(call_id=item.call_id, approver="cy", message="Not today.")
        )
        out = await handle.result()
        hist = await handle.fetch_history()
    [decision] = out.decisions
    assert (decision.kind, decision.approver) == ("reject", "cy")
    assert [a.approver for a in decision.approvals] == ["ann"], "the overruled approval is kept"
    assert out.final_output == "Not today."
    assert ledger.count() == 0 and tool_activity_count(hist) == 0


async def test_the_count_is_per_call_and_no_automatic_approval_counts(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """A small refund needs one approval (here the approver callback gives it); a large one
    waits for two people although the callback and two-key auto-approval would each have
    approved it."""
    client = ts_env.client
    cfg = RunConfig(auto_approve=True)
    async with serving(client, desk) as tq:
        result = await Runner.run(
            desk, "1:40 2:5000", run_config=cfg, client=client, task_queue=tq, serve=False
        )
        [item] = result.interruptions
        assert (json.loads(item.arguments), item.required_approvals) == (
            {"order": 2, "amount": 5000},
            2,
        )
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        status = await handle.query("status", result_type=RunStatus)
        [small] = status.decisions
        assert (small.source, small.kind) == ("policy", "approve"), "one approval sufficed"
        assert ledger.count("refund") == 1

        state = result.to_state()
        state.approve(item, approver="ann")
        result = await Runner.run(desk, state, client=client, task_queue=tq, serve=False)
        [still] = result.interruptions
        assert (still.call_id, still.approved_by) == (item.call_id, ["ann"])
        state = result.to_state()
        state.approve(still, approver="bob")
        result = await Runner.run(desk, state, client=client, task_queue=tq, serve=False)
    assert result.final_output == "refunded $40 on order 1 | refunded $5000 on order 2"
    assert [(d.source, d.approver) for d in result.decisions] == [
        ("policy", "policy:finance_approves"),
        ("person", "bob"),
    ]
    assert ledger.count("refund") == 2


@function_tool(needs_approval=True, required_approvals=two_over_a_thousand)
def transfer(ctx: ToolContext[object], amount: int) -> str:
    """Transfer money.

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "transfer")
    return f"transferred ${amount}"


def transfers(req: ModelRequest) -> ModelReply:
    amounts = [int(a) for a in req.last_user_text().split()]
    done = req.results_for("transfer")
    if len(done) < len(amounts):
        return ModelReply.call("transfer", {"amount": amounts[len(done)]})
    return ModelReply.say(" | ".join(r.output or "" for r in done))


teller = Agent(
    name="Teller", tools=[transfer], model=ScriptedModel(transfers, "tests.4eyes.transfers")
)


async def test_a_standing_rule_never_approves_a_four_eyes_call(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, teller) as tq:
        result = await Runner.run(teller, "40 5000", client=client, task_queue=tq, serve=False)
        [small] = result.interruptions
        assert small.required_approvals == 1
        state = result.to_state()
        state.approve(small, always_approve=True, approver="ann")
        result = await Runner.run(teller, state, client=client, task_queue=tq, serve=False)
        [large] = result.interruptions
        assert (large.required_approvals, large.approved_by) == (2, []), "the rule did not count"
        for who in ("ann", "bob"):
            state = result.to_state()
            state.approve(large, approver=who)
            result = await Runner.run(teller, state, client=client, task_queue=tq, serve=False)
    assert result.final_output == "transferred $40 | transferred $5000"
    assert [(d.source, d.approver, d.always) for d in result.decisions] == [
        ("person", "ann", True),
        ("person", "bob", False),
    ]
    assert ledger.count("transfer") == 2


async def test_one_request_cannot_be_two_approvers(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """A `decide` batch that names the call twice (two approvers in one request) is refused, and
    an approval by signal counts once per person like one by update."""
    client = ts_env.client
    async with serving(client, treasury) as tq:
        result = await Runner.run(treasury, "pay", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        twice = {
            "decisions": [
                {"kind": "approve", "call_id": item.call_id, "approver": "ann"},
                {"kind": "approve", "call_id": item.call_id, "approver": "bob"},
            ]
        }
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await handle.execute_update("decide", twice)
        assert refused_type(err) == "InvalidDecision"
        await handle.signal("approve", {"call_id": item.call_id, "approver": "ann"})
        await handle.signal("approve", {"call_id": item.call_id, "approver": "ann"})

        # The same approval by update is a retry: its answer shows what the signals recorded
        # (updates are handled after the signals sent before them).
        rec = await _approve(handle, item.call_id, "ann")
        assert [(a.approver, a.via) for a in rec.approvals] == [("ann", "signal")]
        assert rec.still_needed == 1, "the repeat by signal did not count twice"
        assert ledger.count() == 0
        await handle.signal("approve", {"call_id": item.call_id, "approver": "bob"})
        out = await handle.result()
    assert [a.via for a in out.decisions[0].approvals] == ["signal", "signal"]
    assert ledger.count("wire") == 1
