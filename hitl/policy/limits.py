"""Limits across runs: the protocol a limit ledger implements (see docs/policies.md).

A rule's `limit` (a count or sum per key over a sliding window) is evaluated by the worker's
ledger, a durable store shared by every run (for example one entity workflow per key holding
reservations). The policy side only speaks this protocol; it never imports an implementation.
`check_and_reserve` is idempotent per `reservation_id`, so a retried planning activity never
reserves twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from hitl.errors import AgentsException


class LimitCheck(BaseModel):
    """One call's question to the ledger: would this key's total pass the threshold?"""

    key: str = Field(max_length=200)
    """The rendered key (`customer:C-17`)."""
    window_seconds: int = Field(gt=0)
    measure: Literal["count", "sum"]
    amount: str
    """This call's amount, a decimal as text (`1` for a count); 0 or more."""
    threshold: str
    """The rule's `above`, a decimal as text."""
    reservation_id: str
    """`<workflow id>:<model call id>:<key>`: the same call asking again gets the same one."""
    reserve: bool = True
    """`False`: only look (a `log_only` rule)."""
    at: datetime
    """When the call was planned (UTC): the window ends here."""


class LimitAnswer(BaseModel):
    """The ledger's answer: totals in the window, and whether the threshold is passed."""

    total_before: str
    """The key's live reservations in the window, this call's excluded (a decimal as text)."""
    total_after: str
    """`total_before` plus this call's amount."""
    exceeded: bool
    """`total_after` is above the threshold."""
    reserved: bool = False
    """The ledger holds a reservation for this call (new, or the same one again)."""


class LimitLedgerError(AgentsException):
    """The ledger could not answer; the policy then treats the limit as passed (fails closed)."""


@runtime_checkable
class LimitLedger(Protocol):
    """What a worker's limit ledger does (`build_worker(ledger=...)`)."""

    async def check_and_reserve(self, check: LimitCheck) -> LimitAnswer:
        """Answer `check`, reserving its amount when `check.reserve` (idempotent per id)."""
        ...

    async def release(self, check: LimitCheck, reason: str) -> None:
        """Give back the reservation `check` made; an unknown or settled one: no-op.

        `reason`: `denied`, `refused`, `rejected`, `expired` or `failed`.
        """
        ...

    async def commit(self, check: LimitCheck) -> None:
        """The call ran: the reservation `check` made counts until its window passes."""
        ...
