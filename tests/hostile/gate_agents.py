"""Agents for the every-surface tests: a four-eyes signed transfer, a signed tool that asks a
question mid-call, a tool with its own approver list, a gated agent tool, and models that
answer oddly. Every tool records its effect in the ledger (`HITL_TEST_LEDGER`)."""

from __future__ import annotations

import json
from typing import Any

from hitl import Agent, ModelReply, ModelRequest, ScriptedModel, ToolContext, function_tool
from hitl.mcp import InputRequired
from hitl.signing import key_id_for, new_key_pair
from hitl.wire import ApproverDirectory, ApproverEntry
from tests.helpers import record_effect

ANN_KEY, ANN_PUBLIC = new_key_pair()
BOB_KEY, BOB_PUBLIC = new_key_pair()
MALLORY_KEY, MALLORY_PUBLIC = new_key_pair()
ANN_ID, BOB_ID, MALLORY_ID = (key_id_for(k) for k in (ANN_PUBLIC, BOB_PUBLIC, MALLORY_PUBLIC))
DIRECTORY = ApproverDirectory(
    approvers={
        "ann": ApproverEntry(groups=["finance"], keys={ANN_ID: ANN_PUBLIC}),
        "bob": ApproverEntry(groups=["finance"], keys={BOB_ID: BOB_PUBLIC}),
        "mallory": ApproverEntry(groups=["interns"], keys={MALLORY_ID: MALLORY_PUBLIC}),
    }
)


def _once(tool: str, arguments: dict[str, Any]) -> Any:
    def script(req: ModelRequest) -> ModelReply:
        done = req.results_for(tool)
        if done:
            return ModelReply.say(done[-1].output or "")
        return ModelReply.call(tool, arguments)

    return script


# ----------------------------------------------------------------------------- signed four eyes


@function_tool(
    needs_approval=True, required_approvals=2, signed_decisions=True, approvers=["group:finance"]
)
def transfer(ctx: ToolContext[object], amount: int, to: str) -> str:
    """Transfer money.

    Args:
        amount: Dollars.
        to: The account.
    """
    record_effect(ctx, "transfer")
    return f"transferred ${amount} to {to}"


treasury = Agent(
    name="Signed treasury",
    tools=[transfer],
    model=ScriptedModel(
        _once("transfer", {"amount": 90000, "to": "ACME"}), "tests.hostile.surface.treasury"
    ),
)


# ----------------------------------------------------------------------------- a signed question


@function_tool(needs_approval=True, signed_decisions=True, approvers=["group:finance"])
def confirm_payout(ctx: ToolContext[object], amount: int) -> str:
    """Pay out, once the payment server confirms with a person (it asks mid-call).

    Args:
        amount: Dollars.
    """
    if not ctx.answers:
        raise InputRequired(
            server="payments",
            message=f"Really pay out ${amount}?",
            schema={"type": "object", "properties": {"confirm": {"type": "boolean"}}},
            index=0,
        )
    answer = ctx.answers[0]
    if answer.action != "accept" or not (answer.content or {}).get("confirm"):
        return "payout declined"
    record_effect(ctx, "confirm_payout")
    return f"paid out ${amount}"


payout_desk = Agent(
    name="Payout desk",
    tools=[confirm_payout],
    model=ScriptedModel(_once("confirm_payout", {"amount": 5000}), "tests.hostile.surface.payout"),
)


# ----------------------------------------------------------------------------- own approvers


@function_tool(needs_approval=True, approvers=["cfo"])
def pay_supplier(ctx: ToolContext[object], amount: int) -> str:
    """Pay a supplier (the CFO decides).

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "pay_supplier")
    return f"paid ${amount}"


cfo_desk = Agent(
    name="Supplier desk",
    tools=[pay_supplier],
    model=ScriptedModel(_once("pay_supplier", {"amount": 25000}), "tests.hostile.surface.cfo"),
)


# ----------------------------------------------------------------------------- a gated agent tool


@function_tool
def drain_account(ctx: ToolContext[object], account: str) -> str:
    """Move everything out of an account (safe only behind its agent tool's gate).

    Args:
        account: The account.
    """
    record_effect(ctx, "drain_account")
    return f"drained {account}"


vault = Agent(
    name="Vault",
    tools=[drain_account],
    model=ScriptedModel(_once("drain_account", {"account": "A-1"}), "tests.hostile.surface.vault"),
)


def front_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("open_vault")
    if done:
        return ModelReply.say(done[-1].output or "")
    return ModelReply.call("open_vault", {"input": "drain A-1"})


front_desk = Agent(
    name="Front desk",
    tools=[vault.as_tool("open_vault", "Open the vault", needs_approval=True)],
    model=ScriptedModel(front_script, "tests.hostile.surface.front"),
)


# ----------------------------------------------------------------------------- odd models


def over_100(ctx: Any, params: dict[str, Any], call_id: str) -> bool:
    """Refunds over $100 need a person (a comparison a NaN would slip through)."""
    return bool(params["amount"] > 100)


@function_tool(needs_approval=over_100)
def refund(ctx: ToolContext[object], amount: float) -> str:
    """Refund the customer.

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "refund")
    return f"refunded ${amount}"


ODD_ARGUMENTS = {
    "deep": '{"amount": 5, "note": ' + "[" * 3000 + "]" * 3000 + "}",
    "deep-object": None,  # a dict nested 3,000 levels (not a string)
    "nan": '{"amount": NaN}',
    "minus-infinity": '{"amount": -Infinity}',
    "overflow": '{"amount": 1e999}',
    "huge-integer": '{"amount": ' + "9" * 5000 + "}",
}


def _nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def odd_script(req: ModelRequest) -> ModelReply:
    """The user's message names an odd case; the model sends it, then reports what it read."""
    if req.results_for("refund"):
        return ModelReply.say(req.results_for("refund")[-1].output or "")
    case = req.last_user_text()
    if case == "deep-object":
        return ModelReply.raw(
            {
                "type": "function_call",
                "call_id": "call_deep",
                "name": "refund",
                "arguments": {"amount": 5, "note": _nested(3000)},
            }
        )
    if case.startswith("id:"):
        return ModelReply.call("refund", {"amount": 500}, call_id=case[3:])
    return ModelReply.call("refund", ODD_ARGUMENTS[case])


odd_desk = Agent(
    name="Odd desk",
    tools=[refund],
    model=ScriptedModel(odd_script, "tests.hostile.surface.odd"),
)

SURFACE_AGENTS = [treasury, payout_desk, cfo_desk, front_desk, odd_desk]


def arguments_of(call: Any) -> dict[str, Any]:
    loaded = json.loads(call.arguments)
    assert isinstance(loaded, dict)
    return loaded
