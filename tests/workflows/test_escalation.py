"""Deadlines that escalate, over simulated days (time-skipping server): the refund desk's
refunds wait for `finance`, are reminded after 4 hours, escalate to `finance-leads` after a
day, and expire after three unless someone extends them."""

from __future__ import annotations

from datetime import timedelta
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
    ToolContext,
    function_tool,
)
from hitl.wire import (
    ApproverDirectory,
    ApproverEntry,
    DecisionInput,
    ExtendInput,
    RunOutput,
    RunStatus,
)
from tests.helpers import Ledger, record_effect, serving, tool_activity_count
from tests.workflows.test_invariants import refused_type

HOUR, DAY = 3600.0, 86400.0
DIRECTORY = ApproverDirectory(
    approvers={
        "ann": ApproverEntry(groups=["finance"]),
        "bob": ApproverEntry(groups=["finance"]),
        "lee": ApproverEntry(groups=["finance-leads"]),
    }
)


@function_tool(
    needs_approval=True,
    approvers=["group:finance"],
    remind_after=4 * HOUR,
    escalate_after=DAY,
    escalate_to=["group:finance-leads"],
    approval_timeout=3 * DAY,
)
def refund(ctx: ToolContext[object], order: int, amount: int) -> str:
    """Refund an order.

    Args:
        order: The order.
        amount: Dollars.
    """
    record_effect(ctx, "refund")
    return f"refunded ${amount} on order {order}"


def script(req: ModelRequest) -> ModelReply:
    done = req.results_for("refund")
    if done:
        return ModelReply.say(done[0].output or "")
    return ModelReply.call("refund", {"order": 5, "amount": 1200})


desk = Agent(name="Escalating desk", tools=[refund], model=ScriptedModel(script, "tests.esc"))


async def _status(handle: Any) -> RunStatus:
    status: RunStatus = await handle.query("status", result_type=RunStatus)
    return status


async def test_a_call_is_reminded_escalates_and_expires_on_its_own_outcome(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, desk, directory=DIRECTORY) as tq:
        result = await Runner.run(desk, "refund", client=client, task_queue=tq, serve=False)
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        [pending] = (await _status(handle)).pending
        call_id = pending.call_id
        assert (pending.reminded_at, pending.escalated_at) == (None, None)

        await ts_env.sleep(timedelta(hours=5))
        [pending] = (await _status(handle)).pending
        assert pending.reminded_at is not None and pending.escalated_at is None
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await handle.execute_update("approve", DecisionInput(call_id=call_id, approver="lee"))
        assert refused_type(err) == "NotAuthorized", "a lead may not decide before escalation"

        await ts_env.sleep(timedelta(hours=20))  # 25 hours in
        [pending] = (await _status(handle)).pending
        assert pending.escalated_at is not None
        assert pending.approvers == ["group:finance", "group:finance-leads"]
        await handle.execute_update(
            "extend", ExtendInput(call_id=call_id, seconds=DAY, approver="lee", reason="audit")
        )
        await ts_env.sleep(timedelta(days=2, hours=1))  # past the first deadline, not the new
        status = await _status(handle)
        assert status.phase == "awaiting_approval"
        await ts_env.sleep(timedelta(days=1))
        out = await handle.result()
        hist = await handle.fetch_history()
    [decision] = out.decisions
    assert (decision.kind, decision.source, decision.expired) == ("expired", "deadline", True)
    assert "expired" in out.final_output
    assert tool_activity_count(hist) == 0 and ledger.count() == 0


async def test_an_escalated_lead_decides_and_groups_admit_members_only(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, desk, directory=DIRECTORY) as tq:
        result = await Runner.run(desk, "refund", client=client, task_queue=tq, serve=False)
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        call_id = result.interruptions[0].call_id
        for outsider in ("mallory", "lee", None):
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await handle.execute_update(
                    "approve", DecisionInput(call_id=call_id, approver=outsider)
                )
            assert refused_type(err) == "NotAuthorized", outsider
        await ts_env.sleep(timedelta(days=1, hours=1))
        await handle.execute_update("approve", DecisionInput(call_id=call_id, approver="lee"))
        out = await handle.result()
    assert out.final_output == "refunded $1200 on order 5"
    assert [(d.approver, d.expired) for d in out.decisions] == [("lee", False)]
    assert ledger.count("refund") == 1


async def test_a_group_nobody_is_in_fails_the_run_at_start(ts_env: WorkflowEnvironment) -> None:
    """Without a directory that fills `group:finance`, nobody could ever decide: fail fast."""
    client = ts_env.client
    async with serving(client, desk) as tq:
        with pytest.raises(Exception) as err:
            await Runner.run(desk, "refund", client=client, task_queue=tq, serve=False)
    assert "group nobody belongs to" in str(err.value)


@function_tool(needs_approval=True)
def archive(ctx: ToolContext[object], box: int) -> str:
    """Archive a box (no deadlines of its own).

    Args:
        box: The box.
    """
    record_effect(ctx, "archive")
    return f"archived box {box}"


def archive_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("archive")
    if done:
        return ModelReply.say(done[0].output or "")
    return ModelReply.call("archive", {"box": 3})


archivist = Agent(name="Archivist", tools=[archive], model=ScriptedModel(archive_script, "t.arc"))


async def test_the_run_sets_deadlines_for_tools_without_their_own(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    cfg = RunConfig(approval_timeout=HOUR, remind_after=600, escalate_after=1800, escalate_to=["x"])
    async with serving(client, archivist) as tq:
        result = await Runner.run(
            archivist, "go", run_config=cfg, client=client, task_queue=tq, serve=False
        )
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        [pending] = (await _status(handle)).pending
        assert pending.deadline is not None and pending.requested_at is not None
        assert (pending.deadline - pending.requested_at).total_seconds() == HOUR
        await ts_env.sleep(timedelta(minutes=11))
        [pending] = (await _status(handle)).pending
        assert pending.reminded_at is not None and pending.escalated_at is None
        await ts_env.sleep(timedelta(minutes=50))
        out = await handle.result()
    [decision] = out.decisions
    assert decision.expired and "expired after 3600s" in out.final_output
    assert ledger.count() == 0
