"""A signed tool inside an agent tool takes only signed decisions, at the root too
(time-skipping server). Fails when the root does not apply the nested tool's rule
(`ApprovalBook.needs_signature` finding the nested call's tool)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
import pytest_asyncio
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from hitl import Agent, ModelReply, ModelRequest, Runner, ScriptedModel, ToolContext, function_tool
from hitl.signing import key_id_for, new_key_pair, sign_input
from hitl.wire import (
    ApproverDirectory,
    ApproverEntry,
    DecisionInput,
    RunOutput,
    RunStatus,
    text_digest,
)
from tests.conftest import time_skipping_server
from tests.helpers import Ledger, record_effect, serving
from tests.workflows.test_invariants import refused_type

ANN_KEY, ANN_PUBLIC = new_key_pair()
ANN_ID = key_id_for(ANN_PUBLIC)
DIRECTORY = ApproverDirectory(
    approvers={"ann": ApproverEntry(groups=["finance"], keys={ANN_ID: ANN_PUBLIC})}
)


@pytest_asyncio.fixture(scope="module")
async def ts_env() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping server of its own (see tests/workflows/test_nested_waits.py)."""
    async with time_skipping_server() as env:
        yield env


@function_tool(needs_approval=True, signed_decisions=True, approvers=["group:finance"])
def transfer(ctx: ToolContext[object], amount: int) -> str:
    """Transfer money (signed decisions only).

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "transfer")
    return f"transferred ${amount}"


def clerk_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("transfer")
    if done:
        return ModelReply.say(done[0].output or "")
    return ModelReply.call("transfer", {"amount": 700})


def office_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("clerk")
    if done:
        return ModelReply.say(done[0].output or "")
    return ModelReply.call("clerk", {"input": "transfer 700"})


clerk = Agent(name="Clerk", tools=[transfer], model=ScriptedModel(clerk_script, "t.nsigned.c"))
office = Agent(
    name="Office",
    tools=[clerk.as_tool(tool_name="clerk")],
    model=ScriptedModel(office_script, "t.nsigned.o"),
)


async def test_an_unsigned_decision_on_a_nested_signed_call_is_refused_at_the_root(
    ts_env: WorkflowEnvironment, worker_cache: int, ledger: Ledger
) -> None:
    if worker_cache == 0:
        pytest.skip(
            "the Java time-skipping server stalls child workflow tasks that run local "
            "activities when nothing is cached (see tests/workflows/test_nested_waits.py)"
        )
    client = ts_env.client
    async with serving(client, office, directory=DIRECTORY) as tq:
        result = await Runner.run(office, "go", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        wid = result.workflow_id
        assert "/" in item.call_id and item.name == "transfer"
        handle = client.get_workflow_handle(wid, result_type=RunOutput)
        status = await handle.query("status", result_type=RunStatus)
        assert [p.signed_decisions for p in status.pending] == [True]
        seen = text_digest(item.arguments)
        unsigned = DecisionInput(call_id=item.call_id, approver="ann", seen_sha256=seen)
        for name in ("approve", "reject"):
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await handle.execute_update(name, unsigned)
            assert refused_type(err) == "Unsigned", name
        assert ledger.count("transfer") == 0
        good = sign_input(
            unsigned,
            kind="approve",
            workflow_id=wid,
            key_id=ANN_ID,
            key=ANN_KEY,
            now=datetime.fromtimestamp((await ts_env.get_current_time()).timestamp(), UTC),
        )
        await handle.execute_update("approve", good)
        out = await handle.result()
    assert out.final_output == "transferred $700" and ledger.count("transfer") == 1
    assert [(d.call_id, d.verified) for d in out.decisions] == [(item.call_id, True)]


@function_tool(needs_approval=True, approvers=["group:finance"])
def pay(ctx: ToolContext[object], amount: int) -> str:
    """Pay a supplier (finance decides).

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "pay")
    return f"paid ${amount}"


def payer_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("pay")
    if len(done) == 2:
        return ModelReply.say(" and ".join(r.output or "" for r in done))
    return ModelReply.call("pay", {"amount": 100 * (len(done) + 1)})


def payments_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("payer")
    if done:
        return ModelReply.say(done[0].output or "")
    return ModelReply.call("payer", {"input": "pay twice"})


payer = Agent(name="Payer", tools=[pay], model=ScriptedModel(payer_script, "t.nsigned.p"))
payments = Agent(
    name="Payments",
    tools=[payer.as_tool(tool_name="payer")],
    model=ScriptedModel(payments_script, "t.nsigned.ps"),
)


async def test_a_nested_run_knows_its_roots_approver_groups(
    ts_env: WorkflowEnvironment, worker_cache: int, ledger: Ledger
) -> None:
    """ann (group finance) approves the nested run's first payment with `always`; the rule
    decides its second payment too, which needs the groups of the root's approver directory
    in the nested run (it once had none, so the second call waited for a person)."""
    if worker_cache == 0:
        pytest.skip(
            "the Java time-skipping server stalls child workflow tasks that run local "
            "activities when nothing is cached (see tests/workflows/test_nested_waits.py)"
        )
    client = ts_env.client
    async with serving(client, payments, directory=DIRECTORY) as tq:
        result = await Runner.run(payments, "go", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        state = result.to_state()
        state.approve(item, always_approve=True, approver="ann")
        done = await Runner.run(payments, state, client=client, task_queue=tq, serve=False)
    assert done.interruptions == [], "the standing rule decided the second payment"
    assert done.final_output == "paid $100 and paid $200"
    assert ledger.count("pay") == 2
