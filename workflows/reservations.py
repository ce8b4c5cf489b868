"""Where a run tells the ledgers what became of a call that holds reservations.

A call's plan may hold reservations under limits across runs (`ReservationRef`s, from the
policy's limit rules). The run calls `settle_reservations` once the call's fate is known:
released when it is rejected, expires or its tool fails; committed when its tool ran. A call
with no reservations schedules nothing, so runs without limits keep their histories as they
were. It never fails the run: a ledger that cannot be reached for a day leaves the hold to
lapse by itself (counted meanwhile: the limit errs on the strict side).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Literal

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from hitl.wire import CallRecord, PolicyVerdict, ToolOutput, text_digest
    from hitl.wire.ledger import (
        ACT_LEDGER_COMMIT,
        ACT_LEDGER_RELEASE,
        Hold,
        ReservationRef,
        SettledReservations,
        SettleReservations,
        reservation_ref,
    )
    from hitl.workflows.turn import MAX_VERDICTS_KEPT

ReleaseReason = Literal["rejected", "expired", "failed", "denied", "refused"]
EDIT_PATCH = "hitl-edit-reservations"
"""Runs whose edits kept the model's reservation (recorded before) replay without it."""
SETTLE_WITHIN = timedelta(days=1)
"""How long a run keeps trying to reach a ledger before leaving the hold to lapse."""


async def settle_reservations(
    refs: Sequence[ReservationRef], *, commit: bool, reason: ReleaseReason | None = None
) -> SettledReservations | None:
    """Commit (`commit=True`, the tool ran) or release (with `reason`) a call's reservations.

    Returns the ledgers' answers, or None when there was nothing to settle or no ledger
    could be reached within `SETTLE_WITHIN`.
    """
    if not refs:
        return None
    try:
        answers: SettledReservations = await workflow.execute_activity(
            ACT_LEDGER_COMMIT if commit else ACT_LEDGER_RELEASE,
            SettleReservations(reservations=list(refs), reason="" if commit else reason or ""),
            result_type=SettledReservations,
            start_to_close_timeout=timedelta(seconds=30),
            schedule_to_close_timeout=SETTLE_WITHIN,
            retry_policy=RetryPolicy(maximum_interval=timedelta(minutes=1)),
        )
    except ActivityError as err:
        workflow.logger.warning("reservations left to lapse (no ledger answered): %s", err)
        return None
    return answers


def call_outcome(
    decision: str | None = None, out: ToolOutput | None = None
) -> tuple[bool, ReleaseReason | None]:
    """What a call's fate means for its reservations: `(commit, release reason)`.

    Rejected or expired: released. Its tool refused by an input guardrail (it did not run):
    released as `refused`; the tool failed (`is_error`): released as `failed`. Otherwise the
    tool (or the nested run) ran: committed.
    """
    if decision in ("reject", "expired"):
        return False, "expired" if decision == "expired" else "rejected"
    if out is not None and out.guardrail is not None:
        return False, "refused"
    if out is not None and out.is_error:
        return False, "failed"
    return True, None


async def settle_call(
    holds: Sequence[Hold], *, decision: str | None = None, out: ToolOutput | None = None
) -> SettledReservations | None:
    """Settle the holds of one call by its fate (`call_outcome`); nothing for no holds.

    The run calls it in `workflows.calls.drive`: with `decision=decision.kind` where a
    rejected or expired call returns, and with `out=out` once the tool's output is set.
    """
    if not holds:
        return None
    commit, reason = call_outcome(decision, out)
    refs = [reservation_ref(h) for h in holds]
    return await settle_reservations(refs, commit=commit, reason=reason)


def edit_reservation(call: CallRecord, text: str) -> str | None:
    """The id an edit's limit reservations are made under (`None`: the edit changes nothing).

    Its own per update (the update id, digested), so the edited amount is reserved apart from
    the model's, and two edits in flight never share one.
    """
    if text == call.arguments or not workflow.patched(EDIT_PATCH):
        return None
    info = workflow.current_update_info()
    return f"{call.model_id}~e{text_digest(info.id if info else text)[:16]}"


def take_edit_holds(
    call: CallRecord, verdict: PolicyVerdict | None, verdicts: list[PolicyVerdict]
) -> list[Hold]:
    """An edit was taken: the call now holds what its plan reserved for the edited arguments.

    The edit's verdict is the call's now, and joins the run's record (`verdicts`, the latest
    500). Returns the holds the call had for the arguments before (to release).
    """
    if verdict is None or call.policy is None:
        return []
    before: list[Hold] = list(call.policy.reservations)
    verdict.call_id = call.call_id
    call.policy = verdict
    verdicts.append(verdict)
    del verdicts[:-MAX_VERDICTS_KEPT]
    return before


async def release_holds(holds: Sequence[Hold], reason: ReleaseReason = "refused") -> None:
    """Give back holds no call keeps (an edit's, refused; or the ones an edit replaced)."""
    await settle_reservations([reservation_ref(h) for h in holds], commit=False, reason=reason)
