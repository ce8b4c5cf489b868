"""A stand-in for a run's call that holds limit reservations, and a worker for ledger tests.

`LimitedCall` does with its reservations what `AgentRun` does at the points
`docs/ledger.md` names: it waits for a decision with a deadline, then releases them
(`rejected`, `expired`, or `failed` when its tool fails) or commits them (the tool ran), through
`workflows.reservations.settle_reservations`, the function the run calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from hitl.ledger import LedgerClient
    from hitl.wire import LimitSpec, ReservationRef, SettledReservations
    from hitl.workflows.ledger import HitlLedger
    from hitl.workflows.reservations import settle_reservations

KEY = b"a-test-ledger-key-0123456789"
DAY = 24 * 3600


class CallInput(BaseModel):
    refs: list[ReservationRef]
    deadline_seconds: float = 3600
    tool_fails: bool = False


class CallOutput(BaseModel):
    outcome: str
    settled: SettledReservations | None = None


@activity.defn(name="limited_tool")
async def limited_tool(fails: bool) -> str:
    if fails:
        raise ApplicationError("the tool failed", non_retryable=True)
    return "done"


@workflow.defn(name="LimitedCall")
class LimitedCall:
    """One call holding reservations: decided (or expired), then settled."""

    def __init__(self) -> None:
        self.decision: str | None = None

    @workflow.signal
    def decide(self, kind: str) -> None:
        self.decision = kind

    @workflow.run
    async def run(self, inp: CallInput) -> CallOutput:
        timeout = timedelta(seconds=inp.deadline_seconds)
        try:
            await workflow.wait_condition(lambda: self.decision is not None, timeout=timeout)
        except TimeoutError:
            settled = await settle_reservations(inp.refs, commit=False, reason="expired")
            return CallOutput(outcome="expired", settled=settled)
        if self.decision == "reject":
            settled = await settle_reservations(inp.refs, commit=False, reason="rejected")
            return CallOutput(outcome="rejected", settled=settled)
        try:
            await workflow.execute_activity(
                limited_tool, inp.tool_fails, start_to_close_timeout=timedelta(seconds=10)
            )
        except ActivityError:
            settled = await settle_reservations(inp.refs, commit=False, reason="failed")
            return CallOutput(outcome="failed", settled=settled)
        settled = await settle_reservations(inp.refs, commit=True)
        return CallOutput(outcome="ran", settled=settled)


def ledger_client(
    client: Client, task_queue: str, *, key: bytes = KEY, continue_after_events: int = 2000
) -> LedgerClient:
    """A ledger client of the test's queue (with the test key unless told otherwise)."""
    return LedgerClient(
        client, task_queue=task_queue, key=key, continue_after_events=continue_after_events
    )


def daily(key: str = "refund:customer:C-42", kind: str = "sum", days: int = 1) -> LimitSpec:
    return LimitSpec.model_validate({"key": key, "kind": kind, "window_seconds": days * DAY})


@contextlib.asynccontextmanager
async def ledger_worker(client: Client, task_queue: str, cache: int) -> AsyncIterator[None]:
    """The ledger workflow, `LimitedCall` and the ledger activities on `task_queue`."""
    from hitl.activities.ledger import LedgerActivities
    from hitl.worker.build import workflow_runner

    acts = LedgerActivities(ledger_client(client, task_queue))
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[HitlLedger, LimitedCall],
        activities=[acts.ledger_release, acts.ledger_commit, limited_tool],
        workflow_runner=workflow_runner(),
        max_cached_workflows=cache,
        disable_payload_error_limit=True,
    ):
        yield
