"""`HitlLedger`: one durable ledger per limit, holding the reservations of calls across runs.

An entity workflow: one per limit (key, kind, window; its id is `ledger_workflow_id`), started
by the first reservation (update-with-start, from an activity: `hitl.ledger.LimitLedger`) and
running until it is terminated, continuing as new with its live entries before its history
grows large. Idle, it costs no worker memory and no timer: entries leave the window by the
workflow's clock (`workflow.now()`) whenever the next request arrives.

Every handler is synchronous: a request is checked and applied inside one workflow task, so
requests are applied one at a time in the order the server delivers them (no two reservations
can both see the same total), and no handler is ever unfinished when the ledger continues as
new. A request the server admits while the ledger continues as new is retried by the server
on the new run, which carries every entry; a resent reservation is answered from its entry
(update ids only de-duplicate within one run).

Validators refuse malformed requests, another limit's, a wrong claim or a full ledger with a
typed error before anything is accepted: a refused request leaves no event in history.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from hitl.wire.ledger import (
        LEDGER_COMMIT,
        LEDGER_RELEASE,
        LEDGER_RESERVE,
        LEDGER_STATUS,
        LEDGER_WORKFLOW_TYPE,
        LedgerInput,
        LedgerStatus,
        LimitSpec,
        ReserveAnswer,
        ReserveInput,
        SettleAnswer,
        SettleInput,
        ledger_workflow_id,
    )
    from hitl.workflows.inputs import read_one, refusal
    from hitl.workflows.ledger_book import (
        MAX_REQUEST_BYTES,
        LedgerBook,
        Problem,
        limit_problem,
    )

RESERVE_EXAMPLE = (
    '{"reservation_id": "r-1", "limit": {"key": "refund:customer:C-42", "kind": "sum", '
    '"window_seconds": 86400}, "amount": "120.00", "threshold": "5000", '
    '"claim_digest": "<sha256 hex of the claim>"}'
)
SETTLE_EXAMPLE = (
    '{"reservation_id": "r-1", "limit": {"key": "refund:customer:C-42", "kind": "sum", '
    '"window_seconds": 86400}, "claim": "<claim>"}'
)
MIN_EVENTS, MAX_EVENTS = 100, 10_000


def _digest(claim: str) -> str:
    return hashlib.sha256(claim.encode("utf-8")).hexdigest()


def _raise(problem: Problem | None) -> None:
    if problem is not None:
        raise refusal(*problem)


@workflow.defn(name=LEDGER_WORKFLOW_TYPE)
class HitlLedger:
    """The reservations of one limit: `reserve`, `release`, `commit` (updates), `status`."""

    @workflow.init
    def __init__(self, *args: Any) -> None:
        info = workflow.info()
        self.problem: str | None = None
        try:
            inp = read_one(
                args,
                LedgerInput,
                what="the HitlLedger input",
                example='{"limit": {"key": "...", "kind": "sum", "window_seconds": 86400}}',
                max_bytes=2 * 1024 * 1024,
                error_type="InvalidLedgerRequest",
            )
        except ApplicationError as err:  # a start by hand: refuse every request, never fail
            self.problem = err.message
            inp = LedgerInput(limit=LimitSpec(key="?", window_seconds=1))
        # Carried entries are believed only from a continuation of this ledger: anyone may
        # start a workflow with any input, and an entry is a claim on the limit.
        continued = info.continued_run_id is not None and not info.cron_schedule
        entries = inp.entries if continued and info.attempt == 1 else {}
        self._inp = inp
        self.book = LedgerBook(inp.limit, entries)
        self.problem = self.problem or limit_problem(inp.limit)
        if self.problem is None and ledger_workflow_id(inp.limit) != info.workflow_id:
            self.problem = "this ledger's id does not match its limit (it was started by hand)"
        self._events = min(max(inp.continue_after_events, MIN_EVENTS), MAX_EVENTS)
        self._wake: datetime | None = None
        self._sooner = False

    def _changed(self) -> None:
        """After a request: wake earlier if the total now drops by itself sooner."""
        nxt = self.book.next_change(workflow.now())
        if nxt is not None and (self._wake is None or nxt < self._wake):
            self._sooner = True

    @workflow.run
    async def run(self, *args: Any) -> None:
        """Serve requests; continue as new with the live entries when history grows.

        A durable timer wakes the ledger when its total drops by itself (a commit leaves the
        window, a hold lapses), so its clock and the `status` query follow; a request that
        brings that moment closer restarts the timer, any other leaves it alone.
        """
        while not self._history_full():
            self._wake = self.book.next_change(workflow.now())
            timeout = self._wake - workflow.now() if self._wake is not None else None
            self._sooner = False
            try:
                await workflow.wait_condition(
                    lambda: self._sooner or self._history_full(), timeout=timeout
                )
            except TimeoutError:
                pass
            self.book.prune(workflow.now())
        await workflow.wait_condition(workflow.all_handlers_finished)
        self.book.prune(workflow.now())
        workflow.continue_as_new(
            LedgerInput(
                limit=self._inp.limit,
                entries=self.book.entries,
                continue_after_events=self._inp.continue_after_events,
            )
        )

    def _history_full(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested() or info.get_current_history_length() >= self._events
        )

    def _usable(self) -> None:
        if self.problem is not None:
            raise refusal("LedgerMisconfigured", self.problem)

    # ------------------------------------------------------------------ reserve

    def _reservation(self, args: tuple[Any, ...]) -> ReserveInput:
        return read_one(
            args,
            ReserveInput,
            what="a reservation",
            example=RESERVE_EXAMPLE,
            max_bytes=MAX_REQUEST_BYTES,
            error_type="InvalidLedgerRequest",
        )

    @workflow.update(name=LEDGER_RESERVE)
    def reserve(self, *args: Any) -> ReserveAnswer:
        """Hold an amount under the limit and say whether it fits (a resend: the same answer)."""
        req = self._reservation(args)
        now = workflow.now()
        _raise(self.book.reserve_problem(req, now))  # state may have moved since validation
        answer = self.book.reserve(req, now)
        self._changed()
        return answer

    @reserve.validator
    def _validate_reserve(self, *args: Any) -> None:
        self._usable()
        _raise(self.book.reserve_problem(self._reservation(args), workflow.now()))

    # ------------------------------------------------------------------ settle

    def _settlement(self, args: tuple[Any, ...], what: str) -> SettleInput:
        return read_one(
            args,
            SettleInput,
            what=what,
            example=SETTLE_EXAMPLE,
            max_bytes=MAX_REQUEST_BYTES,
            error_type="InvalidLedgerRequest",
        )

    def _check_settle(self, args: tuple[Any, ...], *, commit: bool) -> SettleInput:
        self._usable()
        req = self._settlement(args, "a commit" if commit else "a release")
        _raise(self.book.settle_problem(req, commit=commit, digest=_digest(req.claim)))
        return req

    @workflow.update(name=LEDGER_RELEASE)
    def release(self, *args: Any) -> SettleAnswer:
        """Give a held amount back (rejected, expired or failed call); idempotent."""
        req = self._check_settle(args, commit=False)
        return self.book.release(req, workflow.now())

    @release.validator
    def _validate_release(self, *args: Any) -> None:
        self._check_settle(args, commit=False)

    @workflow.update(name=LEDGER_COMMIT)
    def commit(self, *args: Any) -> SettleAnswer:
        """The call ran: its amount counts until it leaves the window; idempotent."""
        req = self._check_settle(args, commit=True)
        answer = self.book.commit(req, workflow.now(), _digest(req.claim))
        self._changed()
        return answer

    @commit.validator
    def _validate_commit(self, *args: Any) -> None:
        self._check_settle(args, commit=True)

    # ------------------------------------------------------------------ status

    @workflow.query(name=LEDGER_STATUS)
    def status(self, *args: Any) -> LedgerStatus:
        """The limit, its window total now and its entries."""
        now = workflow.now()
        return LedgerStatus(
            limit=self.book.limit,
            total=str(self.book.total(now)),
            entries={k: e for k, e in self.book.entries.items() if self.book.live(e, now)},
            problem=self.problem,
        )
