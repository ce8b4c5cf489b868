"""The ledger's book-keeping: pure functions of its entries, a request and the workflow's clock.

`HitlLedger` (`workflows.ledger`) holds one `LedgerBook`; its validators ask the book what is
wrong with a request (`*_problem`, changing nothing), its handlers apply it. Testable without
a server, deterministic (no clock of its own: every call is given `now`).

What counts toward the window total: a `held` reservation until it is released, committed or
its hold lapses (a pending call counts however long it waits, so approving it later can never
push the total past the limit); a `committed` one until `window` after it ran. Released and
lapsed ones stay as tombstones until `window` after they were reserved, so a resent request
gets its first answer instead of a second reservation.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from decimal import Decimal

from hitl.wire.ledger import (
    LedgerEntry,
    LimitSpec,
    ReserveAnswer,
    ReserveInput,
    SettleAnswer,
    SettleInput,
    amount_problem,
    decimal_of,
    exact_sum,
)

MAX_ENTRIES = 1000
"""Reservations one ledger keeps (held, committed and tombstones); more are refused
(`LedgerFull`), which keeps the state continue-as-new carries under about 500 KB."""
MAX_KEY_CHARS = 512
MAX_WINDOW_SECONDS = 366 * 24 * 3600
MAX_HOLD_SECONDS = 2 * 366 * 24 * 3600
MAX_REQUEST_BYTES = 4096
"""One `reserve`, `release` or `commit` payload, as encoded JSON."""
RESERVATION_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
DIGEST = re.compile(r"[0-9a-f]{64}")
MAX_CLAIM_CHARS = 256
MAX_REASON_CHARS = 40

Problem = tuple[str, str]
"""A refusal: its error type and its one-line message."""


def limit_problem(limit: LimitSpec) -> str | None:
    """Why `limit` cannot be a ledger's (None when it can)."""
    if not 1 <= len(limit.key) <= MAX_KEY_CHARS or not limit.key.isprintable():
        return f"limit.key must be 1-{MAX_KEY_CHARS} printable characters"
    if not 1 <= limit.window_seconds <= MAX_WINDOW_SECONDS:
        return f"limit.window_seconds must be 1-{MAX_WINDOW_SECONDS}"
    return None


