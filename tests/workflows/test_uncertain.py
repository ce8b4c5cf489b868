"""Crashes that ask a person: a payment whose attempt died midway is neither retried blindly
nor reported as an error; a person says what happened (time-skipping server)."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from hitl import (
    Agent,
    EffectUnknown,
    ModelReply,
    ModelRequest,
    Runner,
    ScriptedModel,
    ToolContext,
    function_tool,
)
from hitl.wire import (
    INBOX_MEMO,
    DecisionInput,
    InboxEntry,
    InboxMemo,
    Resolution,
    ResolveInput,
    RunOutput,
    RunStatus,
)
from tests.helpers import Ledger, record_effect, serving, tool_activity_count, wait_for
from tests.workflows.test_invariants import refused_type

LOST: set[str] = set()


@function_tool(needs_approval=True, retry_safe=False, approvers=["ann", "ops"])
def pay(ctx: ToolContext[object], amount: int) -> str:
    """Pay a supplier (the bank's answer may get lost after the money moved).

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "pay")  # the effect, once per idempotency key
    if ctx.idempotency_key not in LOST:  # the first answer for a key gets lost
        LOST.add(ctx.idempotency_key)
        raise EffectUnknown("the bank timed out after the request was sent")
    return f"paid ${amount}"


def script(req: ModelRequest) -> ModelReply:
    done = req.results_for("pay")
    if done:
        return ModelReply.say(done[0].output or "")
    return ModelReply.call("pay", {"amount": 300})


payer = Agent(name="Uncertain payer", tools=[pay], model=ScriptedModel(script, "tests.unc"))


async def _uncertain(client: Any, tq: str) -> tuple[Any, str]:
    result = await Runner.run(payer, "pay", client=client, task_queue=tq, serve=False)
    handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
    call_id = result.interruptions[0].call_id
    await handle.execute_update("approve", DecisionInput(call_id=call_id, approver="ann"))
    for _ in range(200):
        status: RunStatus = await handle.query("status", result_type=RunStatus)
        if status.phase == "awaiting_approval":
            break
    [pending] = status.pending
    assert (pending.kind, pending.call_id) == ("uncertain", call_id)
    assert pending.uncertain is not None and "bank timed out" in pending.uncertain.error
    return handle, call_id


@pytest.mark.parametrize(
    ("outcome", "expected", "effects"),
    [
        ("happened", "paid $300 (bank ref 77)", 1),
        ("give_up", "the bank refused it", 1),
    ],
)
async def test_an_uncertain_call_waits_for_a_person_who_settles_it(
    ts_env: WorkflowEnvironment, ledger: Ledger, outcome: str, expected: str, effects: int
) -> None:
    client = ts_env.client
    async with serving(client, payer) as tq:
        handle, call_id = await _uncertain(client, tq)
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await handle.execute_update("reject", DecisionInput(call_id=call_id, approver="ops"))
        assert refused_type(err) == "AlreadyDecided", "its approval is over: resolve it instead"
        for bad, kind in (
            (ResolveInput(call_id="nope", outcome="retry"), "UnknownCall"),
            (ResolveInput(call_id=call_id, outcome="retry", approver="eve"), "NotAuthorized"),
        ):
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await handle.execute_update("resolve", bad)
            assert refused_type(err) == kind
        res: Resolution = await handle.execute_update(
            "resolve",
            ResolveInput(
                call_id=call_id,
                outcome=outcome,  # type: ignore[arg-type]
                output="paid $300 (bank ref 77)",
                message="the bank refused it",
                approver="ops",
            ),
            result_type=Resolution,
        )
        out = await handle.result()
        hist = await handle.fetch_history()
    assert (res.outcome, res.approver) == (outcome, "ops")
    assert out.final_output == expected
    assert tool_activity_count(hist) == 1, "no attempt after the one that died"
    assert ledger.count("pay") == effects


async def test_retry_runs_it_again_with_the_same_key_so_the_effect_stays_one(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, payer) as tq:
        handle, call_id = await _uncertain(client, tq)
        await handle.execute_update(
            "resolve", ResolveInput(call_id=call_id, outcome="retry", approver="ops")
        )
        out = await handle.result()
        hist = await handle.fetch_history()
    assert out.final_output == "paid $300"
    assert tool_activity_count(hist) == 2, "the person's retry ran the tool once more"
    assert ledger.count("pay") == 1, "the same idempotency key: one effect"
    assert [a.attempt for a in ledger.attempts("pay")] == [1, 1]


async def test_the_inbox_memo_relists_an_approved_call_that_turned_uncertain(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """`hitl pending` reads the memo: it must say "uncertain" (settled by `resolve`), since
    when, not the approval the call had before, with the same call id and approvals."""
    client = ts_env.client
    async with serving(client, payer) as tq:
        handle, call_id = await _uncertain(client, tq)
        status: RunStatus = await handle.query("status", result_type=RunStatus)
        [pending] = status.pending
        assert pending.uncertain is not None and pending.requested_at is not None
        assert pending.waiting_since == pending.uncertain.since != pending.requested_at

        async def listed() -> list[InboxEntry]:
            desc = await handle.describe()
            memo = await desc.memo_value(INBOX_MEMO, type_hint=InboxMemo)
            return memo.calls

        await wait_for(
            lambda: _first_kind(listed(), "uncertain"), what="the memo to list it as uncertain"
        )
        [entry] = await listed()
        assert entry.call_id == call_id
        assert entry.requested_at == pending.uncertain.since
        await handle.execute_update(
            "resolve", ResolveInput(call_id=call_id, outcome="happened", approver="ops")
        )
        await handle.result()


async def _first_kind(calls: Any, kind: str) -> bool:
    listed: list[InboxEntry] = await calls
    return bool(listed) and listed[0].kind == kind
