"""Agents from the seeds, importable by worker subprocesses (`--agents tests.agents:...`).

Tools record their effects in the SQLite ledger named by `HITL_TEST_LEDGER` (when set), keyed
by the idempotency key, so tests can count effects across worker crashes.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator

from hitl import (
    Agent,
    ApprovalRequest,
    ModelReply,
    ModelRequest,
    ScriptedModel,
    ToolContext,
    function_tool,
)
from tests.helpers import Ledger
from tests.helpers import record_effect as record

# ----------------------------------------------------------------------------- support (Python)


@function_tool(needs_approval=True)
async def cancel_order(ctx: ToolContext[object], order_id: int) -> str:
    """Cancel an order.

    Args:
        order_id: The order to cancel.
    """
    record(ctx, "cancel_order")
    return f"Cancelled order {order_id}"


async def requires_review(_ctx: object, params: dict[str, object], _call_id: str) -> bool:
    """The seeds' predicate: emails about refunds need a person."""
    return "refund" in str(params.get("subject", "")).lower()


@function_tool(needs_approval=requires_review)
async def send_email(ctx: ToolContext[object], subject: str, body: str) -> str:
    """Send an email to the customer.

    Args:
        subject: Subject line.
        body: Message body.
    """
    record(ctx, "send_email")
    return f"Sent '{subject}'"


def support_script(req: ModelRequest) -> ModelReply:
    """Cancel the order named in the request and email the customer about it."""
    text = req.last_user_text()
    results = req.tool_results()
    if results:
        return ModelReply.say("; ".join(f"{r.name}: {r.output}" for r in results))
    order = re.search(r"\d+", text)
    calls: list[tuple[str, dict[str, object]]] = []
    if "cancel" in text.lower() and order:
        calls.append(("cancel_order", {"order_id": int(order.group())}))
    if "email" in text.lower():
        subject = "Refund for your order" if "refund" in text.lower() else "About your order"
        calls.append(("send_email", {"subject": subject, "body": text}))
    if not calls:
        return ModelReply.say("Nothing to do.")
    return ModelReply.calls(*calls)


support_agent = Agent(
    name="Support agent",
    instructions="Handle tickets and ask for approval when needed.",
    tools=[cancel_order, send_email],
    model=ScriptedModel(support_script, "tests.support"),
)


# ----------------------------------------------------------------------------- local tools


@function_tool(needs_approval=True, local_activity=True, name_override="cancel_order")
async def cancel_order_here(ctx: ToolContext[object], order_id: int) -> str:
    """Cancel an order (as a local activity).

    Args:
        order_id: The order to cancel.
    """
    record(ctx, "cancel_order")
    return f"Cancelled order {order_id}"


@function_tool(local_activity=True, name_override="send_email", max_attempts=2)
async def flaky_email_here(ctx: ToolContext[object], subject: str, body: str) -> str:
    """Send an email to the customer (as a local activity; the first attempt fails).

    Args:
        subject: Subject line.
        body: Message body.
    """
    record(ctx, "send_email")
    if ctx.attempt == 1:
        raise ConnectionError("the mail server hung up")
    return f"Sent '{subject}'"


local_support_agent = Agent(
    name="Local support agent",
    instructions="Handle tickets and ask for approval when needed.",
    tools=[cancel_order_here, flaky_email_here],
    model=ScriptedModel(support_script, "tests.support-local"),
)
"""`support_agent`'s job and script, with both tools as local activities."""


# ----------------------------------------------------------------------------- weather (JS seed)


async def san_francisco_only(_ctx: object, params: dict[str, object], _call_id: str) -> bool:
    """Forces approval to look up the weather in San Francisco."""
    return params.get("location") == "San Francisco"


@function_tool(needs_approval=san_francisco_only)
def get_weather(ctx: ToolContext[object], location: str) -> str:
    """Get the weather for a given city.

    Args:
        location: The city.
    """
    record(ctx, "get_weather")
    return f"The weather in {location} is sunny"


def data_script(req: ModelRequest) -> ModelReply:
    """Look up every city in the question, then summarize."""
    results = req.results_for("get_weather")
    if not results:
        cities = [c for c in ("Oakland", "San Francisco") if c in req.last_user_text()]
        return ModelReply.calls(*(("get_weather", {"location": c}) for c in cities))
    return ModelReply.say(" ".join(r.output or "" for r in results))


