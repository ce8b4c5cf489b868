"""Refund desk: a back-office agent that looks up orders, refunds and cancels them.

- `lookup_order` never needs approval.
- `refund` needs approval above `REFUND_APPROVAL_LIMIT` (a predicate, evaluated in an activity).
- `cancel_order` always needs approval.

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

REFUND_APPROVAL_LIMIT = 100.0


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


def refund_needs_approval(
    _ctx: RunContextWrapper[Any], params: dict[str, Any], _call_id: str
) -> bool:
    """Refunds above the limit need a person; so does an amount that is not a plain number."""
    try:
        amount = Decimal(str(params.get("amount")))
    except ArithmeticError:
        return True
    return not amount.is_finite() or amount > Decimal(str(REFUND_APPROVAL_LIMIT))


def refund_request(params: dict[str, Any]) -> ApprovalRequest:
    """What the approver sees for a refund (reads only)."""
    order = backoffice.ORDERS.get(int(params["order_id"]), {})
    customer = order.get("customer", "unknown customer")
    total = order.get("total")
    share = f" of the ${total:.2f} order" if total else ""
    return ApprovalRequest(
        title=f"Refund ${float(params['amount']):.2f} to {customer} (order {params['order_id']})",
        message=(
            f"The agent wants to refund ${float(params['amount']):.2f}{share} "
            f"({order.get('item', 'item unknown')}) because: {params['reason']}. Refunds above "
            f"${REFUND_APPROVAL_LIMIT:.0f} need a person."
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
    needs_approval=refund_needs_approval, approval_request=refund_request, max_attempts=5
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


def refund_desk_script(req: ModelRequest) -> ModelReply:
    """Offline stand-in for a model: look up, then refund/cancel what the message asks for."""
    text = req.last_user_text()
    lowered = text.lower()
    amounts, orders = read_amounts_and_orders(text)
    results = req.tool_results()
    looked_up = {r.arguments.get("order_id") for r in results if r.name == "lookup_order"}
    if any(o not in looked_up for o in orders):
        return ModelReply.calls(*(("lookup_order", {"order_id": o}) for o in orders))
    if not any(r.name in ("refund", "cancel_order") for r in results):
        calls: list[tuple[str, dict[str, Any]]] = []
        for i, order in enumerate(orders):
            sentence = next((s for s in re.split(r"[.!?]", text) if str(order) in s), "")
            if "cancel" in sentence.lower():
                calls.append(("cancel_order", {"order_id": order}))
            elif "refund" in sentence.lower() or ("refund" in lowered and i == 0):
                amount = amounts[0] if amounts else backoffice.ORDERS.get(order, {}).get("total", 0)
                reason = "arrived broken" if "broken" in lowered else "customer request"
                calls.append(("refund", {"order_id": order, "amount": amount, "reason": reason}))
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
        f"${REFUND_APPROVAL_LIMIT:.0f} and every cancellation need a person's approval; "
        "if one is rejected, tell the customer what the reviewer said."
    ),
    tools=[lookup_order, refund, cancel_order],
    model=os.environ.get("HITL_REFUND_DESK_MODEL")
    or ScriptedModel(refund_desk_script, "examples.refund_desk"),
)
