from __future__ import annotations

from datetime import UTC, datetime

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from hitl.codec import undecryptable
from hitl.limits import MAX_ACTIONS_KEPT
from hitl.wire import (
    CallRecord,
    CarriedState,
    DecisionInput,
    DecisionRecord,
    ExtendInput,
    StandingRule,
)
from hitl.workflows.book import ApprovalBook
from hitl.workflows.inputs import read_one

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def call(
    call_id: str,
    tool: str = "refund",
    state: str = "awaiting_approval",
    agent: str = "a",
    approvers: list[str] | None = None,
) -> CallRecord:
    return CallRecord(
        call_id=call_id,
        tool_name=tool,
        agent_id=agent,
        agent_name=agent.upper(),
        arguments="{}",
        turn=1,
        state=state,  # type: ignore[arg-type]
        approvers=approvers or [],
    )


def new_book(**state: object) -> ApprovalBook:
    return ApprovalBook(CarriedState(**state))  # type: ignore[arg-type]


def refused(exc: pytest.ExceptionInfo[ApplicationError]) -> tuple[str | None, str]:
    return exc.value.type, exc.value.message


def test_check_is_read_only_and_typed() -> None:
    book = new_book()
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
    book = new_book()
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
    book = new_book()
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


def test_expire_records_its_own_outcome_not_a_rejection() -> None:
    book = new_book()
    c = call("c1")
    book.begin_turn([c])
    rec = book.expire(c, NOW, "expired")
    assert (rec.kind, rec.source, rec.approver, c.state) == ("expired", "deadline", None, "expired")
    assert rec.expired, "the flag stays set, for readers that know only the flag"
    assert [p.call_id for p in book.pending()] == []
    # No decision repeats an expiry: a rejection after it is as late as an approval (before,
    # a rejection was answered as a retry of "reject by deadline").
    for kind in ("approve", "reject"):
        with pytest.raises(ApplicationError) as e:
            book.check(kind, DecisionInput(call_id="c1", approver="ann"), NOW)  # type: ignore[arg-type]
        assert refused(e) == (
            "DeadlinePassed",
            "call 'c1' expired at 2026-01-01T00:00:00+00:00; nothing ran",
        )


def test_an_expiry_recorded_by_an_older_version_reads_as_expired() -> None:
    """Older versions recorded an expiry as `reject` with the flag `expired`."""
    old = {
        "call_id": "c1",
        "tool_name": "refund",
        "kind": "reject",
        "message": "Approval for refund expired after 60s without a decision.",
        "source": "deadline",
        "via": "workflow",
        "decided_at": NOW.isoformat(),
        "expired": True,
    }
    rec = DecisionRecord.model_validate(old)
    assert (rec.kind, rec.expired) == ("expired", True)
    assert DecisionRecord.model_validate({**old, "expired": False}).kind == "reject"
    # Carried over continue-as-new by an older version, it still refuses later decisions.
    book = new_book(decisions=[old])
    with pytest.raises(ApplicationError) as e:
        book.check("reject", DecisionInput(call_id="c1"), NOW)
    assert refused(e)[0] == "DeadlinePassed" and "expired at" in refused(e)[1]
    assert DecisionRecord.model_validate_json(rec.model_dump_json()) == rec


def test_extensions_are_kept_for_the_audit_after_their_turn() -> None:
    from datetime import timedelta

    book = new_book()
    c = call("c1")
    c.deadline = NOW + timedelta(hours=1)
    book.begin_turn([c])
    book.extend(ExtendInput(call_id="c1", seconds=60, approver="ann", reason="away"), NOW)
    book.end_turn()
    [a] = book.state.actions
    assert (a.kind, a.call_id, a.tool_name, a.approver, a.reason, a.at) == (
        "extend",
        "c1",
        "refund",
        "ann",
        "away",
        NOW,
    )
    assert (a.previous, a.deadline) == (
        NOW + timedelta(hours=1),
        NOW + timedelta(hours=1, minutes=1),
    )
    for n in range(MAX_ACTIONS_KEPT + 5):
        book.note(a.model_copy(update={"call_id": f"x{n}"}))
    assert len(book.state.actions) == MAX_ACTIONS_KEPT
    assert book.state.actions[-1].call_id == f"x{MAX_ACTIONS_KEPT + 4}", "the latest are kept"


def test_past_calls_that_needed_no_approval_are_not_pending() -> None:
    book = new_book()
    book.begin_turn([call("c1", state="approved")])
    book.end_turn()
    with pytest.raises(ApplicationError) as e:
        book.check("approve", DecisionInput(call_id="c1"))
    assert refused(e) == ("NotPending", "call 'c1' did not need approval")


def raw(data: bytes, encoding: bytes = b"json/plain") -> RawValue:
    return RawValue(Payload(metadata={"encoding": encoding}, data=data))


def read_decision(*args: object, limit: int = 1000) -> DecisionInput:
    return read_one(
        args, DecisionInput, what="a decision", example='{"call_id": "c"}', max_bytes=limit
    )


