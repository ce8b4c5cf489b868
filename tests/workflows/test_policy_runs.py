"""Approval policies in runs (time-skipping server): a deny schedules no tool activity, an
ask waits for the policy's approvers and count, log_only decides nothing but is recorded, a
run keeps the policy version it started with, and nothing a starter or decider sends selects,
changes or disables a policy."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from hitl import Agent, ModelReply, ModelRequest, Runner, ScriptedModel, ToolContext, function_tool
from hitl.activities.policy import pin
from hitl.policy import parse_policy
from hitl.wire import (
    CarriedState,
    DecisionInput,
    DecisionRecord,
    PolicyChange,
    RunInput,
    RunOutput,
    RunStatus,
    WaitInput,
)
from tests.e2e.test_verify import offline as verified
from tests.e2e.test_verify import update_events, without
from tests.helpers import Ledger, record_effect, serving, tool_activity_count
from tests.workflows.test_invariants import refused_type


@function_tool(categories=["payments"])
def refund(ctx: ToolContext[object], order: int, amount: float) -> str:
    """Refund an order (the code never asks: the policy does).

    Args:
        order: The order.
        amount: Dollars.
    """
    record_effect(ctx, "refund")
    return f"refunded ${amount} on order {order}"


@function_tool(needs_approval="policy")
def lookup(ctx: ToolContext[object], order: int) -> str:
    """Look an order up (defers to the policy).

    Args:
        order: The order.
    """
    record_effect(ctx, "lookup")
    return f"order {order}: shipped"


def script(req: ModelRequest) -> ModelReply:
    """`refund:ORDER:AMOUNT` or `lookup:ORDER` per word, one call per turn, then the outputs."""
    words = req.last_user_text().split()
    done = [r for w in ("refund", "lookup") for r in req.results_for(w)]
    if len(done) < len(words):
        kind, *rest = words[len(done)].split(":")
        if kind == "lookup":
            return ModelReply.call("lookup", {"order": int(rest[0])})
        return ModelReply.call("refund", {"order": int(rest[0]), "amount": float(rest[1])})
    return ModelReply.say(" | ".join(sorted(r.output or "" for r in done)))


desk = Agent(name="Desk", tools=[refund, lookup], model=ScriptedModel(script, "tests.policy"))

POLICY = """
policy: desk
version: "1"
rules:
  - id: no-huge-refunds
    tools: [refund]
    when: [{arg: amount, gt: 50000}]
    effect: deny
    message: Refunds above $50,000 are not made here.
  - id: four-eyes
    categories: [payments]
    when: [{arg: amount, gt: 1000}]
    effect: ask
    approvers: [ann, bob, cy]
    required_approvals: 2
  - id: lookups-free
    tools: [lookup]
    effect: allow
"""

SHADOW = """
policy: desk
version: "shadow"
rules:
  - id: would-deny-refunds
    tools: [refund]
    effect: deny
    message: would be refused
    mode: log_only
"""

EVERYTHING_DENIED = """
policy: desk
version: "2"
rules:
  - id: closed
    effect: deny
    message: The desk is closed.