class LedgerBook:
    """The reservations of one limit, and the rules that change them."""

    def __init__(self, limit: LimitSpec, entries: dict[str, LedgerEntry]) -> None:
        self.limit = limit
        self.entries = dict(entries)
        self.window = timedelta(seconds=limit.window_seconds)

    # ------------------------------------------------------------------ reading

    def counts(self, entry: LedgerEntry, now: datetime) -> bool:
        """Whether `entry` is part of the window total at `now`."""
        if entry.state == "held":
            return entry.hold_until > now
        return entry.state == "committed" and entry.at + self.window > now

    def total(self, now: datetime) -> Decimal:
        """The window total at `now`: every amount that counts."""
        counted = [e for e in self.entries.values() if self.counts(e, now)]
        return exact_sum([decimal_of(e.amount) for e in counted])

    def live(self, entry: LedgerEntry, now: datetime) -> bool:
        """Whether `entry` is still kept at `now` (counted, or a tombstone inside its window)."""
        return self.counts(entry, now) or entry.at + self.window > now

    def next_change(self, now: datetime) -> datetime | None:
        """When the total drops next by itself (a commit leaves the window, a hold lapses)."""
        ends = [
            e.hold_until if e.state == "held" else e.at + self.window
            for e in self.entries.values()
            if self.counts(e, now)
        ]
        return min(ends, default=None)

    def prune(self, now: datetime) -> None:
        """Lapse holds that ran out and forget what left the window."""
        for rid, entry in list(self.entries.items()):
            if entry.state == "held" and entry.hold_until <= now:
                entry = self.entries[rid] = entry.model_copy(update={"state": "expired"})
            if not self.live(entry, now):
                del self.entries[rid]

    # ------------------------------------------------------------------ reserve

    def reserve_problem(self, req: ReserveInput, now: datetime) -> Problem | None:
        """Why `reserve(req)` is refused (None: it is accepted). Changes nothing."""
        problem = self._request_problem(req.reservation_id, req.limit)
        if problem is not None:
            return problem
        integer = self.limit.kind == "count"
        for name, value in (("amount", req.amount), ("threshold", req.threshold)):
            if (why := amount_problem(value, integer=integer)) is not None:
                return "InvalidLedgerRequest", f"{name} {why}"
        if DIGEST.fullmatch(req.claim_digest) is None:
            return "InvalidLedgerRequest", "claim_digest must be 64 lowercase hex digits"
        if not 1 <= req.hold_seconds <= MAX_HOLD_SECONDS:
            return "InvalidLedgerRequest", f"hold_seconds must be 1-{MAX_HOLD_SECONDS}"
        known = self.entries.get(req.reservation_id)
        if known is not None:
            if (known.amount, known.claim_digest) != (req.amount, req.claim_digest):
                return "ReservationConflict", (
                    f"reservation {req.reservation_id} exists with another amount or claim"
                )
            return None
        kept = sum(1 for e in self.entries.values() if self.live(e, now))
        if kept >= MAX_ENTRIES:
            return "LedgerFull", f"this ledger holds {MAX_ENTRIES} reservations already"
        return None

    def reserve(self, req: ReserveInput, now: datetime) -> ReserveAnswer:
        """Hold `req.amount` (once per reservation id) and say whether it fits."""
        self.prune(now)
        entry = self.entries.get(req.reservation_id)
        if entry is None:
            entry = LedgerEntry(
                amount=req.amount,
                at=now,
                before=str(self.total(now)),
                claim_digest=req.claim_digest,
                hold_until=now + timedelta(seconds=req.hold_seconds),
            )
            self.entries[req.reservation_id] = entry
        total = exact_sum([decimal_of(entry.before), decimal_of(entry.amount)])
        return ReserveAnswer(
            reservation_id=req.reservation_id,
            fits=total <= decimal_of(req.threshold),
            before=entry.before,
            total=str(total),
            amount=entry.amount,
            threshold=req.threshold,
            state=entry.state,
        )

    # ------------------------------------------------------------------ settle

    def settle_problem(self, req: SettleInput, *, commit: bool, digest: str) -> Problem | None:
        """Why `release(req)` / `commit(req)` is refused (None: accepted). Changes nothing.

        `digest` is the SHA-256 of `req.claim` (the workflow computes it, the book stays pure).
        """
        problem = self._request_problem(req.reservation_id, req.limit)
        if problem is not None:
            return problem
        if not 1 <= len(req.claim) <= MAX_CLAIM_CHARS:
            return "InvalidLedgerRequest", f"claim must be 1-{MAX_CLAIM_CHARS} characters"
        if len(req.reason) > MAX_REASON_CHARS or not req.reason.isprintable():
            return (
                "InvalidLedgerRequest",
                f"reason must be 0-{MAX_REASON_CHARS} printable characters",
            )
        if req.amount is not None:
            why = amount_problem(req.amount, integer=self.limit.kind == "count")
            if why is not None:
                return "InvalidLedgerRequest", f"amount {why}"
        entry = self.entries.get(req.reservation_id)
        if entry is None:
            if commit and req.amount is not None:
                return None  # the call ran: it counts even though its hold was forgotten
            return "UnknownReservation", f"no reservation {req.reservation_id} in this ledger"
        if entry.claim_digest != digest:
            return "WrongClaim", f"the claim does not match reservation {req.reservation_id}"
        if not commit and entry.state == "committed":
            return "AlreadyCommitted", f"reservation {req.reservation_id} ran; it stays counted"
        return None

    def release(self, req: SettleInput, now: datetime) -> SettleAnswer:
        """Give a held amount back (a released or lapsed one stays as it is)."""
        self.prune(now)
        entry = self.entries.get(req.reservation_id)
        state = entry.state if entry is not None else "expired"
        if entry is not None and entry.state == "held":
            released = {"state": "released", "reason": req.reason}
            self.entries[req.reservation_id] = entry.model_copy(update=released)
            state = "released"
        return self._settled(req.reservation_id, state, now)

    def commit(self, req: SettleInput, now: datetime, digest: str) -> SettleAnswer:
        """The call ran: it counts from `now` until it leaves the window (once)."""
        self.prune(now)
        entry = self.entries.get(req.reservation_id)
        if entry is None:
            amount = req.amount or "1"
            entry = LedgerEntry(
                amount=amount, at=now, before="0", claim_digest=digest, hold_until=now
            )
        if entry.state != "committed":
            entry = entry.model_copy(update={"state": "committed", "at": now})
            self.entries[req.reservation_id] = entry
        return self._settled(req.reservation_id, "committed", now)

    # ------------------------------------------------------------------ helpers

    def _request_problem(self, rid: str, limit: LimitSpec) -> Problem | None:
        if RESERVATION_ID.fullmatch(rid) is None:
            return "InvalidLedgerRequest", "reservation_id must be 1-128 of A-Z a-z 0-9 . _ : -"
        if limit != self.limit:
            return "WrongLedger", "the request names another limit than this ledger's"
        return None

    def _settled(self, rid: str, state: str, now: datetime) -> SettleAnswer:
        return SettleAnswer.model_validate(
            {"reservation_id": rid, "state": state, "total": str(self.total(now))}
        )
