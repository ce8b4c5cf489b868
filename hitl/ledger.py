"""Limits across runs, client side: reserve, release and commit in `HitlLedger` workflows.

Used from activities (a run's planning activity reserves; `ledger_release` / `ledger_commit`
settle), never from workflow code. Each request is an update sent with update-with-start, so
the first reservation of a limit starts its ledger, and its update id is derived from the
reservation, so a retried activity (or a resent request after a crash) is applied once.

Who may release or commit a reservation: whoever holds its **claim**, an HMAC of the
reservation id under the workers' ledger key (`HITL_LEDGER_KEY`). The ledger keeps only the
claim's digest; a run's history carries no claim (the activity derives it again). Without a
key the claim is a plain digest of the reservation id, which anyone who can read the run's
history can compute (`docs/security.md`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import random
import time
from collections.abc import Mapping
from datetime import timedelta
from decimal import Decimal
from typing import Any, Protocol

from pydantic import BaseModel
from temporalio import activity
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from hitl.policy.limits import LimitAnswer, LimitLedgerError
from hitl.wire import (
    DEFAULT_TASK_QUEUE,
    LEDGER_COMMIT,
    LEDGER_RELEASE,
    LEDGER_RESERVE,
    LEDGER_STATUS,
    LEDGER_WORKFLOW_TYPE,
    LedgerInput,
    LedgerStatus,
    LimitSpec,
    ReservationRef,
    ReserveAnswer,
    ReserveInput,
    SettleAnswer,
    SettleInput,
    decimal_of,
    exact_sum,
    ledger_reservation_id,
    ledger_workflow_id,
    reservation_ref,
)

__all__ = [
    "KEY_ENV",
    "LedgerClient",
    "LedgerRefused",
    "LimitAnswer",
    "LimitLedgerError",
    "TemporalLimitLedger",
    "claim_for",
    "key_from_env",
    "ledger_reservation_id",
    "ref_of",
]

KEY_ENV = "HITL_LEDGER_KEY"
"""The workers' shared secret that makes claims unguessable (at least 16 characters)."""
MIN_KEY_CHARS = 16
HOLD_EXTRA = 7 * 24 * 3600
BUSY_FIRST_DELAY = 0.05
BUSY_MAX_DELAY = 2.0
RETRY_FOR = 60.0
"""Seconds a request is resent to a busy or moving ledger before `LimitLedgerError`."""
SETTLED_QUIETLY = {"UnknownReservation": "unknown", "AlreadyCommitted": "committed"}
"""Refusals of a release or commit that mean "nothing to do" (the protocol is at-least-once)."""