def triage_script(req: ModelRequest) -> ModelReply:
    """Hand weather questions to the data agent."""
    if "weather" in req.last_user_text().lower():
        return ModelReply.call("transfer_to_data_agent")
    return ModelReply.say("I only know about the weather.")


data_agent = Agent(
    name="Data agent",
    instructions="You are a data agent",
    handoff_description="You know everything about the weather",
    tools=[get_weather],
    model=ScriptedModel(data_script, "tests.data"),
)

weather_agent = Agent(
    name="Basic test agent",
    instructions="You are a basic agent",
    handoffs=[data_agent],
    model=ScriptedModel(triage_script, "tests.triage"),
)


# ----------------------------------------------------------------------------- a slow tool


def _stamp(path: Path, text: str) -> None:
    """Write whole or not at all: tests kill this process once the file exists, and written in
    place, a kill between creating and writing it left it empty for the next worker."""
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text(text)
    partial.replace(path)


@function_tool(needs_approval=True, heartbeat_timeout=2.0, max_attempts=5)
def slow_refund(ctx: ToolContext[object], order_id: int) -> str:
    """Refund an order slowly (tests kill the worker while it runs).

    Args:
        order_id: The order to refund.
    """
    # The effect is committed first, then the call lingers: a crash now is the worst case
    # (effect done, activity not completed), which the idempotency key must absorb.
    record(ctx, "slow_refund")
    started = os.environ.get("HITL_TEST_STARTED")
    if started:
        _stamp(Path(started), str(ctx.attempt))
    if ctx.attempt == 1:
        time.sleep(float(os.environ.get("HITL_TEST_TOOL_SECONDS", "0")))
    return f"Refunded order {order_id}"


def refund_script(req: ModelRequest) -> ModelReply:
    """Refund the order in the message."""
    results = req.results_for("slow_refund")
    if results:
        return ModelReply.say(results[0].output or "")
    order = re.search(r"\d+", req.last_user_text())
    return ModelReply.call("slow_refund", {"order_id": int(order.group()) if order else 0})


refund_agent = Agent(
    name="Refunder",
    instructions="Refund what is asked.",
    tools=[slow_refund],
    model=ScriptedModel(refund_script, "tests.refund"),
)


@function_tool(needs_approval=True, local_activity=True, name_override="slow_refund")
def slow_refund_here(ctx: ToolContext[object], order_id: int) -> str:
    """Refund an order slowly, as a local activity (tests kill the worker while it runs).

    Args:
        order_id: The order to refund.
    """
    # As `slow_refund`, but a local activity that dies is run again from its first attempt:
    # the first execution in any process (no `HITL_TEST_STARTED` file yet) is the one that
    # lingers.
    record(ctx, "slow_refund")
    started = Path(os.environ["HITL_TEST_STARTED"])
    first = not started.exists()
    runs = int(started.read_text()) if not first else 0
    _stamp(started, str(runs + 1))
    if first:
        time.sleep(float(os.environ.get("HITL_TEST_TOOL_SECONDS", "0")))
    return f"Refunded order {order_id}"


local_refund_agent = Agent(
    name="Local refunder",
    instructions="Refund what is asked.",
    tools=[slow_refund_here],
    model=ScriptedModel(refund_script, "tests.refund-local"),
)

# ----------------------------------------------------------------------------- scale-out


# 4 s: a SIGKILLed worker's shipments are retried within seconds, while a worker that two busy
# cores starve for a second or two (CI) does not lose an attempt it is running to the timeout.
@function_tool(needs_approval=True, heartbeat_timeout=4.0, max_attempts=5)
async def ship_order(ctx: ToolContext[object], order_id: int) -> str:
    """Ship an order (tests kill and stop workers while shipments run).

    Args:
        order_id: The order to ship.
    """
    # The attempt (with its process) is noted first, then the effect, then the first attempt
    # lingers: a worker killed or stopped now leaves a committed effect and an unfinished
    # activity, the worst case for the idempotency key. How the body ended is noted too.
    # The ledger is written from a thread: SQLite waiting on another process's lock must not
    # hold up the event loop, and with it the activity's heartbeats.
    path = os.environ.get("HITL_TEST_LEDGER")
    ledger = Ledger(Path(path)) if path else None
    key = ctx.idempotency_key
    started = (
        await asyncio.to_thread(ledger.attempt, key, "ship_order", ctx.attempt) if ledger else 0
    )
    try:
        if ledger:
            args = json.dumps({"order_id": order_id})
            await asyncio.to_thread(ledger.effect, key, "ship_order", args)
        if ctx.attempt == 1:
            await asyncio.sleep(float(os.environ.get("HITL_TEST_TOOL_SECONDS", "0")))
    except asyncio.CancelledError:
        if ledger:
            ledger.finish(started, "cancelled")
        raise
    if ledger:
        await asyncio.to_thread(ledger.finish, started, "done")
    return f"Shipped order {order_id}"


