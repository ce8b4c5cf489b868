"""Limits across runs: the `HitlLedger` entity workflow's names, ids and payloads.

One ledger workflow per limit (a key such as `refund:customer:C-42`, a kind and a window)
holds reservations. A run's planning activity reserves before a call is allowed or parked;
the run releases the reservation when the call is rejected, expires or its tool fails, and
commits it when the call ran (`docs/ledger.md`).

Amounts are decimal strings (`"1250.00"`), never floats; `amount_problem` says what a valid
one is. Pure and deterministic: imported by workflow code.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from decimal import Context, Decimal
from typing import Any, Literal, Protocol

from hitl.wire.base import WireModel

__all__ = [
    "ACT_LEDGER_COMMIT",
    "ACT_LEDGER_RELEASE",
    "LEDGER_COMMIT",
    "LEDGER_RELEASE",
    "LEDGER_RESERVE",
    "LEDGER_STATUS",
    "LEDGER_WORKFLOW_TYPE",
    "LedgerEntry",
    "LedgerInput",
    "LedgerStatus",
    "LimitKind",
    "LimitSpec",
    "ReservationRef",
    "ReservationState",
    "ReserveAnswer",
    "ReserveInput",
    "SettleAnswer",
    "SettleInput",
    "SettleOutcome",
    "SettleReservations",
    "SettledReservations",
    "amount_problem",
    "decimal_of",
    "exact_sum",
    "ledger_workflow_id",
    "ledger_reservation_id",
    "reservation_ref",
]

LEDGER_WORKFLOW_TYPE = "HitlLedger"
LEDGER_RESERVE = "reserve"
"""Update: hold an amount under a limit, and say whether it fits (`ReserveInput`)."""
LEDGER_RELEASE = "release"
"""Update: give a held amount back (the call was rejected, expired or failed; `SettleInput`)."""
LEDGER_COMMIT = "commit"
"""Update: the call ran; its amount counts until it leaves the window (`SettleInput`)."""
LEDGER_STATUS = "status"
"""Query: the limit, its window total and its entries (`LedgerStatus`)."""
ACT_LEDGER_RELEASE = "ledger_release"
"""Activity a run schedules to release its reservations (`SettleReservations`)."""
ACT_LEDGER_COMMIT = "ledger_commit"
"""Activity a run schedules to commit its reservations (`SettleReservations`)."""

LimitKind = Literal["count", "sum"]
"""`count`: each reservation counts 1; `sum`: reservations add their amounts."""
ReservationState = Literal["held", "committed", "released", "expired"]
"""`held` counts until released, committed or its hold lapses (`expired`, no longer counted);
`committed` counts until it leaves the window; `released` never counts again."""
SettleOutcome = Literal["committed", "released", "expired", "unknown", "refused"]

_PLAIN_DECIMAL = re.compile(r"\d{1,18}(\.\d{1,12})?")
_ARITHMETIC = Context(prec=40)
"""Exact for every sum of amounts a ledger can hold (31 digits each, a bounded count)."""


def amount_problem(text: object, *, integer: bool = False) -> str | None:
    """Why `text` is not an amount (None when it is).

    An amount is a string of digits with an optional fraction: no sign, exponent, NaN or
    infinity; at most 18 integer and 12 fraction digits.
    """
    if not isinstance(text, str) or _PLAIN_DECIMAL.fullmatch(text) is None:
        return 'must be a decimal string such as "1250.00" (no sign, exponent or float)'
    if integer and "." in text:
        return "must be a whole number for a count limit"
    return None


def decimal_of(text: str) -> Decimal:
    """The exact value of an amount `amount_problem` accepted."""
    return _ARITHMETIC.create_decimal(text)


def exact_sum(values: list[Decimal]) -> Decimal:
    """The sum of amounts, exactly (the default context would round past 28 digits)."""
    total = Decimal(0)
    for value in values:
        total = _ARITHMETIC.add(total, value)
    return total


def ledger_workflow_id(limit: LimitSpec) -> str:
    """The ledger's workflow id: `hitl-ledger-<kind>-<window>s-<digest of the key>`.

    The key may carry personal data (a customer id): only its digest reaches the id, so ids,
    lists and logs never show it. Kind and window are part of the id, so nobody can start the
    ledger of a key with a shorter window than the rule's.
    """
    digest = hashlib.sha256(limit.key.encode("utf-8")).hexdigest()[:40]
    return f"hitl-ledger-{limit.kind}-{limit.window_seconds}s-{digest}"


def ledger_reservation_id(policy_reservation_id: str) -> str:
    """The ledger's id for a policy's reservation id: `r-<digest>`.

    A policy's id (`<workflow id>:<call id>:<key>`) is the same on every attempt of the
    planning activity, may be long and may carry the key (personal data); the ledger's is
    bounded and carries neither.
    """
    return "r-" + hashlib.sha256(policy_reservation_id.encode("utf-8")).hexdigest()[:40]


class Hold(Protocol):
    """What a policy's limit check (or the hold a run carries) says about its reservation."""

    key: str
    measure: Any
    window_seconds: int
    amount: str
    reservation_id: str


