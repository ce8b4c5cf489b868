"""Signed decisions: the run accepts a decision on a `signed_decisions` tool only when a key of
the named approver, from the worker's directory, signed exactly that decision
(time-skipping server)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from hitl import Agent, ModelReply, ModelRequest, Runner, ScriptedModel, ToolContext, function_tool
from hitl.signing import key_id_for, new_key_pair, sign_input
from hitl.wire import (
    ApproverDirectory,
    ApproverEntry,
    DecisionInput,
    DecisionRecord,
    RunOutput,
    RunStatus,
    text_digest,
)
from tests.helpers import Ledger, record_effect, serving, tool_activity_count
from tests.workflows.test_invariants import refused_type

ANN_KEY, ANN_PUBLIC = new_key_pair()
BOB_KEY, BOB_PUBLIC = new_key_pair()
ANN_ID, BOB_ID = key_id_for(ANN_PUBLIC), key_id_for(BOB_PUBLIC)
DIRECTORY = ApproverDirectory(
    approvers={
        "ann": ApproverEntry(groups=["finance"], keys={ANN_ID: ANN_PUBLIC}),
        "bob": ApproverEntry(groups=["finance"], keys={BOB_ID: BOB_PUBLIC}),
    }
)


@function_tool(needs_approval=True, signed_decisions=True, approvers=["group:finance"])
def pay(ctx: ToolContext[object], amount: int) -> str:
    """Pay a supplier.

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "pay")
    return f"paid ${amount}"


def script(req: ModelRequest) -> ModelReply:
    done = req.results_for("pay")
    if done:
        return ModelReply.say(done[0].output or "")
    return ModelReply.call("pay", {"amount": 900})


payer = Agent(name="Signed payer", tools=[pay], model=ScriptedModel(script, "tests.signed"))


CLOCK: list[datetime] = []
"""The time-skipping server's time when the test began (signatures expire by the run's clock)."""


def _signed(wid: str, d: DecisionInput, *, kind: str = "approve", **kw: Any) -> DecisionInput:
    key, key_id = kw.pop("key", ANN_KEY), kw.pop("key_id", ANN_ID)
    kw.setdefault("now", CLOCK[-1])
    return sign_input(d, kind=kind, workflow_id=wid, key_id=key_id, key=key, **kw)


async def test_only_a_decision_signed_by_its_approver_is_taken(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    CLOCK.append(await ts_env.get_current_time())
    async with serving(client, payer, directory=DIRECTORY) as tq:
        result = await Runner.run(payer, "pay", client=client, task_queue=tq, serve=False)
        item = result.interruptions[0]
        wid, call_id, seen = result.workflow_id, item.call_id, text_digest(item.arguments)
        handle = client.get_workflow_handle(wid, result_type=RunOutput)
        ann = DecisionInput(call_id=call_id, approver="ann", seen_sha256=seen)
        good = _signed(wid, ann)
        now = CLOCK[-1]
        refusals = {
            "unsigned (the plain temporal CLI)": (ann, "Unsigned"),
            "an unknown key": (good.model_copy(update={"key_id": "0" * 16}), "UnknownKey"),
            "ann's key, claimed by bob": (
                _signed(wid, DecisionInput(call_id=call_id, approver="bob", seen_sha256=seen)),
                "WrongApprover",
            ),
            "forged: bob's key under ann's key id": (
                _signed(wid, ann, key=BOB_KEY),
                "BadSignature",
            ),
            "signed for another run": (_signed("another-run", ann), "BadSignature"),
            "altered after signing (the message, or the reason the audit shows)": (
                good.model_copy(update={"message": "x", "always": True}),
                "BadSignature",
            ),
            "altered reason": (good.model_copy(update={"reason": "forged"}), "BadSignature"),
            "signed for other arguments": (
                _signed(wid, ann.model_copy(update={"seen_sha256": text_digest('{"amount":9}')})),
                "ArgumentsChanged",
            ),
            "signed without naming the arguments": (
                good.model_copy(update={"seen_sha256": None}),
                "Unbound",
            ),
            "altered arguments": (
                good.model_copy(update={"arguments": {"amount": 9000}}),
                "BadSignature",
            ),
            "expired": (
                _signed(wid, ann, now=now - timedelta(hours=3), lifetime=timedelta(hours=1)),
                "SignatureExpired",
            ),
            "valid for too long": (
                _signed(wid, ann, lifetime=timedelta(days=30)),
                "SignatureExpired",
            ),
            "not base64": (good.model_copy(update={"signature": "%%%"}), "BadSignature"),
        }
        for what, (d, expected) in refusals.items():
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await handle.execute_update("approve", d)
            assert refused_type(err) == expected, what
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await handle.execute_update("reject", good)  # signed as an approval
        assert refused_type(err) == "BadSignature"
        await handle.signal("approve", ann)  # unsigned, by signal: recorded as refused
        status = await handle.query("status", result_type=RunStatus)
        assert status.decisions == [] and [r.error_type for r in status.refused] == ["Unsigned"]
        assert tool_activity_count(await handle.fetch_history()) == 0

        rec: DecisionRecord = await handle.execute_update(
            "approve", good, result_type=DecisionRecord
        )
        out = await handle.result()
    assert (rec.approver, rec.verified, rec.key_id) == ("ann", True, ANN_ID)
    assert out.final_output == "paid $900" and ledger.count("pay") == 1
    assert out.decisions[0].verified


async def test_a_signed_edit_covers_the_edited_arguments(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    CLOCK.append(await ts_env.get_current_time())
    async with serving(client, payer, directory=DIRECTORY) as tq:
        result = await Runner.run(payer, "pay", client=client, task_queue=tq, serve=False)
        item = result.interruptions[0]
        wid, call_id = result.workflow_id, item.call_id
        handle = client.get_workflow_handle(wid, result_type=RunOutput)
        edit = _signed(
            wid,
            DecisionInput(
                call_id=call_id,
                approver="bob",
                arguments={"amount": 90},
                seen_sha256=text_digest(item.arguments),
            ),
            key=BOB_KEY,
            key_id=BOB_ID,
        )
        await handle.execute_update("approve", edit)
        out = await handle.result()
    assert out.decisions[0].verified and "paid $90" in out.final_output


async def test_signed_tools_need_a_directory_on_the_worker(ts_env: WorkflowEnvironment) -> None:
    client = ts_env.client
    async with serving(client, payer) as tq:
        with pytest.raises(Exception) as err:
            await Runner.run(payer, "pay", client=client, task_queue=tq, serve=False)
    assert "need signed decisions" in str(err.value)
