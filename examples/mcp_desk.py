"""MCP desk: a back-office agent whose tools come from an MCP server.

The server (`hitl.examples.mcp_server`, written with the official `mcp` package) is started by
the worker over stdio, or reached over streamable HTTP when `HITL_MCP_URL` is set. The run lists
its tools when it starts and keeps that list. `find_order` runs freely; `refund_order` waits for
a person (the worker's `require_approval`); `close_account` asks its own question in the middle
of the call (MCP elicitation), which waits, durably, for a person's `answer`.

The model is a `ScriptedModel` (offline and deterministic, not a language model); set
`HITL_MCP_DESK_MODEL=gpt-4.1` (and `OPENAI_API_KEY` on the worker) to use a real one.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from hitl import Agent, ApprovalRequest, ModelReply, ModelRequest, ScriptedModel
from hitl.examples import backoffice
from hitl.mcp import MCPServer, MCPServerStdio, MCPServerStreamableHttp


def refund_request(params: dict[str, Any]) -> ApprovalRequest:
    """What the approver sees for a refund through the MCP server."""
    order = backoffice.ORDERS.get(params.get("order_id", 0), {})
    return ApprovalRequest(
        title=f"Refund ${params.get('amount', 0):.2f} on order {params.get('order_id')}",
        message=(
            f"The payments server will refund ${params.get('amount', 0):.2f} of the "
            f"${order.get('total', 0):.2f} order to {order.get('customer', 'the customer')}."
        ),
        primary_label="Refund",
        secondary_label="Hold",
    )


def backoffice_server() -> MCPServer:
    """The MCP server, as this worker reaches it."""
    options: dict[str, Any] = {
        "require_approval": {"find_order": "never", "close_account": "never", "*": "always"},
        "tool_overrides": {"refund_order": {"approval_request": refund_request}},
    }
    url = os.environ.get("HITL_MCP_URL")
    if url:
        return MCPServerStreamableHttp("backoffice", url=url, **options)
    return MCPServerStdio(
        "backoffice",
        command=sys.executable,
        args=["-m", "hitl.examples.mcp_server"],
        env={"HITL_BACKOFFICE_DB": str(backoffice.db_path().resolve())},
        **options,
    )


def mcp_desk_script(req: ModelRequest) -> ModelReply:
    """Offline stand-in for a model: look the order up, refund it, close the account asked."""
    text = req.last_user_text()
    done = {r.name: r for r in req.tool_results()}
    order = re.search(r"\b(\d{4})\b", text)
    amount = re.search(r"\$(\d+(?:\.\d+)?)", text)
    if order and "find_order" not in done:
        return ModelReply.call("find_order", {"order_id": int(order.group(1))})
    if order and amount and "refund_order" not in done:
        return ModelReply.call(
            "refund_order", {"order_id": int(order.group(1)), "amount": float(amount.group(1))}
        )
    closing = re.search(r"close the account of ([A-Z][a-z]+ [A-Z][a-z]+)", text, re.IGNORECASE)
    if closing and "close_account" not in done:
        return ModelReply.call("close_account", {"customer": closing.group(1)})
    return ModelReply.say("\n".join(r.output or "" for r in req.tool_results()) or "Nothing to do.")


agent: Agent[Any] = Agent(
    name="MCP desk",
    instructions=(
        "You handle refunds and account closures with the back-office server's tools. Look an "
        "order up before refunding it; refunds need a person's approval."
    ),
    mcp_servers=[backoffice_server()],
    model=os.environ.get("HITL_MCP_DESK_MODEL")
    or ScriptedModel(mcp_desk_script, "examples.mcp_desk"),
)