def reservation_ref(hold: Hold) -> ReservationRef:
    """What a run hands `ledger_release` / `ledger_commit` for a hold (no secret in it)."""
    return ReservationRef(
        reservation_id=ledger_reservation_id(hold.reservation_id),
        limit=LimitSpec.model_validate(
            {"key": hold.key, "kind": hold.measure, "window_seconds": hold.window_seconds}
        ),
        amount=hold.amount,
    )


class LimitSpec(WireModel):
    """Which ledger: the key a rule counts by, how it counts, and its window."""

    key: str
    """What is counted together, as data: `refund:customer:C-42`."""
    kind: LimitKind = "sum"
    window_seconds: int
    """How long a committed amount counts (86400: a day)."""


class LedgerEntry(WireModel):
    """One reservation as the ledger holds it (carried across continue-as-new)."""

    amount: str
    at: datetime
    """When it was reserved; when it was committed, once it is (its window starts then)."""
    state: ReservationState = "held"
    before: str
    """The window total the reservation saw, without itself."""
    claim_digest: str
    hold_until: datetime
    reason: str = ""
    """Why it was released (`rejected`, `expired`, `failed`, `denied`), as the run said."""


class LedgerInput(WireModel):
    """Start input of `HitlLedger` (and what continue-as-new carries)."""

    limit: LimitSpec
    entries: dict[str, LedgerEntry] = {}
    """Carried reservations; read only on a continuation (a start's are ignored)."""
    continue_after_events: int = 2000
    """History length after which the ledger continues as new (clamped to 100-10,000)."""


class ReserveInput(WireModel):
    """Input of `reserve`; its update id is `reservation_id`, so a resent request applies once."""

    reservation_id: str
    limit: LimitSpec
    amount: str = "1"
    threshold: str
    """The largest window total, this reservation included, that still fits."""
    claim_digest: str
    """SHA-256 (hex) of the claim that releases or commits this reservation."""
    hold_seconds: int = 7 * 24 * 3600
    """How long a held reservation counts if nobody settles it (a run that was terminated)."""


class ReserveAnswer(WireModel):
    """What `reserve` answers (a retry gets the same answer)."""

    reservation_id: str
    fits: bool
    """`before + amount <= threshold` (`before` as first reserved, this request's threshold)."""
    before: str
    total: str
    """`before` plus this reservation."""
    amount: str
    threshold: str
    state: ReservationState = "held"


class SettleInput(WireModel):
    """Input of `release` and `commit` (update id `<release|commit>:<reservation id>`)."""

    reservation_id: str
    limit: LimitSpec
    claim: str
    """The secret whose digest the reservation holds (`hitl.ledger.claim_for`)."""
    amount: str | None = None
    """A commit counts this amount even if the hold lapsed and the ledger forgot it."""
    reason: str = ""
    """Why a release (at most 40 characters; kept with the entry)."""


class SettleAnswer(WireModel):
    """What `release` and `commit` answer."""

    reservation_id: str
    state: SettleOutcome
    total: str
    """The window total after it."""
    problem: str | None = None
    """Why the ledger refused it (`ledger_release` / `ledger_commit` report, never fail)."""


class LedgerStatus(WireModel):
    """The `status` query: the limit, its current total and every live entry."""

    limit: LimitSpec
    total: str
    entries: dict[str, LedgerEntry] = {}
    problem: str | None = None
    """Why this ledger refuses every request (it was started with a limit its id does not
    match)."""


class ReservationRef(WireModel):
    """A reservation a run holds for one call: what it needs to release or commit it."""

    reservation_id: str
    limit: LimitSpec
    amount: str = "1"


class SettleReservations(WireModel):
    """Input of `ledger_release` and `ledger_commit`: the reservations of one or more calls.

    No claim travels in a run's history: the activity derives each from the worker's key
    (`hitl.ledger.claim_for`).
    """

    reservations: list[ReservationRef]
    reason: str = ""
    """Why a release: `rejected`, `expired`, `failed` (kept with the ledger's entry)."""


class SettledReservations(WireModel):
    """Output of `ledger_release` and `ledger_commit`: one answer per reservation."""

    answers: list[SettleAnswer] = []
