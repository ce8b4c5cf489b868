"""Expiry is its own outcome, and every action on a call stays on the record after the run ends
(time-skipping server: a day-long deadline passes in a moment)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
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
from hitl.cli.audit import rows_of
from hitl.wire import (
    DecisionInput,
    ExtendInput,
    ResolveInput,
    RunOutput,
    RunStatus,
)
from tests.helpers import serving, tool_activity_count, wait_for

DAY = timedelta(days=1).total_seconds()
LOST: set[str] = set()


@function_tool(needs_approval=True, approval_timeout=DAY)
def wire_funds(amount: int) -> str:
    """Wire funds.

    Args:
        amount: Dollars.
    """
    return f"wired ${amount}"


@function_tool(needs_approval=True, approval_timeout=3 * DAY, retry_safe=False)
def pay_supplier(ctx: ToolContext[object], amount: int) -> str:
    """Pay a supplier (the first answer for a call gets lost: it turns uncertain).

    Args:
        amount: Dollars.
    """
    if ctx.idempotency_key not in LOST:
        LOST.add(ctx.idempotency_key)
        raise EffectUnknown("the bank timed out after the request was sent")
    return f"paid ${amount}"


def script(req: ModelRequest) -> ModelReply:
    results = req.tool_results()
    if results:
        return ModelReply.say("; ".join(f"{r.name}: {r.output}" for r in results))
    return ModelReply.calls(("wire_funds", {"amount": 900}), ("pay_supplier", {"amount": 300}))


desk = Agent(
    name="Audited desk",
    tools=[wire_funds, pay_supplier],
    model=ScriptedModel(script, "tests.audit_trail"),
)


def _refusal(err: pytest.ExceptionInfo[WorkflowUpdateFailedError]) -> tuple[str | None, str]:
    cause = err.value.cause
    assert isinstance(cause, ApplicationError)
    return cause.type, cause.message


async def test_an_expired_call_is_its_own_outcome_and_every_action_stays_audited(
    ts_env: WorkflowEnvironment,
) -> None:
    client = ts_env.client
    async with serving(client, desk) as tq:
        result = await Runner.run(desk, "pay both", client=client, task_queue=tq, serve=False)
        wire, pay = (p.call_id for p in result.interruptions)
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        await handle.execute_update(
            "extend", ExtendInput(call_id=pay, seconds=DAY, approver="ann", reason="on leave")
        )
        await ts_env.sleep(timedelta(days=1, hours=1))  # the wire's deadline passes

        async def status() -> RunStatus:
            return await handle.query("status", result_type=RunStatus)

        await wait_for(
            lambda: _decided(status, wire), what="the expiry to be recorded"
        )  # (the timer fired; the run records it at its next task)
        [expiry] = (await status()).decisions
        assert (expiry.kind, expiry.source, expiry.approver) == ("expired", "deadline", None)
        assert expiry.expired, "the flag stays, for readers that know only the flag"
        # A decision after the expiry, approve or reject, is refused with what happened.
        late = f"call '{wire}' expired at {expiry.decided_at.isoformat()}; nothing ran"
        for kind in ("reject", "approve"):
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await handle.execute_update(kind, DecisionInput(call_id=wire, approver="bob"))
            assert _refusal(err) == ("DeadlinePassed", late), kind
        await handle.signal("approve", {"call_id": wire, "approver": "carol"})
        await wait_for(lambda: _refused_count(status, 2), what="the signal to be refused")

        await handle.execute_update("approve", DecisionInput(call_id=pay, approver="ann"))
        await wait_for(lambda: _uncertain(status), what="the payment to turn uncertain")
        await handle.execute_update(
            "resolve",
            ResolveInput(call_id=pay, outcome="happened", output="paid $300", approver="ops"),
        )
        out = await handle.result()
        # The run has ended: its turn's calls are gone, what people did is not.
        ended = await status()
        hist = await handle.fetch_history()

    assert out.final_output == (
        "wire_funds: Approval for wire_funds expired after 86400s without a decision.; "
        "pay_supplier: paid $300"
    ), "the model is told what it was told before"
    assert [(d.call_id, d.kind) for d in out.decisions] == [(wire, "expired"), (pay, "approve")]
    assert tool_activity_count(hist, "wire_funds") == 0
    assert tool_activity_count(hist, "pay_supplier") == 1
    for actions in (out.actions, ended.actions):
        assert [(a.kind, a.call_id, a.approver, a.outcome) for a in actions] == [
            ("extend", pay, "ann", None),
            ("resolve", pay, "ops", "happened"),
        ]
    extension, resolution = out.actions
    assert (extension.reason, resolution.text) == ("on leave", "paid $300")
    assert extension.deadline is not None and extension.previous is not None
    assert extension.deadline - extension.previous == timedelta(days=1)
    # Refused rows keep whom and which call they named (a late update and a signal).
    assert [(r.via, r.name, r.call_id, r.approver, r.error_type) for r in ended.refused] == [
        ("update", "reject", wire, "bob", "DeadlinePassed"),
        ("signal", "approve", wire, "carol", "DeadlinePassed"),
    ]
    assert ended.refused[1].message == late
    # `hitl audit`'s rows of the ended run: every decision, action and refusal.
    rows = [(r["event"], r["kind"], r["call_id"], r["approver"]) for r in rows_of(ended)]
    assert sorted(rows, key=str) == sorted(
        [
            ("decision", "expired", wire, None),
            ("decision", "approve", pay, "ann"),
            ("action", "extend", pay, "ann"),
            ("action", "resolve", pay, "ops"),
            ("refused", "reject", wire, "bob"),
            ("refused", "approve", wire, "carol"),
        ],
        key=str,
    )


async def _decided(status: Any, call_id: str) -> bool:
    return any(d.call_id == call_id for d in (await status()).decisions)


async def _refused_count(status: Any, n: int) -> bool:
    return len((await status()).refused) >= n


async def _uncertain(status: Any) -> bool:
    return any(p.kind == "uncertain" for p in (await status()).pending)
