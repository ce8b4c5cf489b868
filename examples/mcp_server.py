"""A small back-office MCP server (the official `mcp` package), for the MCP desk example.

Tools:
- `find_order(order_id)`: read-only.
- `refund_order(order_id, amount)`: a payment (the agent's side asks a person first).
- `close_account(customer)`: asks the user to confirm, in the middle of the call (MCP
  elicitation), and acts only on an explicit yes.

Every write is keyed by the caller's idempotency key (`hitl/idempotency_key` in the request's
`_meta`): a repeated call returns the first receipt instead of acting twice. Effects go to the
toy back office (`HITL_BACKOFFICE_DB`).

    python -m hitl.examples.mcp_server                       # stdio (the worker starts it)
    python -m hitl.examples.mcp_server --http --port 8931    # streamable HTTP at /mcp
    python -m hitl.examples.mcp_server --sse --port 8931     # HTTP + server-sent events at /sse
"""

from __future__ import annotations

import argparse
from typing import Any

from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel, Field

from hitl.examples import backoffice

server = FastMCP("backoffice")

ACCOUNTS = {"Ada Lovelace": 7001, "Alan Turing": 7002}


class CloseConfirmation(BaseModel):
    """The form the server asks a person to fill in before closing an account."""

    confirm: bool = Field(description="Close the account now")
    reason: str = Field(default="", description="Why (kept with the closure)")


def _key(ctx: Context[Any, Any, Any]) -> str:
    meta = ctx.request_context.meta
    extra = (meta.model_extra or {}) if meta is not None else {}
    key = extra.get("hitl/idempotency_key")
    if not isinstance(key, str) or not key:
        raise ValueError("this server needs an idempotency key (hitl/idempotency_key in _meta)")
    return key


@server.tool()
def find_order(order_id: int) -> str:
    """Look up an order: customer, item, total."""
    order = backoffice.ORDERS.get(order_id)
    if order is None:
        return f"No order {order_id}."
    return f"Order {order_id}: {order['item']} for {order['customer']}, ${order['total']:.2f}"


@server.tool()
def refund_order(order_id: int, amount: float, ctx: Context[Any, Any, Any]) -> str:
    """Refund (part of) an order to the customer's card."""
    order = backoffice.ORDERS.get(order_id)
    if order is None:
        return f"No order {order_id}; nothing refunded."
    total = float(str(order["total"]))
    if not 0 < amount <= total:
        return f"Refund must be between $0 and ${total:.2f}; nothing refunded."
    receipt = backoffice.perform(_key(ctx), "mcp-refund", order_id, amount)
    return f"Refunded ${amount:.2f} for order {order_id} (receipt {receipt})"


@server.tool()
async def close_account(customer: str, ctx: Context[Any, Any, Any]) -> str:
    """Close a customer's account (asks the user to confirm first)."""
    account = ACCOUNTS.get(customer)
    if account is None:
        return f"No account for {customer}."
    answer = await ctx.elicit(
        f"Close the account of {customer} (#{account})? This cannot be undone.",
        schema=CloseConfirmation,
    )
    if answer.action != "accept" or not answer.data.confirm:
        return f"The account of {customer} stays open ({answer.action})."
    receipt = backoffice.perform(_key(ctx), "mcp-close", account)
    return f"Closed the account of {customer} (receipt {receipt}): {answer.data.reason or '-'}"


def main() -> None:
    """Serve on stdio, on streamable HTTP with `--http`, or on HTTP+SSE with `--sse`."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    p.add_argument("--sse", action="store_true", help="HTTP with server-sent events (at /sse)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8931)
    args = p.parse_args()
    if args.http or args.sse:
        server.settings.host, server.settings.port = args.host, args.port
        server.settings.log_level = "WARNING"
        server.run(transport="sse" if args.sse else "streamable-http")
    else:
        server.run(transport="stdio")


if __name__ == "__main__":
    main()