def shipping_script(req: ModelRequest) -> ModelReply:
    """Ship the order in the message, then report the tool's output."""
    results = req.results_for("ship_order")
    if results:
        return ModelReply.say(results[0].output or "")
    order = re.search(r"\d+", req.last_user_text())
    return ModelReply.call("ship_order", {"order_id": int(order.group()) if order else 0})


shipping_agent = Agent(
    name="Shipping desk",
    instructions="Ship what is asked.",
    tools=[ship_order],
    model=ScriptedModel(shipping_script, "tests.shipping"),
)

ALL = [support_agent, weather_agent, refund_agent]

# ----------------------------------------------------------------------------- CLI tests


def serial_script(req: ModelRequest) -> ModelReply:
    """Cancel each order number in the message, one per turn, then report every outcome."""
    orders = [int(n) for n in re.findall(r"\d+", req.last_user_text())]
    done = req.results_for("cancel_order")
    if len(done) < len(orders):
        return ModelReply.call("cancel_order", {"order_id": orders[len(done)]})
    return ModelReply.say(" | ".join(r.output or "" for r in done))


serial_agent = Agent(
    name="Serial canceller",
    instructions="Cancel the orders one at a time.",
    tools=[cancel_order],
    model=ScriptedModel(serial_script, "tests.serial"),
)

# A name with a quote in it: the visibility query must escape it.
quoted_agent = Agent(
    name="O'Brien's desk",
    instructions="Handle tickets and ask for approval when needed.",
    tools=[cancel_order, send_email],
    model=ScriptedModel(support_script, "tests.quoted"),
)


@function_tool(needs_approval=True)
def lookup(ctx: ToolContext[object], topic: str) -> str:
    """Look a topic up (needs approval).

    Args:
        topic: What to look up.
    """
    record(ctx, "lookup")
    return f"facts about {topic}"


def looker_script(req: ModelRequest) -> ModelReply:
    """Look the input up once, then summarize."""
    done = req.results_for("lookup")
    if not done:
        return ModelReply.call("lookup", {"topic": req.last_user_text()})
    return ModelReply.say(f"summary: {done[0].output}")


def desk_script(req: ModelRequest) -> ModelReply:
    """Ask the agent tool about each word of the message, one per turn, then report."""
    topics = req.last_user_text().split()
    done = req.results_for("research")
    if len(done) < len(topics):
        return ModelReply.call("research", {"input": topics[len(done)]})
    return ModelReply.say(" | ".join(r.output or "" for r in done))


cli_looker = Agent(
    name="CLI looker",
    instructions="Look things up.",
    tools=[lookup],
    model=ScriptedModel(looker_script, "tests.cli.looker"),
)
# The agent tool starts without approval; the nested `lookup` needs one, decided at the root.
cli_desk = Agent(
    name="CLI desk",
    instructions="Delegate research.",
    tools=[cli_looker.as_tool(tool_name="research")],
    model=ScriptedModel(desk_script, "tests.cli.desk"),
)


def bulk_script(req: ModelRequest) -> ModelReply:
    """Cancel every order number in the message in one turn, then report every outcome."""
    done = req.results_for("cancel_order")
    if done:
        return ModelReply.say(" | ".join(r.output or "" for r in done))
    orders = [int(n) for n in re.findall(r"\d+", req.last_user_text())]
    return ModelReply.calls(*(("cancel_order", {"order_id": n}) for n in orders))


