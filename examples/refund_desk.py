"""Refund desk: a back-office agent that looks up orders, refunds and cancels them.

- `lookup_order` never needs approval.
- `refund` needs a person above `REFUND_APPROVAL_LIMIT` ($100), from the `finance` group of the
  worker's approver directory (`HITL_APPROVERS`), two different ones above `FOUR_EYES_LIMIT`
  ($1,000); decisions must be signed; a reminder after 4 hours, `finance-leads` may decide too
  after a day, and the call expires after 3 days (docs/governance.md walks through it).
- `cancel_order` always needs approval (from anyone the run's rules admit).

A worker serving this agent needs an approver directory with keys and both groups:
`DEMO_PEOPLE` are the people of the demo's (`make demo`, `hitl dev` make one with
`hitl.signing.local_directory`).

The model is a `ScriptedModel` (offline and deterministic, not a language model); set
`HITL_REFUND_DESK_MODEL=gpt-4.1` (and `OPENAI_API_KEY` on the worker) to use a real one.
"""

from __future__ import annotations

import json
import os
import re
from decimal import Decimal
from typing import Any

from hitl import (
    Agent,
    ApprovalRequest,
    ModelReply,
    ModelRequest,
    RunContextWrapper,
    ScriptedModel,
    ToolContext,
    function_tool,
)
from hitl.examples import backoffice
from hitl.signing import LOCAL_PEOPLE

REFUND_APPROVAL_LIMIT = Decimal(100)
"""Refunds above this need a person."""
FOUR_EYES_LIMIT = Decimal(1000)
"""Refunds above this need two different people of `finance`."""
HOUR, DAY = 3600, 86400
DEMO_PEOPLE = LOCAL_PEOPLE
"""The demo's approver directory: ann and bob of `finance`, lee of `finance-leads`."""


@function_tool
def lookup_order(order_id: int) -> dict[str, Any]:
    """Look up an order.

    Args:
        order_id: The order number.
    """
    order = backoffice.ORDERS.get(order_id)
    if order is None:
        return {"order_id": order_id, "error": "no such order"}
    return {"order_id": order_id, **order}


def _amount(params: dict[str, Any]) -> Decimal | None:
    """The refund's amount as a finite decimal; `None` when it is not a plain number."""
    try:
        amount = Decimal(str(params.get("amount")))
    except ArithmeticError:
        return None
    return amount if amount.is_finite() else None


def refund_needs_approval(
    _ctx: RunContextWrapper[Any], params: dict[str, Any], _call_id: str
) -> bool:
    """Refunds above the limit need a person; so does an amount that is not a plain number."""
    amount = _amount(params)
    return amount is None or amount > REFUND_APPROVAL_LIMIT


def over_a_thousand(_ctx: RunContextWrapper[Any], params: dict[str, Any], _call_id: str) -> int:
    """Four eyes above $1,000 (and for an amount that is not a plain number)."""
    amount = _amount(params)
    return 2 if amount is None or amount > FOUR_EYES_LIMIT else 1


def refund_request(params: dict[str, Any]) -> ApprovalRequest:
    """What the approver sees for a refund (reads only)."""
    order = backoffice.ORDERS.get(int(params["order_id"]), {})
    customer = order.get("customer", "unknown customer")
    total = order.get("total")
    share = f" of the ${total:,.2f} order" if total else ""
    return ApprovalRequest(
        title=f"Refund ${float(params['amount']):,.2f} to {customer} (order {params['order_id']})",
        message=(
            f"The agent wants to refund ${float(params['amount']):,.2f}{share} "
            f"({order.get('item', 'item unknown')}) because: {params['reason']}. Refunds above "
            f"${REFUND_APPROVAL_LIMIT:,.0f} need a person of finance, above "
            f"${FOUR_EYES_LIMIT:,.0f} two different ones."
        ),
        primary_label="Refund",
        secondary_label="Decline",
    )


def cancel_request(params: dict[str, Any]) -> ApprovalRequest:
    """What the approver sees for a cancellation."""
    order = backoffice.ORDERS.get(int(params["order_id"]), {})
    return ApprovalRequest(
        title=f"Cancel order {params['order_id']} ({order.get('item', 'unknown item')})",
        message=(
            f"The agent wants to cancel order {params['order_id']} of "
            f"{order.get('customer', 'an unknown customer')}. Cancellations always need a person."
        ),
        primary_label="Cancel order",
        secondary_label="Keep order",
    )


@function_tool(
    needs_approval=refund_needs_approval,  # a person above $100
    approvers=["group:finance"],  # from the worker's approver directory
    required_approvals=over_a_thousand,  # four eyes above $1,000
    signed_decisions=True,  # who approved is a fact, not a claim
    remind_after=4 * HOUR,  # a reminder notification
    escalate_after=DAY,  # finance leads may decide too
    escalate_to=["group:finance-leads"],
    approval_timeout=3 * DAY,  # then it expires (its own outcome)
    approval_request=refund_request,
    max_attempts=5,  # retried safely: the back office keys each refund by ctx.idempotency_key
)
def refund(ctx: ToolContext[Any], order_id: int, amount: float, reason: str) -> str:
    """Refund part or all of an order to the customer's card.

    Args:
        order_id: The order to refund.
        amount: Amount in dollars.
        reason: Why the refund is due (shown to the approver).
    """
    receipt = backoffice.perform(ctx.idempotency_key, "refund", order_id, amount)
    return f"Refunded ${amount:.2f} on order {order_id} (receipt {receipt})"