class LedgerRefused(LimitLedgerError):
    """The ledger refused a request (its validator's typed error: `type` and message)."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type = type_name


class LimitCheckLike(Protocol):
    """The fields of `hitl.policy.limits.LimitCheck` the ledger reads."""

    key: str
    window_seconds: int
    measure: Any
    amount: str
    threshold: str
    reservation_id: str
    reserve: bool


def key_from_env(env: Mapping[str, str] | None = None) -> bytes | None:
    """The ledger key from `HITL_LEDGER_KEY` (None when unset).

    Raises:
        LimitLedgerError: it is set but shorter than 16 characters.
    """
    text = (env if env is not None else os.environ).get(KEY_ENV, "").strip()
    if not text:
        return None
    if len(text) < MIN_KEY_CHARS:
        raise LimitLedgerError(f"{KEY_ENV} must be at least {MIN_KEY_CHARS} characters")
    return text.encode("utf-8")


def claim_for(reservation_id: str, key: bytes | None) -> str:
    """The claim that releases or commits `reservation_id` (the ledger holds its digest)."""
    if key is not None:
        return hmac.new(key, reservation_id.encode("utf-8"), hashlib.sha256).hexdigest()
    return hashlib.sha256(b"hitl-ledger-claim:" + reservation_id.encode("utf-8")).hexdigest()


def _limit_of(check: LimitCheckLike) -> LimitSpec:
    return reservation_ref(check).limit


def ref_of(check: LimitCheckLike) -> ReservationRef:
    """What a run carries to release or commit the reservation `check` made."""
    return reservation_ref(check)


def _update_id(reservation_id: str, claim: str, content: str) -> str:
    """The update id of a request: the same for a resend, another for different content.

    The server answers a known update id with its first result without asking the ledger, so
    the id binds what the request says: someone who made `reservation_id` first with their
    own claim or amount cannot have our request answered with theirs (ours reaches the
    ledger's validator and is refused as a conflict), and a second rule asking with another
    threshold gets an answer computed against its own.
    """
    bound = hashlib.sha256(f"{claim}|{content}".encode()).hexdigest()[:16]
    return f"{reservation_id}:{bound}"


def _transient(err: BaseException) -> bool:
    """Whether resending may succeed: busy, aborted by continue-as-new, or timed out."""
    if isinstance(err, WorkflowUpdateRPCTimeoutOrCancelledError):
        return True
    return isinstance(err, RPCError) and err.status in (
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
    )


def _refusal(err: BaseException) -> LedgerRefused | None:
    """The ledger's typed refusal inside `err` (None: not a refusal, e.g. the server is away)."""
    cause = err.__cause__ if isinstance(err, WorkflowUpdateFailedError) else err
    if isinstance(cause, ApplicationError) and cause.type:
        return LedgerRefused(cause.type, cause.message)
    return None


class LedgerClient:
    """Requests to `HitlLedger` workflows.

    Args:
        client: A connected client (None: the current activity's).
        task_queue: Where ledgers start (None: the current activity's queue, else `hitl`).
        key: The claim key.
        key_from_environment: With no `key`, read `HITL_LEDGER_KEY`.
        continue_after_events: A new ledger continues as new after this many events.
        retry_for: Seconds to resend a request to a busy or moving ledger.
    """

    def __init__(
        self,
        client: Client | None = None,
        *,
        task_queue: str | None = None,
        key: bytes | None = None,
        key_from_environment: bool = True,
        continue_after_events: int = 2000,
        retry_for: float = RETRY_FOR,
    ) -> None:
        self._client = client
        self._task_queue = task_queue
        self.key = key if key is not None or not key_from_environment else key_from_env()
        self.continue_after_events = continue_after_events
        self.retry_for = retry_for

    @property
    def client(self) -> Client:
        """The client requests go through."""
        return self._client if self._client is not None else activity.client()

    @property
    def task_queue(self) -> str:
        """The queue a new ledger starts on."""
        if self._task_queue is not None:
            return self._task_queue
        return activity.info().task_queue if activity.in_activity() else DEFAULT_TASK_QUEUE

    def _start(self, limit: LimitSpec) -> WithStartWorkflowOperation[Any, Any]:
        # A ledger never completes; one that was terminated stays closed (REJECT_DUPLICATE):
        # starting it again empty would forget every reservation and widen the limit.
        return WithStartWorkflowOperation(
            LEDGER_WORKFLOW_TYPE,
            LedgerInput(limit=limit, continue_after_events=self.continue_after_events),
            id=ledger_workflow_id(limit),
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            static_summary="Limit ledger (reservations across runs)",
        )

    async def _send(self, name: str, limit: LimitSpec, req: BaseModel, update_id: str) -> Any:
        """Send one request, resending it while the ledger is busy or moving.

        Resending is safe (the update id makes it apply once). The server admits 10 updates at
        once per workflow and refuses more (RESOURCE_EXHAUSTED); it aborts the updates in
        flight when the ledger continues as new (UNAVAILABLE, "aborted"); and a request whose
        workflow task died with its worker outlives the call's RPC timeout.
        """
        deadline = time.monotonic() + self.retry_for
        delay = BUSY_FIRST_DELAY
        while True:
            try:
                return await self._send_once(name, limit, req, update_id)
            except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
                task = asyncio.current_task()
                if not _transient(err) or (task is not None and task.cancelling()):
                    raise
                if time.monotonic() + delay > deadline:
                    raise LimitLedgerError(f"the ledger did not answer in time: {err}") from err
            await asyncio.sleep(random.uniform(delay / 2, delay))  # jitter: callers spread out
            delay = min(delay * 2, BUSY_MAX_DELAY)

    async def _send_once(self, name: str, limit: LimitSpec, req: BaseModel, update_id: str) -> Any:
        result_type = ReserveAnswer if name == LEDGER_RESERVE else SettleAnswer
        try:
            return await self.client.execute_update_with_start_workflow(
                name,
                req,
                start_workflow_operation=self._start(limit),
                id=update_id,
                result_type=result_type,
            )
        except WorkflowAlreadyStartedError:
            raise LedgerRefused(
                "LedgerClosed",
                f"the ledger {ledger_workflow_id(limit)} was closed (terminated?); it refuses "
                "reservations until an operator deletes it",
            ) from None
        except WorkflowUpdateFailedError as err:
            if (refused := _refusal(err)) is not None:
                raise refused from None
            raise

    async def reserve(
        self,
        reservation_id: str,
        limit: LimitSpec,
        *,
        amount: str,
        threshold: str,
        hold: timedelta | None = None,
    ) -> ReserveAnswer:
        """Hold `amount` under `limit` (once per `reservation_id`); whether it fits `threshold`.

        A hold nobody settles (its run was terminated) lapses after `hold`: by default the
        window plus 7 days, so a call that ran within a week of reserving is still counted
        even if its commit never arrived.

        Raises:
            LedgerRefused: the ledger refused it (typed: `ReservationConflict`, `LedgerFull`,
                `InvalidLedgerRequest`, `LedgerClosed`, ...).
        """
        claim = claim_for(reservation_id, self.key)
        req = ReserveInput(
            reservation_id=reservation_id,
            limit=limit,
            amount=amount,
            threshold=threshold,
            claim_digest=hashlib.sha256(claim.encode("utf-8")).hexdigest(),
            hold_seconds=int(hold.total_seconds()) if hold else limit.window_seconds + HOLD_EXTRA,
        )
        update_id = _update_id(reservation_id, req.claim_digest, f"{amount}|{threshold}")
        answer: ReserveAnswer = await self._send(LEDGER_RESERVE, limit, req, update_id)
        return answer

    async def settle(self, ref: ReservationRef, *, commit: bool, reason: str = "") -> SettleAnswer:
        """Release (`commit=False`) or commit a reservation; a second time changes nothing.

        An unknown reservation (never made, or forgotten) answers `unknown` on release; a
        release of a committed one answers `committed` (it ran, it stays counted).
        """
        name = LEDGER_COMMIT if commit else LEDGER_RELEASE
        req = SettleInput(
            reservation_id=ref.reservation_id,
            limit=ref.limit,
            claim=claim_for(ref.reservation_id, self.key),
            amount=ref.amount if commit else None,
            reason=reason,
        )
        try:
            answer: SettleAnswer = await self._send(
                name, ref.limit, req, _update_id(f"{name}:{ref.reservation_id}", req.claim, "")
            )
        except LedgerRefused as err:
            if err.type not in SETTLED_QUIETLY:
                raise
            state = SETTLED_QUIETLY[err.type]
            return SettleAnswer.model_validate(
                {"reservation_id": ref.reservation_id, "state": state, "total": "0"}
            )
        return answer

    async def status(self, limit: LimitSpec) -> LedgerStatus | None:
        """The ledger of `limit` (None: it does not exist yet). A query: no event anywhere."""
        handle = self.client.get_workflow_handle(ledger_workflow_id(limit))
        try:
            status: LedgerStatus = await handle.query(LEDGER_STATUS, result_type=LedgerStatus)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        except WorkflowQueryFailedError as err:
            raise LimitLedgerError(f"the ledger could not answer: {err}") from None
        return status

    async def total(self, limit: LimitSpec) -> Decimal:
        """The window total of `limit` now (0 when its ledger does not exist)."""
        status = await self.status(limit)
        return decimal_of(status.total) if status is not None else Decimal(0)


class TemporalLimitLedger:
    """The policy's `LimitLedger` protocol, served by `HitlLedger` workflows.

    `check.reservation_id` is the policy's (it may be long and carry the key); the ledger only
    sees its digest (`ledger_reservation_id`). `check.at` is not used: the window ends at the
    ledger's own clock, so nobody can backdate a reservation.
    """

    def __init__(self, ledger: LedgerClient | None = None) -> None:
        self.ledger = ledger if ledger is not None else LedgerClient()

    async def check_and_reserve(self, check: LimitCheckLike) -> LimitAnswer:
        """Reserve `check.amount` (unless `check.reserve` is false) and compare the totals."""
        limit = _limit_of(check)
        try:
            if not check.reserve:
                before = await self.ledger.total(limit)
                after = exact_sum([before, decimal_of(check.amount)])
                exceeded = after > decimal_of(check.threshold)
                return LimitAnswer(
                    total_before=str(before), total_after=str(after), exceeded=exceeded
                )
            answer = await self.ledger.reserve(
                ledger_reservation_id(check.reservation_id),
                limit,
                amount=check.amount,
                threshold=check.threshold,
            )
        except RPCError as err:
            raise LimitLedgerError(f"the ledger could not answer: {err.message}") from None
        return LimitAnswer(
            total_before=answer.before,
            total_after=answer.total,
            exceeded=not answer.fits,
            reserved=True,
        )

    async def release(self, check: LimitCheckLike, reason: str) -> None:
        """Give the reservation of `check` back (unknown or already settled: nothing)."""
        await self.ledger.settle(ref_of(check), commit=False, reason=reason)

    async def commit(self, check: LimitCheckLike) -> None:
        """The call of `check` ran: its amount counts until the window passes."""
        await self.ledger.settle(ref_of(check), commit=True)
