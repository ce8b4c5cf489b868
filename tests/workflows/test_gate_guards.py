"""Guards of the approval gate that a mutation run broke without the suite noticing.

On the time-skipping server, with the worker cache on and off (tests/workflows/conftest.py):
run-level approver lists, the calls of one turn running side by side, and one idempotency key
across Temporal's retries of a tool call.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from hitl import (
    Agent,
    ModelReply,
    ModelRequest,
    NotAuthorizedError,
    RunConfig,
    Runner,
    ScriptedModel,
    ToolContext,
    function_tool,
)
from hitl.wire import DecisionInput, RunStatus
from tests.helpers import (
    Ledger,
    record_effect,
    serving,
    state_events,
    tool_activity_count,
    wait_for,
)

# ----------------------------------------------------------------------------- run-level approvers


@function_tool(needs_approval=True)
def pay_invoice(ctx: ToolContext[object], invoice: str) -> str:
    """Pay an invoice (needs approval; no approver list of its own).

    Args:
        invoice: The invoice number.
    """
    record_effect(ctx, "pay_invoice")
    return f"paid {invoice}"


@function_tool(needs_approval=True, approvers=["legal"])
def sign_contract(ctx: ToolContext[object], contract: str) -> str:
    """Sign a contract (needs approval; only `legal` may decide).

    Args:
        contract: The contract number.
    """
    record_effect(ctx, "sign_contract")
    return f"signed {contract}"


def back_office_script(req: ModelRequest) -> ModelReply:
    """Pay an invoice and sign a contract in one turn, then report both outputs."""
    done = req.tool_results()
    if not done:
        return ModelReply.calls(
            ("pay_invoice", {"invoice": "INV-1"}),
            ("sign_contract", {"contract": "C-9"}),
        )
    return ModelReply.say(" | ".join(r.output or "" for r in done))


back_office = Agent(
    name="Back office",
    tools=[pay_invoice, sign_contract],
    model=ScriptedModel(back_office_script, "tests.gate.back_office"),
)


async def test_run_level_approvers_refuse_others_and_a_tool_list_overrides_them(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    """Catches `RunConfig(approvers=[...])` being ignored (a call's approvers taken from its tool
    alone): "mallory" could then approve a call the run reserves to "alice". Also catches the
    run's list replacing a tool's own list (the tool's list takes precedence)."""
    client = ts_env.client
    config = RunConfig(approvers=["alice"])
    async with serving(client, back_office, cache=cache_size) as tq:
        result = await Runner.run(
            back_office,
            "go",
            run_config=config,
            client=client,
            task_queue=tq,
            serve=False,
        )
        pay = next(i for i in result.interruptions if i.name == "pay_invoice")
        sign = next(i for i in result.interruptions if i.name == "sign_contract")
        handle = client.get_workflow_handle(result.workflow_id)
        status = await handle.query("status", result_type=RunStatus)
        assert {p.tool_name: p.approvers for p in status.pending} == {
            "pay_invoice": ["alice"],  # the run's list
            "sign_contract": ["legal"],  # the tool's own list wins
        }
        before = state_events(await handle.fetch_history())

        refused = [
            ("approve", pay.call_id, "mallory", "pay_invoice", "alice"),
            ("reject", pay.call_id, "mallory", "pay_invoice", "alice"),
            ("approve", pay.call_id, None, "pay_invoice", "alice"),
            ("approve", pay.call_id, "legal", "pay_invoice", "alice"),
            ("approve", sign.call_id, "alice", "sign_contract", "legal"),
        ]
        for kind, call_id, who, tool, allowed in refused:
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await handle.execute_update(kind, DecisionInput(call_id=call_id, approver=who))
            assert err.value.cause.type == "NotAuthorized", (kind, who, tool)  # type: ignore[union-attr]
            assert f"may not decide {tool} calls (allowed: {allowed})" in str(err.value.cause)

        # Typed through the Python API too.
        state = result.to_state()
        state.approve(pay, approver="mallory")
        with pytest.raises(NotAuthorizedError, match="may not decide pay_invoice calls"):
            await Runner.run(back_office, state, client=client, task_queue=tq, serve=False)

        # Refusals change nothing: both calls still wait, no tool ran.
        hist = await handle.fetch_history()
        assert state_events(hist) == before
        assert tool_activity_count(hist) == 0
        status = await handle.query("status", result_type=RunStatus)
        assert status.decisions == []
        assert sorted(p.call_id for p in status.pending) == sorted([pay.call_id, sign.call_id])
        assert ledger.count() == 0

        state = result.to_state()
        state.approve(pay, approver="alice")
        state.approve(sign, approver="legal")
        result = await Runner.run(back_office, state, client=client, task_queue=tq, serve=False)

    assert result.final_output == "paid INV-1 | signed C-9"
    assert {d.tool_name: d.approver for d in result.decisions} == {
        "pay_invoice": "alice",
        "sign_contract": "legal",
    }
    assert sorted(r[1] for r in ledger.rows()) == ["pay_invoice", "sign_contract"]
    assert tool_activity_count(await handle.fetch_history()) == 2


# ----------------------------------------------------------------------------- side by side


RENDEZVOUS_SECONDS = 10.0


@function_tool
async def rendezvous(ctx: ToolContext[object], side: str) -> str:
    """Arrive, then wait (bounded) for the other call of the turn to arrive too.

    Args:
        side: Which call this is.
    """
    record_effect(ctx, "rendezvous")
    ledger = Ledger(Path(os.environ["HITL_TEST_LEDGER"]))
    try:
        await wait_for(
            lambda: ledger.count("rendezvous") >= 2,
            timeout=RENDEZVOUS_SECONDS,
            what="the other call of the turn",
        )
    except AssertionError:
        return f"{side}: sequential"
    return f"{side}: overlapped"


def pair_script(req: ModelRequest) -> ModelReply:
    """Two approval-free calls in one turn, then both outputs."""
    done = req.results_for("rendezvous")
    if not done:
        return ModelReply.calls(("rendezvous", {"side": "left"}), ("rendezvous", {"side": "right"}))
    return ModelReply.say(" | ".join(r.output or "" for r in done))


pair_agent = Agent(
    name="Pair",
    tools=[rendezvous],
    model=ScriptedModel(pair_script, "tests.gate.pair"),
)


def execute_tool_events(hist: WorkflowHistory) -> tuple[dict[int, int], list[int]]:
    """execute_tool activities: {scheduled event id: id of the workflow task that scheduled
    it}, and the ids of their completion events."""
    scheduled: dict[int, int] = {}
    completed: list[int] = []
    for e in hist.events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = e.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "execute_tool":
                scheduled[e.event_id] = attrs.workflow_task_completed_event_id
        elif (
            e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
            and e.activity_task_completed_event_attributes.scheduled_event_id in scheduled
        ):
            completed.append(e.event_id)
    return scheduled, completed


async def test_calls_of_one_turn_run_side_by_side(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    """Catches the calls of one turn running one after another instead of concurrently: each
    call waits for the other to start, which only happens if both run at once, and history
    shows both activities scheduled by one workflow task before either completed."""
    client = ts_env.client
    async with serving(client, pair_agent, cache=cache_size) as tq:
        result = await Runner.run(pair_agent, "meet", client=client, task_queue=tq, serve=False)
    assert result.final_output == "left: overlapped | right: overlapped", (
        "each call saw the other running"
    )
    assert ledger.count("rendezvous") == 2
    hist = await client.get_workflow_handle(result.workflow_id).fetch_history()
    scheduled, completed = execute_tool_events(hist)
    assert len(scheduled) == 2 and len(completed) == 2
    assert len(set(scheduled.values())) == 1, "one workflow task scheduled both calls"
    assert max(scheduled) < min(completed), "both were scheduled before either completed"


# ----------------------------------------------------------------------------- one key


@function_tool(max_attempts=3)
def flaky_charge(ctx: ToolContext[object], amount: int) -> str:
    """Charge a card; the first attempt fails after the charge went through (a lost reply).

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "flaky_charge")
    if ctx.attempt == 1:
        raise RuntimeError("card network timeout")
    return f"charged {amount} (attempt {ctx.attempt})"


def charge_once(req: ModelRequest) -> ModelReply:
    done = req.results_for("flaky_charge")
    if not done:
        return ModelReply.call("flaky_charge", {"amount": 40})
    return ModelReply.say(done[0].output or "")


charger = Agent(
    name="Charger",
    tools=[flaky_charge],
    model=ScriptedModel(charge_once, "tests.gate.charger"),
)


async def test_idempotency_key_is_the_same_on_every_attempt(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    """Catches an idempotency key that changes between attempts of one call (for example one
    that includes the attempt number): Temporal's retry would then repeat the effect."""
    client = ts_env.client
    async with serving(client, charger, cache=cache_size) as tq:
        result = await Runner.run(charger, "charge", client=client, task_queue=tq, serve=False)
    assert result.final_output == "charged 40 (attempt 2)"
    [model_id] = [i.raw_item["call_id"] for i in result.new_items if i.type == "tool_call_item"]
    assert model_id != "t1.1"
    key = f"{result.workflow_id}:t1.1"  # the run's own id of the call
    attempts = ledger.attempts("flaky_charge")
    assert [(a.key, a.attempt) for a in attempts] == [(key, 1), (key, 2)]
    assert ledger.rows("flaky_charge") == [(key, "flaky_charge", '{"amount": 40}', 2)], (
        "one effect, absorbed once"
    )
    # The retry was Temporal's: one activity, started the second time as attempt 2.
    hist = await client.get_workflow_handle(result.workflow_id).fetch_history()
    assert tool_activity_count(hist, "flaky_charge") == 1
    started = [
        e.activity_task_started_event_attributes.attempt
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert started == [2]