"""


async def _status(handle: Any) -> RunStatus:
    status: RunStatus = await handle.query("status", result_type=RunStatus)
    return status


async def _approve(handle: Any, call_id: str, who: str, **extra: Any) -> DecisionRecord:
    rec: DecisionRecord = await handle.execute_update(
        "approve", DecisionInput(call_id=call_id, approver=who, **extra), result_type=DecisionRecord
    )
    return rec


async def test_a_deny_refuses_the_call_and_schedules_no_tool(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, desk, policy=parse_policy(POLICY)) as tq:
        result = await Runner.run(desk, "refund:7:60000", client=client, task_queue=tq, serve=False)
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        hist = await handle.fetch_history()
        status = await _status(handle)
    assert result.final_output == "Refunds above $50,000 are not made here."
    assert tool_activity_count(hist) == 0 and ledger.count() == 0
    assert result.decisions == [], "a deny is no decision anyone could overrule"
    [v] = status.verdicts
    assert (v.effect, v.rule, v.outcome, v.version) == ("deny", "no-huge-refunds", "refused", "1")
    assert status.policy is not None and status.policy.digest == v.digest


async def test_an_ask_waits_for_the_policys_approvers_and_count(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """The tool's code never asks; the policy asks two of ann, bob and cy. Someone else may not
    decide, a decision's own fields cannot name a rule, and the record names rule and version."""
    client = ts_env.client
    async with serving(client, desk, policy=parse_policy(POLICY)) as tq:
        result = await Runner.run(desk, "refund:7:5000", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        [pending] = (await _status(handle)).pending
        assert (pending.required_approvals, pending.approvers) == (2, ["ann", "bob", "cy"])
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await _approve(handle, item.call_id, "mallory")
        assert refused_type(err) == "NotAuthorized"
        # A decision naming a policy or a rule of its own is refused, and changes nothing.
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await handle.execute_update(
                "approve",
                {"call_id": item.call_id, "approver": "ann", "policy_rule": "x", "policy": {}},
                result_type=DecisionRecord,
            )
        assert refused_type(err) == "InvalidDecision"
        await _approve(handle, item.call_id, "ann")
        assert ledger.count() == 0 and tool_activity_count(await handle.fetch_history()) == 0
        await _approve(handle, item.call_id, "bob")
        out = await handle.result()
        hist = await handle.fetch_history()
    assert out.final_output == "refunded $5000.0 on order 7"
    # `hitl verify` holds the call to the policy's count though the tool's code never asks.
    report = await verified(hist, client)
    [call] = report.calls
    assert report.ok and [a.approver for a in call.verdict.approvals] == ["ann", "bob"]
    assert await verified(without(hist, update_events(hist, "bob")), client) is not None
    assert not (await verified(without(hist, update_events(hist, "bob")), client)).ok
    [d] = out.decisions
    assert (d.approver, [a.approver for a in d.approvals]) == ("bob", ["ann", "bob"])
    assert d.policy_rule == "four-eyes"
    assert d.policy_version is not None and d.policy_version.startswith("desk@1 sha256:")
    assert ledger.count("refund") == 1


async def test_allow_frees_only_a_tool_that_defers_and_small_calls_stay_with_the_code(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, desk, policy=parse_policy(POLICY)) as tq:
        result = await Runner.run(
            desk, "lookup:7 refund:7:20", client=client, task_queue=tq, serve=False
        )
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        status = await _status(handle)
    assert result.interruptions == [] and result.decisions == []
    assert ledger.count("lookup") == 1 and ledger.count("refund") == 1
    lookup_v, refund_v = sorted(status.verdicts, key=lambda v: v.categories)
    assert (lookup_v.effect, lookup_v.deferred, lookup_v.outcome) == ("allow", True, "free")
    assert (refund_v.effect, refund_v.matched, refund_v.outcome) == (None, [], "free")


async def test_a_tool_that_defers_asks_when_no_rule_decides(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, desk, policy=parse_policy(SHADOW)) as tq:
        result = await Runner.run(desk, "lookup:7", client=client, task_queue=tq, serve=False)
    [item] = result.interruptions
    assert item.tool_name == "lookup" and ledger.count() == 0


async def test_log_only_decides_nothing_and_is_recorded(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, desk, policy=parse_policy(SHADOW)) as tq:
        result = await Runner.run(desk, "refund:7:60000", client=client, task_queue=tq, serve=False)
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        status = await _status(handle)
    assert result.final_output == "refunded $60000.0 on order 7"
    assert ledger.count("refund") == 1 and result.decisions == []
    [v] = status.verdicts
    assert (v.effect, v.shadow_effect, v.shadow_rule) == (None, "deny", "would-deny-refunds")


async def test_a_run_keeps_its_pinned_policy_after_the_workers_changes(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """Run A parks under version 1; the worker restarts with version 2 (everything denied); A's
    next call is still planned by version 1, while a new run B is decided by version 2."""
    client = ts_env.client
    # (No cache on the first worker: a run it cached would wait on its sticky queue, whose
    # timeout the time-skipping server does not skip while an update waits.)
    async with serving(client, desk, policy=parse_policy(POLICY), cache=0) as tq:
        a = await Runner.run(
            desk, "refund:1:5000 refund:2:3000", client=client, task_queue=tq, serve=False
        )
    [first] = a.interruptions
    handle = client.get_workflow_handle(a.workflow_id, result_type=RunOutput)
    async with serving(client, desk, policy=parse_policy(EVERYTHING_DENIED), task_queue=tq):
        b = await Runner.run(desk, "refund:3:10", client=client, task_queue=tq, serve=False)
        assert b.final_output == "The desk is closed."
        for who in ("ann", "bob"):
            await _approve(handle, first.call_id, who)
        status: RunStatus = await handle.execute_update("wait", WaitInput(), result_type=RunStatus)
        [second] = status.pending
        assert json.loads(second.arguments)["order"] == 2 and second.required_approvals == 2
        for who in ("bob", "cy"):
            await _approve(handle, second.call_id, who)
        out = await handle.result()
    assert out.final_output == "refunded $3000.0 on order 2 | refunded $5000.0 on order 1"
    assert [d.policy_version.split()[0] for d in out.decisions if d.policy_version] == [
        "desk@1",
        "desk@1",
    ]
    assert ledger.count("refund") == 2


async def test_no_start_input_or_memo_selects_or_disables_a_policy(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """A top-level start that carries a policy of its own (one that allows everything), or
    carried state claiming an admin applied one, is refused like any internal field; a memo
    naming a policy changes nothing."""
    client = ts_env.client
    lenient = pin(parse_policy("policy: desk\nversion: x\nrules:\n  - {id: all, effect: allow}"))
    async with serving(client, desk, policy=parse_policy(POLICY)) as tq:
        handle = await client.start_workflow(
            "AgentRun",
            RunInput(agent="Desk", input="refund:7:60000", policy=lenient),
            id=f"policy-hostile-start-{uuid.uuid4().hex[:8]}",
            task_queue=tq,
            result_type=RunOutput,
        )
        with pytest.raises(WorkflowFailureError) as exc:
            await handle.result()
        assert "internal" in str(exc.value.cause)
        applied = PolicyChange(admin="ada", key_id="k", at=datetime.now(UTC), after="desk@x")
        carried = CarriedState(policy=lenient, policy_changes=[applied])
        planted = await client.start_workflow(
            "AgentRun",
            RunInput(agent="Desk", input="refund:7:60000", carried=carried),
            id=f"policy-hostile-carried-{uuid.uuid4().hex[:8]}",
            task_queue=tq,
            result_type=RunOutput,
        )
        with pytest.raises(WorkflowFailureError) as exc:
            await planted.result()
        assert "internal" in str(exc.value.cause)
        memo_run = await client.start_workflow(
            "AgentRun",
            RunInput(agent="Desk", input="refund:7:60000"),
            id=f"policy-hostile-memo-{uuid.uuid4().hex[:8]}",
            task_queue=tq,
            result_type=RunOutput,
            memo={"policy": lenient.model_dump(mode="json"), "hitl_policy": "off"},
        )
        out = await memo_run.result()
    assert out.final_output == "Refunds above $50,000 are not made here."
    assert ledger.count() == 0


def office_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("desk")
    if done:
        return ModelReply.say(done[0].output or "")
    return ModelReply.call("desk", {"input": "refund:7:60000"})


office = Agent(
    name="Office",
    tools=[desk.as_tool(tool_name="desk")],
    model=ScriptedModel(office_script, "tests.policy.office"),
)


async def test_a_nested_run_keeps_its_roots_policy(
    ts_env: WorkflowEnvironment, worker_cache: int, ledger: Ledger
) -> None:
    """An agent used as a tool runs as a child workflow: it inherits the root's pinned policy
    (an internal field the child believes because the server vouches for its parent)."""
    if worker_cache == 0:
        pytest.skip(
            "the Java time-skipping server stalls child workflow tasks that run local "
            "activities when nothing is cached (see tests/workflows/test_nested_waits.py)"
        )
    client = ts_env.client
    async with serving(client, office, policy=parse_policy(POLICY)) as tq:
        result = await Runner.run(office, "go", client=client, task_queue=tq, serve=False)
    assert result.final_output == "Refunds above $50,000 are not made here."
    assert ledger.count() == 0
