"""`ledger_release` and `ledger_commit`: a run settles the reservations its calls hold.

The run schedules them only for calls that hold reservations (`workflows.reservations`), so a
run without limits gets no event from them. They never fail a run: a refusal (a wrong claim
after the key was rotated, a closed ledger) is reported in the answer and the hold lapses on
its own; only an unreachable server is retried.
"""

from __future__ import annotations

from temporalio import activity

from hitl.ledger import LedgerClient, LedgerRefused
from hitl.wire import (
    ACT_LEDGER_COMMIT,
    ACT_LEDGER_RELEASE,
    SettleAnswer,
    SettledReservations,
    SettleReservations,
)


class LedgerActivities:
    """Settle reservations in their ledgers (`HitlLedger`), once per reservation and outcome."""

    def __init__(self, ledger: LedgerClient | None = None) -> None:
        self.ledger = ledger if ledger is not None else LedgerClient()

    async def _settle(self, inp: SettleReservations, *, commit: bool) -> SettledReservations:
        answers = []
        for ref in inp.reservations:
            try:
                answer = await self.ledger.settle(ref, commit=commit, reason=inp.reason)
            except LedgerRefused as err:
                activity.logger.warning("the ledger refused to settle a reservation: %s", err)
                answer = SettleAnswer(
                    reservation_id=ref.reservation_id, state="refused", total="0", problem=str(err)
                )
            answers.append(answer)
        return SettledReservations(answers=answers)

    @activity.defn(name=ACT_LEDGER_RELEASE)
    async def ledger_release(self, inp: SettleReservations) -> SettledReservations:
        """Give the reservations back: their calls were rejected, expired or failed."""
        return await self._settle(inp, commit=False)

    @activity.defn(name=ACT_LEDGER_COMMIT)
    async def ledger_commit(self, inp: SettleReservations) -> SettledReservations:
        """The calls ran: their amounts count until they leave their windows."""
        return await self._settle(inp, commit=True)
