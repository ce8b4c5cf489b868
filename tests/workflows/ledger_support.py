"""A stand-in for a run's call that holds limit reservations, and a worker for ledger tests.

`LimitedCall` does with its holds what `AgentRun` does at the two points `docs/ledger.md`
names: it waits for a decision with a deadline, then calls `workflows.reservations.settle_call`
(the function the run calls) with the decision, or with the tool's output.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from hitl.ledger import LedgerClient
    from hitl.wire import LimitSpec, SettledReservations, ToolOutput
    from hitl.workflows.ledger import HitlLedger
    from hitl.workflows.reservations import settle_call

KEY = b"a-test-ledger-key-0123456789"
DAY = 24 * 3600


class Hold(BaseModel):
    """A stand-in for the policy's `LimitHold` (the fields the ledger reads)."""

    key: str
    measure: str = "sum"
    window_seconds: int = DAY
    amount: str
    reservation_id: str


class CallInput(BaseModel):
    holds: list[Hold]
    deadline_seconds: float = 3600
    tool: str = "ok"
    """`ok`, `fails` (an error output, as `execute_tool` gives) or `guardrail` (refused)."""


class CallOutput(BaseModel):
    outcome: str
    settled: SettledReservations | None = None


@activity.defn(name="limited_tool")
async def limited_tool(how: str) -> ToolOutput:
    if how == "guardrail":
        return ToolOutput(output="refused by a guardrail", is_error=True, guardrail="no")
    return ToolOutput(
        output="the tool failed" if how == "fails" else "done", is_error=how == "fails"
    )


@workflow.defn(name="LimitedCall")
class LimitedCall:
    """One call holding reservations: decided (or expired), then settled as `drive` does."""

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
            self.decision = "expired"
        if self.decision != "approve":
            settled = await settle_call(inp.holds, decision=self.decision)
            return CallOutput(outcome=str(self.decision), settled=settled)
        out = await workflow.execute_activity(
            limited_tool, inp.tool, start_to_close_timeout=timedelta(seconds=10)
        )
        settled = await settle_call(inp.holds, out=out)
        return CallOutput(outcome="ran" if not out.is_error else inp.tool, settled=settled)


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
