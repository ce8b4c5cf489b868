"""A policy's limit across runs, end to end (time-skipping server): the rule's `limit` is
answered by the namespace's `HitlLedger`, a call that runs is committed, a rejected one is
released, so the next run sees the total of what really happened."""

from __future__ import annotations

import uuid
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from hitl import Agent, ModelReply, ModelRequest, Runner, ScriptedModel, ToolContext, function_tool
from hitl.policy import parse_policy
from hitl.wire import (
    ACT_LEDGER_COMMIT,
    ACT_LEDGER_RELEASE,
    DecisionInput,
    DecisionRecord,
    RunOutput,
    RunStatus,
)
from tests.helpers import Ledger, record_effect, serving, tool_activity_count


@function_tool
def refund(ctx: ToolContext[object], customer_id: str, amount: int) -> str:
    """Refund a customer (the code never asks: the policy's limit does).

    Args:
        customer_id: The customer.
        amount: Dollars.
    """
    record_effect(ctx, "refund")
    return f"refunded ${amount} to {customer_id}"


def script(req: ModelRequest) -> ModelReply:
    """`CUSTOMER:AMOUNT`: one refund, then its output."""
    done = req.results_for("refund")
    if not done:
        customer, amount = req.last_user_text().split(":")
        return ModelReply.call("refund", {"customer_id": customer, "amount": int(amount)})
    return ModelReply.say(done[0].output or "")


# A regular activity, as a real model is: planning (and its ledger request) runs in it.
desk = Agent(
    name="Limited desk",
    tools=[refund],
    model=ScriptedModel(script, "tests.limits", local_activity=False),
)

POLICY = """
policy: limits
version: "1"
rules:
  - id: daily-total
    tools: [refund]
    limit:
      key: "refunds:{customer_id}"
      window: 24h
      measure: sum
      of: amount
      above: 5000
    effect: ask
    approvers: [manager]
"""


async def _run(client: Any, tq: str, text: str) -> Any:
    return await Runner.run(desk, text, client=client, task_queue=tq, serve=False)


async def test_a_limit_counts_what_ran_and_gives_back_what_was_rejected(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    # Ledgers are the namespace's (one per key): customers of this test's own.
    c1, c2 = f"C1-{uuid.uuid4().hex[:8]}", f"C2-{uuid.uuid4().hex[:8]}"
    async with serving(client, desk, policy=parse_policy(POLICY)) as tq:
        first = await _run(client, tq, f"{c1}:3000")
        assert first.final_output == f"refunded $3000 to {c1}", "under the limit: no one asked"
        second = await _run(client, tq, f"{c1}:3000")
        [item] = second.interruptions  # 6,000 in a day: a manager decides
        state = second.to_state()
        state.reject(item, message="Not today.", approver="manager")
        second = await Runner.run(desk, state, client=client, task_queue=tq, serve=False)
        third = await _run(client, tq, f"{c1}:2000")
        other = await _run(client, tq, f"{c2}:4000")
        hist = await client.get_workflow_handle(
            second.workflow_id, result_type=RunOutput
        ).fetch_history()
    assert second.final_output == "Not today."
    assert tool_activity_count(hist, "refund") == 0
    # The rejected 3,000 was given back: 3,000 + 2,000 is not above 5,000.
    assert third.final_output == f"refunded $2000 to {c1}" and not third.interruptions
    assert other.final_output == f"refunded $4000 to {c2}", "another customer, another total"
    assert ledger.count("refund") == 3


def _scheduled(hist: Any, activity: str) -> int:
    return sum(
        1
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    )


async def test_an_approvers_edit_reserves_the_edited_amount_and_releases_the_old(
    ts_env: WorkflowEnvironment, ledger: Ledger, cache_size: int
) -> None:
    """3,000 ran; a second 3,000 (6,000 in a day) asks the manager, who edits it to 1,000 and
    approves: the edit reserves 1,000 under its own id and the 3,000 held for the model's
    amount is released, so the day's total is 4,000 and a third 1,000 (5,000, not above) needs
    no one. (Before, the ledger refused the edited amount under the model's reservation id and
    the 3,000 stayed held, then committed: the third refund was asked about.)"""
    client = ts_env.client
    customer = f"C-{uuid.uuid4().hex[:8]}"
    async with serving(client, desk, cache=cache_size, policy=parse_policy(POLICY)) as tq:
        await _run(client, tq, f"{customer}:3000")
        second = await _run(client, tq, f"{customer}:3000")
        [item] = second.interruptions
        handle = client.get_workflow_handle(second.workflow_id, result_type=RunOutput)
        edited = {"customer_id": customer, "amount": 1000}
        await handle.execute_update(
            "approve",
            DecisionInput(call_id=item.call_id, approver="manager", arguments=edited),
            result_type=DecisionRecord,
        )
        out = await handle.result()
        hist = await handle.fetch_history()
        status = await handle.query("status", result_type=RunStatus)
        third = await _run(client, tq, f"{customer}:1000")
    assert f"refunded $1000 to {customer}" in out.final_output
    assert _scheduled(hist, ACT_LEDGER_RELEASE) == 1, "the model's 3,000 went back"
    assert _scheduled(hist, ACT_LEDGER_COMMIT) == 1, "the edited 1,000 counts"
    [before, after] = [v for v in status.verdicts if v.reservations]
    assert (before.reservations[0].amount, after.reservations[0].amount) == ("3000", "1000")
    assert third.final_output == f"refunded $1000 to {customer}" and not third.interruptions
    assert ledger.count("refund") == 3
