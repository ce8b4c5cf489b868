"""`hitl.testing.ToolCheck`: a tool author's tests of approval and execution, without a server.
The refund desk's tool: two approvers over $1,000, an approver callback and two-key
auto-approval for the rest."""

from __future__ import annotations

from typing import Any

import pytest

from hitl import ApprovalRequest, RunConfig, ToolContext, UserAction, function_tool
from hitl.testing import ToolCheck
from tests.workflows.test_four_eyes import refund


def send_if_confirmed(ctx: ToolContext[object], to: str, action: UserAction) -> str:
    """Send a letter.

    Args:
        to: Who gets it.
    """
    return f"sent to {to}" if action.primary_confirmed else "not sent"


def request_for(params: dict[str, Any]) -> ApprovalRequest:
    return ApprovalRequest(title=f"Send to {params['to']}?", message="A letter goes out.")


letter = function_tool(needs_approval=True, approval_request=request_for)(send_if_confirmed)


@function_tool(needs_approval=lambda ctx, params, call_id: params["n"] > 3)
def count(n: int) -> str:
    """Count.

    Args:
        n: How far.
    """
    return " ".join(str(i) for i in range(1, n + 1))


async def test_the_policy_and_the_decision_order_for_one_call() -> None:
    check = ToolCheck(refund)
    small = await check.decide({"order": 1, "amount": 40})
    assert (small.outcome, small.source) == ("approved", "policy"), "the approver callback"
    large = await check.decide(
        {"order": 2, "amount": 5000}, run_config=RunConfig(auto_approve=True)
    )
    assert (large.outcome, large.required_approvals) == ("waits", 2), "no automatic approval"
    assert large.approvers == ["ann", "bob", "cy"]
    ruled = await check.decide({"order": 3, "amount": 5000}, rules=[("reject", "ann")])
    assert (ruled.outcome, ruled.source) == ("rejected", "always_rule")
    bad = await check.decide({"order": "x", "amount": 1})
    assert bad.outcome == "refused" and "order" in (bad.message or "")


async def test_predicates_requests_and_execution() -> None:
    counting = ToolCheck(count)
    assert not await counting.needs_approval({"n": 2})
    assert await counting.needs_approval({"n": 9})
    assert (await counting.decide({"n": 2})).outcome == "approved"
    assert (await counting.decide({"n": 9})).outcome == "waits"
    assert await counting.execute({"n": 3}) == "1 2 3"

    sending = ToolCheck(letter)
    request = await sending.request({"to": "Ann"})
    assert request is not None and request.title == "Send to Ann?"
    assert (await sending.decide({"to": "Ann"})).request.title == "Send to Ann?"  # type: ignore[union-attr]
    assert await sending.execute({"to": "Ann"}) == "sent to Ann"
    assert await sending.execute({"to": "Ann"}, confirmed=False) == "not sent"


def test_a_tool_must_belong_to_the_agent_given() -> None:
    with pytest.raises(ValueError):
        ToolCheck(count, agent=ToolCheck(letter).agent)