bulk_agent = Agent(
    name="Bulk canceller",
    instructions="Cancel all the orders at once.",
    tools=[cancel_order],
    model=ScriptedModel(bulk_script, "tests.bulk"),
)

# ----------------------------------------------------------------------------- soak: deadlines


@function_tool(needs_approval=True, approval_timeout=4.0)
def hold_stock(ctx: ToolContext[object], order_id: int) -> str:
    """Hold stock for an order; the approval lapses after 4 s (the soak lets it expire).

    Args:
        order_id: The order whose stock to hold.
    """
    record(ctx, "hold_stock")
    return f"Held stock for order {order_id}"


def holding_script(req: ModelRequest) -> ModelReply:
    """Hold stock for the order in the message, then report the tool's output."""
    results = req.results_for("hold_stock")
    if results:
        return ModelReply.say(results[0].output or "")
    order = re.search(r"\d+", req.last_user_text())
    return ModelReply.call("hold_stock", {"order_id": int(order.group()) if order else 0})


holding_agent: Agent[None] = Agent(
    name="Stock holder",
    instructions="Hold stock when asked; a person has 4 s to approve.",
    tools=[hold_stock],
    model=ScriptedModel(holding_script, "tests.holding"),
)


@function_tool(needs_approval=True, approval_timeout=12.0)
def reserve_stock(order_id: int) -> str:
    """Reserve stock for an order; the approval lapses after 12 s (long enough to be listed
    in an inbox first, on a loaded machine).

    Args:
        order_id: The order whose stock to reserve.
    """
    return f"Reserved stock for order {order_id}"


def reserving_script(req: ModelRequest) -> ModelReply:
    """Reserve stock for the order in the message, then report the tool's output."""
    results = req.results_for("reserve_stock")
    if results:
        return ModelReply.say(results[0].output or "")
    order = re.search(r"\d+", req.last_user_text())
    return ModelReply.call("reserve_stock", {"order_id": int(order.group()) if order else 0})


reserving_agent: Agent[None] = Agent(
    name="Stock reserver",
    instructions="Reserve stock when asked; a person has 12 s to approve.",
    tools=[reserve_stock],
    model=ScriptedModel(reserving_script, "tests.reserving"),
)

# ----------------------------------------------------------------------------- four eyes


@function_tool(
    needs_approval=True,
    required_approvals=2,
    approvers=["ann", "bob", "cy"],
    approval_timeout=3600.0,
)
def release_funds(ctx: ToolContext[object], amount: int) -> str:
    """Release funds (two people from finance must approve).

    Args:
        amount: Dollars.
    """
    record(ctx, "release_funds")
    return f"Released ${amount}"


def treasury_script(req: ModelRequest) -> ModelReply:
    """Release the amount in the message, then report the tool's output."""
    results = req.results_for("release_funds")
    if results:
        return ModelReply.say(results[0].output or "")
    amount = re.search(r"\d+", req.last_user_text())
    return ModelReply.call("release_funds", {"amount": int(amount.group()) if amount else 0})


treasury_agent: Agent[None] = Agent(
    name="Treasury",
    instructions="Release funds when asked; two people from finance approve.",
    tools=[release_funds],
    model=ScriptedModel(treasury_script, "tests.treasury"),
)

# ----------------------------------------------------------------------------- uncertain calls


@function_tool(needs_approval=True, heartbeat_timeout=2.0, retry_safe=False)
async def payout(ctx: ToolContext[object], supplier: str, amount: int) -> str:
    """Pay a supplier (tests kill the worker after the money moved, before the answer).

    Args:
        supplier: Who is paid.
        amount: Dollars.
    """
    path = os.environ.get("HITL_TEST_LEDGER")
    ledger = Ledger(Path(path)) if path else None
    key = ctx.idempotency_key
    started = ledger.attempt(key, "payout", ctx.attempt) if ledger else 0
    if ledger:
        ledger.effect(key, "payout", json.dumps({"supplier": supplier, "amount": amount}))
    linger = float(os.environ.get("HITL_TEST_TOOL_SECONDS", "0"))
    if linger and ledger and len(ledger.attempts("payout")) == 1:
        await asyncio.sleep(linger)  # the first attempt never answers: its worker is killed
    if ledger:
        ledger.finish(started, "done")
    return f"paid {supplier} ${amount}"