def test_payloads_are_read_strictly_with_one_line_typed_reasons() -> None:
    def reason(*args: object, limit: int = 1000) -> str:
        with pytest.raises(ApplicationError) as e:
            read_decision(*args, limit=limit)
        assert e.value.type == "InvalidDecision" and e.value.non_retryable
        assert "\n" not in e.value.message, "one line"
        return e.value.message

    ok = raw(b'{"call_id": "c1"}')
    assert read_decision(ok).call_id == "c1"
    assert "got no input" in reason()
    assert "got 2 inputs" in reason(ok, ok)
    assert "got 3 inputs" in reason(ok, ok, ok)
    # Wrong types are refused, not coerced ("yes" is not a boolean).
    assert "always: Input should be a valid boolean" in reason(
        raw(b'{"call_id": "c1", "always": "yes"}')
    )
    assert "call_id: Input should be a valid string" in reason(raw(b'{"call_id": 5}'))
    assert "aprover: Extra inputs are not permitted" in reason(
        raw(b'{"call_id": "c", "aprover": "x"}')
    )
    assert "not valid JSON" in reason(raw(b'{"call_id": "\xff\xfe"}'))
    assert "not valid JSON" in reason(raw(b"{bad"))
    assert "payload: Input should be an object" in reason(raw(b"[1, 2]"))
    assert "is empty" in reason(raw(b"", b"binary/null"))
    assert "must be JSON (encoding json/plain), not 'binary/protobuf'" in reason(
        raw(b"\x00", b"binary/protobuf")
    )
    assert "could not be decrypted (unknown key" in reason(
        RawValue(undecryptable("unknown key id 'k9'"))
    )
    assert "is 1001 bytes; the limit is 1000" in reason(
        raw(b'{"call_id": "' + b"x" * 986 + b'"}'), limit=1000
    )
    # What was sent is never echoed back (it may be huge, or a terminal escape sequence).
    assert "\x1b" not in reason(raw(b'{"call_id": "\x1b]0;pwned\x07", "always": 1}'))


def test_decision_fields_have_documented_limits() -> None:
    book = new_book()
    book.begin_turn([call("c1")])
    for field, size in (("message", 4001), ("reason", 4001), ("approver", 201)):
        with pytest.raises(ApplicationError) as e:
            book.check("reject", DecisionInput(call_id="c1", **{field: "x" * size}))
        assert e.value.type == "InvalidDecision"
        assert e.value.message == f"{field} is {size} characters; the limit is {size - 1}"
    with pytest.raises(ApplicationError) as e:
        book.check("approve", DecisionInput(call_id="c" * 513))
    assert e.value.message == "call_id is 513 characters; the limit is 512"
    assert book.calls["c1"].decision is None


def test_rules_are_scoped_to_the_agent_whose_tool_they_were_made_on() -> None:
    book = new_book()
    book.begin_turn([call("c1", tool="wire", agent="a")])
    book.record("approve", DecisionInput(call_id="c1", always=True, approver="intern"), now=NOW)
    book.end_turn()
    same_agent, other_agent = call("c2", tool="wire", agent="a"), call("c3", tool="wire", agent="b")
    book.begin_turn([same_agent, other_agent])
    assert book.apply_rule(same_agent, NOW) is True
    assert book.apply_rule(other_agent, NOW) is False, "agent b's wire is another tool"
    assert other_agent.state == "awaiting_approval"


def test_a_rule_never_decides_a_call_its_maker_may_not_decide() -> None:
    book = new_book()
    book.begin_turn([call("c1", tool="wire")])
    book.record("approve", DecisionInput(call_id="c1", always=True, approver="intern"), now=NOW)
    book.end_turn()
    reserved = call("c2", tool="wire", approvers=["cfo"])
    book.begin_turn([reserved])
    assert book.apply_rule(reserved, NOW) is False, "the intern could not approve this call"
    book.record("approve", DecisionInput(call_id="c2", always=True, approver="cfo"), now=NOW)
    book.end_turn()
    later = call("c3", tool="wire", approvers=["cfo"])
    book.begin_turn([later])
    assert book.apply_rule(later, NOW) is True
    assert later.decision is not None and later.decision.approver == "cfo"
    assert later.decision.source == "always_rule"


def test_an_always_decision_decides_only_the_waiting_calls_its_maker_may_decide() -> None:
    book = new_book()
    open_call, reserved = call("c1", tool="wire"), call("c2", tool="wire", approvers=["cfo"])
    other = call("c3", tool="wire", agent="b")
    book.begin_turn([open_call, reserved, other])
    book.record("approve", DecisionInput(call_id="c1", always=True, approver="intern"), now=NOW)
    assert reserved.state == "awaiting_approval" and other.state == "awaiting_approval"


def test_rules_of_older_runs_apply_only_where_anyone_may_decide() -> None:
    book = new_book(always_rules={"wire": "approve"})
    assert book.state.rules == [StandingRule(agent_id="*", tool_name="wire", kind="approve")]
    anyone, reserved = call("c1", tool="wire", agent="b"), call("c2", tool="wire", approvers=["x"])
    book.begin_turn([anyone, reserved])
    assert book.apply_rule(anyone, NOW) is True
    assert book.apply_rule(reserved, NOW) is False


def test_approver_lists_and_deadlines_are_enforced_by_the_validator() -> None:
    from datetime import timedelta

    book = new_book()
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
    # Once expired, a person's decision is refused as late too (not as "already decided").
    book.expire(c, late, "expired")
    with pytest.raises(ApplicationError) as e:
        book.check("approve", DecisionInput(call_id="c1", approver="finance-lead"), late)
    assert e.value.type == "DeadlinePassed" and "expired" in e.value.message