@function_tool(needs_approval=True, approval_request=cancel_request, max_attempts=5)
def cancel_order(ctx: ToolContext[Any], order_id: int) -> str:
    """Cancel an order that has not shipped.

    Args:
        order_id: The order to cancel.
    """
    receipt = backoffice.perform(ctx.idempotency_key, "cancel", order_id)
    return f"Cancelled order {order_id} (receipt {receipt})"


AMOUNT = re.compile(r"\$\s?((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d{1,2})?)(?![\d,])")
"""A dollar amount as people write it: `$40`, `$1250.00`, `$1,250.00`."""
ORDER = re.compile(r"(?<![\d$,.])(\d{4})(?![\d]|\.\d|,\d)")
"""An order number: four digits that are not part of an amount."""


def read_amounts_and_orders(text: str) -> tuple[list[float], list[int]]:
    """The dollar amounts in `text`, and the orders it names (each once, in order of mention)."""
    amounts = [float(Decimal(m.group(1).replace(",", ""))) for m in AMOUNT.finditer(text)]
    rest = AMOUNT.sub(" ", text)  # an amount's digits never name an order
    orders = list(dict.fromkeys(int(n) for n in ORDER.findall(rest)))
    return amounts, orders


def verb_for(text: str, order: int) -> str | None:
    """What `text` asks for `order`: `cancel`, `refund` or `None`.

    The verb nearest before the order's first mention in its sentence ("cancel order 9 and
    refund $5 on order 7"), else the first one after it ("order 7 arrived broken: refund it").
    Amounts are blanked first, so the point in `$1,250.00` ends no sentence.
    """
    rest = AMOUNT.sub(" ", text).lower()
    found = re.search(rf"(?<![\d$,.]){order}(?![\d]|\.\d|,\d)", rest)
    if found is None:
        return None
    pos = found.start()
    start = max(rest.rfind(c, 0, pos) for c in ".!?") + 1
    before = max((rest.rfind(v, start, pos), v) for v in ("cancel", "refund"))
    if before[0] >= 0:
        return before[1]
    ends = [i for i in (rest.find(c, pos) for c in ".!?") if i >= 0]
    after = rest[pos : min(ends, default=len(rest))]
    hits = sorted((after.find(v), v) for v in ("cancel", "refund") if v in after)
    return hits[0][1] if hits else None


def planned_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    """The refunds and cancellations `text` asks for: one call per order, in order of mention.

    The k-th refund takes the k-th amount named (the last one when fewer are named; the order's
    total when none is).
    """
    amounts, orders = read_amounts_and_orders(text)
    lowered = text.lower()
    reason = "arrived broken" if "broken" in lowered else "customer request"
    calls: list[tuple[str, dict[str, Any]]] = []
    for i, order in enumerate(orders):
        verb = verb_for(text, order) or ("refund" if "refund" in lowered and i == 0 else None)
        if verb == "cancel":
            calls.append(("cancel_order", {"order_id": order}))
        elif verb == "refund":
            k = sum(1 for name, _ in calls if name == "refund")
            total = backoffice.ORDERS.get(order, {}).get("total", 0)
            amount = amounts[min(k, len(amounts) - 1)] if amounts else total
            calls.append(("refund", {"order_id": order, "amount": amount, "reason": reason}))
    return calls


def refund_desk_script(req: ModelRequest) -> ModelReply:
    """Offline stand-in for a model: look up, then refund/cancel what the message asks for."""
    text = req.last_user_text()
    _, orders = read_amounts_and_orders(text)
    results = req.tool_results()
    looked_up = {r.arguments.get("order_id") for r in results if r.name == "lookup_order"}
    if any(o not in looked_up for o in orders):
        return ModelReply.calls(*(("lookup_order", {"order_id": o}) for o in orders))
    if not any(r.name in ("refund", "cancel_order") for r in results):
        calls = planned_calls(text)
        if calls:
            return ModelReply.calls(*calls)
    done = [r for r in results if r.name in ("refund", "cancel_order")]
    if not done:
        return ModelReply.say("I looked into it; nothing needed changing.")
    lines = [f"- {r.name}({json.dumps(r.arguments)}): {r.output}" for r in done]
    return ModelReply.say("Here is what happened:\n" + "\n".join(lines))


agent: Agent[Any] = Agent(
    name="Refund desk",
    instructions=(
        "You work the refund desk. Look orders up before acting. Refunds above "
        f"${REFUND_APPROVAL_LIMIT:,.0f} (two people above ${FOUR_EYES_LIMIT:,.0f}) and every "
        "cancellation need a person's approval; "
        "if one is rejected, tell the customer what the reviewer said."
    ),
    tools=[lookup_order, refund, cancel_order],
    model=os.environ.get("HITL_REFUND_DESK_MODEL")
    or ScriptedModel(refund_desk_script, "examples.refund_desk"),
)
