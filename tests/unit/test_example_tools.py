"""The examples' tools, tried with `hitl.testing.ToolCheck` (no server): what needs a person,
what the person sees, and that a repeated call has one effect."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hitl import ModelRequest, RunConfig
from hitl.examples import backoffice, email_desk, refund_desk
from hitl.testing import ToolCheck
from tests.helpers import ROOT


@pytest.fixture(autouse=True)
def office(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HITL_BACKOFFICE_DB", str(tmp_path / "backoffice.sqlite"))


MAIL = {"subject": "Your order", "body": "It ships on Monday."}


async def test_mail_outside_the_company_or_about_refunds_needs_a_person() -> None:
    send = ToolCheck(email_desk.send_email, agent=email_desk.agent)
    inside = await send.decide({"to": "ops@example.com", **MAIL})
    assert inside.outcome == "approved" and not inside.needs_approval
    outside = await send.decide({"to": "ada@lovelace.org", **MAIL})
    assert outside.outcome == "waits"
    refund = await send.decide(
        {"to": "ops@example.com", "subject": "Refund", "body": "Your refund went out."}
    )
    assert refund.outcome == "waits"
    assert refund.request is not None and "mentions a refund" in refund.request.message
    assert outside.request is not None and outside.request.preview_label == "Email"
    assert "To: ada@lovelace.org" in (outside.request.preview or "")
    auto = await send.decide(
        {"to": "ada@lovelace.org", **MAIL}, run_config=RunConfig(auto_approve=True)
    )
    assert auto.outcome == "waits", "the tool does not allow auto-approval"


async def test_a_sent_email_goes_out_once_per_call() -> None:
    send = ToolCheck(email_desk.send_email, agent=email_desk.agent)
    first = await send.execute({"to": "ada@lovelace.org", **MAIL}, call_id="call_7")
    again = await send.execute({"to": "ada@lovelace.org", **MAIL}, call_id="call_7")
    assert first == again and first.startswith("Sent MSG-0001")
    assert len(backoffice.outbox()) == 1
    assert (await ToolCheck(email_desk.draft_email).decide({"to": "x@y.z", **MAIL})).outcome == (
        "approved"
    )


async def test_the_refund_desk_asks_above_its_limit() -> None:
    refund = ToolCheck(refund_desk.refund, agent=refund_desk.agent)
    small = await refund.decide({"order_id": 1002, "amount": 40, "reason": "late"})
    assert small.outcome == "approved"
    large = await refund.decide({"order_id": 1001, "amount": 250, "reason": "broken"})
    assert large.outcome == "waits"
    assert large.request is not None and large.request.title.startswith("Refund $250.00")
    # One person of finance up to $1,000; two different ones above (four eyes).
    assert (large.approvers, large.required_approvals) == (["group:finance"], 1)
    edge = await refund.decide({"order_id": 1004, "amount": 1000, "reason": "broken"})
    assert edge.required_approvals == 1
    four = await refund.decide({"order_id": 1004, "amount": 1000.01, "reason": "broken"})
    assert (four.outcome, four.required_approvals) == ("waits", 2)
    assert four.request is not None and "two different ones" in four.request.message
    cancel = await ToolCheck(refund_desk.cancel_order, agent=refund_desk.agent).decide(
        {"order_id": 1002}
    )
    assert cancel.outcome == "waits" and cancel.request is not None


def desk_turn(text: str, looked_up: list[int]) -> list[tuple[str, dict[str, object]]]:
    """The refund desk's calls for `text`, once the orders in `looked_up` were looked up."""
    items: list[dict[str, object]] = [{"role": "user", "content": text}]
    for n, order in enumerate(looked_up):
        args = json.dumps({"order_id": order})
        items.append({"type": "function_call", "call_id": f"l{n}", "name": "lookup_order",
                      "arguments": args})  # fmt: skip
        items.append({"type": "function_call_output", "call_id": f"l{n}", "output": "{}"})
    req = ModelRequest("Refund desk", None, items, [], None, turn=len(looked_up))
    reply = refund_desk.refund_desk_script(req)
    return [(c.name, json.loads(c.arguments) if isinstance(c.arguments, str) else c.arguments)
            for c in reply.tool_calls]  # fmt: skip


@pytest.mark.parametrize(
    "text", ["Refund $1,250.00 on order 1001.", "Please refund $1250.00 for order 1001."]
)
def test_the_refund_desk_reads_amounts_as_people_write_them(text: str) -> None:
    # Once "$1,250.00" read as $1.00 (no approval needed) and "$1250.00" as order 1250.
    assert desk_turn(text, []) == [("lookup_order", {"order_id": 1001})]
    [(name, args)] = desk_turn(text, [1001])
    assert (name, args["order_id"], args["amount"]) == ("refund", 1001, 1250.0)


def test_the_refund_desk_reads_the_demos_request() -> None:
    text = (
        "Order 1001 arrived broken: please refund $250. Also cancel order 1002, it is a duplicate."
    )
    assert refund_desk.read_amounts_and_orders(text) == ([250.0], [1001, 1002])
    assert refund_desk.read_amounts_and_orders("cancel 1003, 1004 and 1003") == ([], [1003, 1004])


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        # Once both were cancelled: "cancel" was anywhere in the sentence naming 1004.
        (
            "Cancel order 9999 and refund $5,000 on order 1004.",
            [("cancel_order", 9999, None), ("refund", 1004, 5000.0)],
        ),
        (
            "Order 1001 arrived broken: please refund $250. Also cancel order 1002, it is a "
            "duplicate.",
            [("refund", 1001, 250.0), ("cancel_order", 1002, None)],
        ),
        (
            "Refund $40 on order 1002 and $1,250.00 on order 1004.",
            [("refund", 1002, 40.0), ("refund", 1004, 1250.0)],
        ),
        ("Order 1003 was late, please refund it.", [("refund", 1003, 35.0)]),
        ("What is the status of order 1001?", []),
    ],
)
def test_the_refund_desk_does_to_each_order_what_is_asked_for_it(
    text: str, calls: list[tuple[str, int, float | None]]
) -> None:
    planned = refund_desk.planned_calls(text)
    assert [(n, a["order_id"], a.get("amount")) for n, a in planned] == calls


def test_the_refund_desk_makes_one_call_per_order_named() -> None:
    text = "Cancel order 1003. Yes, cancel 1003 for sure."
    assert desk_turn(text, []) == [("lookup_order", {"order_id": 1003})]
    assert desk_turn(text, [1003]) == [("cancel_order", {"order_id": 1003})]


@pytest.mark.parametrize("amount", ["NaN", "-Infinity", "1,250.00", None, "a lot"])
def test_a_refund_whose_amount_is_not_a_plain_number_asks_a_person(amount: object) -> None:
    predicate = refund_desk.refund_needs_approval
    assert predicate(None, {"order_id": 1001, "amount": amount}, "c") is True  # type: ignore[arg-type]
    assert predicate(None, {"order_id": 1001, "amount": 40}, "c") is False  # type: ignore[arg-type]


def test_the_governance_page_shows_the_shipped_refund_desk_word_for_word() -> None:
    page = (ROOT / "docs" / "governance.md").read_text()
    intro = page.split("\n## ", 1)[0]  # the desk, before the first section
    blocks = re.findall(r"```python\n(.*?)```", intro, re.S)
    shipped = (ROOT / "examples" / "refund_desk.py").read_text()
    assert len(blocks) == 3 and "signed_decisions=True" in blocks[2]
    for block in blocks:
        assert block in shipped, block
