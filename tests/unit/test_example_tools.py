"""The examples' tools, tried with `hitl.testing.ToolCheck` (no server): what needs a person,
what the person sees, and that a repeated call has one effect."""

from __future__ import annotations

from pathlib import Path

import pytest

from hitl import RunConfig
from hitl.examples import backoffice, email_desk, refund_desk
from hitl.testing import ToolCheck


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
    cancel = await ToolCheck(refund_desk.cancel_order, agent=refund_desk.agent).decide(
        {"order_id": 1002}
    )
    assert cancel.outcome == "waits" and cancel.request is not None
