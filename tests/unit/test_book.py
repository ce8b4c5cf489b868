from __future__ import annotations

from datetime import UTC, datetime

import pytest
from temporalio.exceptions import ApplicationError

from hitl.wire import CallRecord, DecisionInput
from workflows.book import ApprovalBook, parse_payload

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def call(call_id: str, tool: str = "refund", state: str = "awaiting_approval") -> CallRecord:
    return CallRecord(
        call_id=call_id,
        tool_name=tool,
        agent_id="a",
        agent_name="A",
        arguments="{}",
        turn=1,
        state=state,  # type: ignore[arg-type]
    )


def refused(exc: pytest.ExceptionInfo[ApplicationError]) -> tuple[str | None, str]:
    return exc.value.type, exc.value.message


def test_check_is_read_only_and_typed() -> None:
    book = ApprovalBook()
    book.begin_turn([call("c1"), call("c2", state="approved")])
    assert book.check("approve", DecisionInput(call_id="c1")) is None
    assert book.calls["c1"].decision is None, "check never changes state"
    with pytest.raises(ApplicationError) as e:
        book.check("approve", DecisionInput(call_id="zzz"))
    assert refused(e) == ("UnknownCall", "unknown call id 'zzz'")
    with pytest.raises(ApplicationError) as e:
        book.check("approve", DecisionInput(call_id="c2"))
    assert refused(e) == ("NotPending", "call 'c2' is not awaiting approval (it is approved)")
    assert all(err.non_retryable for err in [e.value])


def test_record_is_idempotent_and_first_decision_stands() -> None:
    book = ApprovalBook()
    book.begin_turn([call("c1")])
    rec = book.record(
        "reject", DecisionInput(call_id="c1", approver="alice", message="no"), now=NOW
    )
    assert (rec.kind, rec.message, book.calls["c1"].state) == ("reject", "no", "rejected")
    again = book.record(
        "reject", DecisionInput(call_id="c1", approver="alice", message="no"), now=NOW
    )
    assert again is rec, "the same decision again returns the first record"
    with pytest.raises(ApplicationError) as e:
        book.record("reject", DecisionInput(call_id="c1", approver="bob"), now=NOW)
    assert refused(e) == ("AlreadyDecided", "call 'c1' already decided: reject by alice")
    with pytest.raises(ApplicationError) as e:
        book.record("approve", DecisionInput(call_id="c1", approver="bob"), now=NOW)
    assert refused(e) == ("AlreadyDecided", "call 'c1' already decided: reject by alice")
    book.end_turn()
    with pytest.raises(ApplicationError) as e:
        book.check("approve", DecisionInput(call_id="c1"))
    assert e.value.type == "AlreadyDecided", "decisions outlive their turn"


def test_always_rule_decides_other_waiting_calls_and_later_ones() -> None:
    book = ApprovalBook()
    book.begin_turn([call("c1"), call("c2"), call("c3", tool="cancel")])
    book.record("approve", DecisionInput(call_id="c1", always=True), now=NOW)
    assert book.calls["c2"].decision is not None
    assert book.calls["c2"].decision.source == "always_rule"
    assert book.calls["c3"].state == "awaiting_approval", "other tools still wait"
    book.end_turn()
    later = call("c4")
    book.begin_turn([later])
    assert book.apply_rule(later, NOW) is True and later.state == "approved"
    assert book.apply_rule(call("c5", tool="cancel"), NOW) is False


def test_expire_records_a_deadline_rejection() -> None:
    book = ApprovalBook()
    c = call("c1")
    book.begin_turn([c])
    rec = book.expire(c, NOW, "expired")
    assert (rec.kind, rec.source, c.state) == ("reject", "deadline", "rejected")
    assert [p.call_id for p in book.pending()] == []


def test_past_calls_that_needed_no_approval_are_not_pending() -> None:
    book = ApprovalBook()
    book.begin_turn([call("c1", state="approved")])
    book.end_turn()
    with pytest.raises(ApplicationError) as e:
        book.check("approve", DecisionInput(call_id="c1"))
    assert refused(e) == ("NotPending", "call 'c1' did not need approval")


def test_parse_payload_gives_one_line_reasons() -> None:
    with pytest.raises(ApplicationError) as e:
        parse_payload(DecisionInput, {"call_id": 5, "always": "maybe", "aprover": "x"})
    assert e.value.type == "InvalidDecision"
    assert e.value.message.startswith("invalid decision: call_id: Input should be a valid string")
    assert "aprover: Extra inputs are not permitted" in e.value.message
    assert parse_payload(DecisionInput, {"call_id": "c"}).call_id == "c"


def test_approver_lists_and_deadlines_are_enforced_by_the_validator() -> None:
    from datetime import timedelta

    book = ApprovalBook()
    c = call("c1")
    c.approvers = ["finance-lead"]
    c.deadline = NOW + timedelta(hours=1)
    book.begin_turn([c])
    with pytest.raises(ApplicationError) as e:
        book.check("approve", DecisionInput(call_id="c1", approver="bob"), NOW)
    assert refused(e) == (
        "NotAuthorized",
        "approver 'bob' may not decide refund calls (allowed: finance-lead)",
    )
    with pytest.raises(ApplicationError) as e:
        book.check("approve", DecisionInput(call_id="c1"), NOW)
    assert e.value.type == "NotAuthorized"
    assert book.check("approve", DecisionInput(call_id="c1", approver="finance-lead"), NOW) is None
    # The same decision, arriving in the task where the deadline already passed, loses.
    late = NOW + timedelta(hours=2)
    with pytest.raises(ApplicationError) as e:
        book.check("approve", DecisionInput(call_id="c1", approver="finance-lead"), late)
    assert e.value.type == "DeadlinePassed"
    assert c.decision is None, "refusals change nothing"