def payout_script(req: ModelRequest) -> ModelReply:
    """Pay the supplier in the message, then report the tool's output."""
    results = req.results_for("payout")
    if results:
        return ModelReply.say(results[0].output or "")
    return ModelReply.call("payout", {"supplier": req.last_user_text(), "amount": 4200})


payout_agent = Agent(
    name="Payout desk",
    instructions="Pay the supplier named.",
    tools=[payout],
    model=ScriptedModel(payout_script, "tests.payout"),
)

# ----------------------------------------------------------------------------- signed decisions


@function_tool(needs_approval=True, signed_decisions=True, approvers=["group:finance"])
def pay_supplier(ctx: ToolContext[object], supplier: str, amount: int) -> str:
    """Pay a supplier (only decisions signed by someone in finance count).

    Args:
        supplier: Who is paid.
        amount: Dollars.
    """
    record(ctx, "pay_supplier")
    return f"Paid {supplier} ${amount}"


def signed_script(req: ModelRequest) -> ModelReply:
    """Pay the amount in the message to ACME, then report the tool's output."""
    results = req.results_for("pay_supplier")
    if results:
        return ModelReply.say(results[0].output or "")
    amount = re.search(r"\d+", req.last_user_text())
    args = {"supplier": "ACME", "amount": int(amount.group()) if amount else 0}
    return ModelReply.call("pay_supplier", args)


signed_treasury: Agent[None] = Agent(
    name="Signed treasury",
    instructions="Pay suppliers when asked; finance signs every decision.",
    tools=[pay_supplier],
    model=ScriptedModel(signed_script, "tests.signed_treasury"),
)

# ----------------------------------------------------------------------------- no edits


@function_tool(needs_approval=True, allow_edits=False)
def close_account(ctx: ToolContext[object], account: str) -> str:
    """Close a customer's account (approve or reject as asked; never edited).

    Args:
        account: The account to close.
    """
    record(ctx, "close_account")
    return f"Closed {account}"


def closing_script(req: ModelRequest) -> ModelReply:
    """Close the account the message names, then report the tool's output."""
    results = req.results_for("close_account")
    if results:
        return ModelReply.say(results[0].output or "")
    named = re.search(r"ACC-\d+", req.last_user_text())
    return ModelReply.call("close_account", {"account": named.group() if named else "ACC-0"})


closing_agent: Agent[None] = Agent(
    name="Closings",
    instructions="Close accounts when asked; a person approves each as it is.",
    tools=[close_account],
    model=ScriptedModel(closing_script, "tests.closings"),
)

# ----------------------------------------------------------------- edits reviewed before approval


def inside_notes(path: str) -> str:
    """A note's path stays inside the notes folder (checked when a call is planned)."""
    if path.startswith("/") or ".." in path.split("/"):
        raise ValueError(f"{path!r} is outside the notes folder")
    return path


def note_request(params: dict[str, object]) -> ApprovalRequest:
    content = str(params.get("content", ""))
    diff = "\n".join(["--- /dev/null", f"+++ b/{params.get('path')}", "@@ -0,0 +1 @@"]
                     + [f"+{line}" for line in content.splitlines()])  # fmt: skip
    return ApprovalRequest(
        title=f"Write {params.get('path')}", message="A new note.", preview=diff,
        preview_label="Diff",
    )  # fmt: skip


@function_tool(needs_approval=True, approval_request=note_request)
def write_note(
    ctx: ToolContext[object], path: Annotated[str, AfterValidator(inside_notes)], content: str
) -> str:
    """Write a note.

    Args:
        path: Where, inside the notes folder.
        content: What the note says.
    """
    record(ctx, "write_note")
    return f"Wrote {len(content)} characters to {path}"


def notes_script(req: ModelRequest) -> ModelReply:
    """Write the message's text to notes/today.txt, then report the tool's output."""
    results = req.results_for("write_note")
    if results:
        return ModelReply.say(results[0].output or "")
    return ModelReply.call("write_note", {"path": "today.txt", "content": req.last_user_text()})


notes_agent: Agent[None] = Agent(
    name="Notes",
    instructions="Write notes when asked.",
    tools=[write_note],
    model=ScriptedModel(notes_script, "tests.notes"),
)
