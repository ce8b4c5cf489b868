"""The ledger's book-keeping without a server: amounts, totals, windows, holds and refusals."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from hitl.ledger import claim_for
from hitl.wire import (
    LimitSpec,
    ReserveInput,
    SettleInput,
    amount_problem,
    ledger_reservation_id,
    ledger_workflow_id,
)
from hitl.workflows.ledger_book import LedgerBook

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
DAY = LimitSpec(key="refund:customer:C-42", kind="sum", window_seconds=86400)


def digest(claim: str) -> str:
    return hashlib.sha256(claim.encode()).hexdigest()


def reserve(rid: str, amount: str, threshold: str = "100", **kw: object) -> ReserveInput:
    return ReserveInput.model_validate(
        {
            "reservation_id": rid,
            "limit": DAY.model_dump(),
            "amount": amount,
            "threshold": threshold,
            "claim_digest": digest(rid),
            **kw,
        }
    )


def settle(rid: str, claim: str | None = None) -> SettleInput:
    return SettleInput(reservation_id=rid, limit=DAY, claim=claim if claim is not None else rid)


@pytest.mark.parametrize(
    "text", ["NaN", "nan", "Infinity", "-1", "+1", "1e3", "1E3", " 1", "1 ", "", ".5", "1.", "0x1"]
)
def test_only_plain_decimal_strings_are_amounts(text: str) -> None:
    assert amount_problem(text) is not None
    assert amount_problem(1.5) is not None and amount_problem(None) is not None


def test_sums_are_exact_past_the_default_decimal_precision() -> None:
    book = LedgerBook(DAY, {})
    big = "999999999999999999.999999999999"  # 30 digits: the default context keeps 28
    book.reserve(reserve("r-1", big, threshold=big), T0)
    answer = book.reserve(reserve("r-2", "0.000000000001", threshold=big), T0)
    assert answer.total == "1000000000000000000.000000000000" and not answer.fits
    tenths = LedgerBook(DAY, {})
    for n in range(3):
        tenths.reserve(reserve(f"t-{n}", "0.1", threshold="0.3"), T0)
    assert str(tenths.total(T0)) == "0.3", "no float surprise"


def test_a_count_limit_takes_whole_numbers() -> None:
    book = LedgerBook(DAY.model_copy(update={"kind": "count"}), {})
    req = reserve("r-1", "1.5").model_copy(update={"limit": book.limit})
    assert book.reserve_problem(req, T0) == (
        "InvalidLedgerRequest",
        "amount must be a whole number for a count limit",
    )


def test_held_counts_until_settled_committed_until_the_window_passes() -> None:
    book = LedgerBook(DAY, {})
    book.reserve(reserve("r-held", "30"), T0)
    book.reserve(reserve("r-ran", "20"), T0)
    later = T0 + timedelta(hours=2)
    book.commit(settle("r-ran"), later, digest("r-ran"))
    assert book.total(T0 + timedelta(days=1, hours=1)) == 50, "the commit counts from 14:00"
    assert book.total(T0 + timedelta(days=1, hours=2)) == 30, "then it left; the hold stays"
    assert book.next_change(T0) == later + timedelta(days=1)


def test_an_unsettled_hold_lapses_and_a_late_commit_still_counts() -> None:
    book = LedgerBook(DAY, {})
    book.reserve(reserve("r-1", "30", hold_seconds=3600), T0)
    after = T0 + timedelta(hours=1)
    book.prune(after)
    assert book.entries["r-1"].state == "expired" and book.total(after) == 0
    book.commit(settle("r-1"), after, digest("r-1"))
    assert book.total(after) == 30


def test_refusals_say_why_and_change_nothing() -> None:
    book = LedgerBook(DAY, {})
    book.reserve(reserve("r-1", "10"), T0)
    before = dict(book.entries)
    assert book.reserve_problem(reserve("r-1", "11"), T0) is not None
    assert book.settle_problem(settle("r-1", "wrong"), commit=False, digest=digest("wrong")) == (
        "WrongClaim",
        "the claim does not match reservation r-1",
    )
    book.commit(settle("r-1"), T0, digest("r-1"))
    problem = book.settle_problem(settle("r-1"), commit=False, digest=digest("r-1"))
    assert problem is not None and problem[0] == "AlreadyCommitted"
    other = reserve("r-2", "1").model_copy(update={"limit": DAY.model_copy(update={"key": "x"})})
    assert book.reserve_problem(other, T0) == (
        "WrongLedger",
        "the request names another limit than this ledger's",
    )
    assert set(book.entries) == set(before)


def test_ids_carry_no_key_and_claims_need_the_key() -> None:
    wid = ledger_workflow_id(DAY)
    assert "C-42" not in wid and wid.startswith("hitl-ledger-sum-86400s-")
    rid = ledger_reservation_id("run-1:t1.1:refund:customer:C-42")
    assert "C-42" not in rid and len(rid) == 42
    assert claim_for(rid, b"k" * 16) != claim_for(rid, b"j" * 16) != claim_for(rid, None)
