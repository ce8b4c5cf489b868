"""The hostile suite: someone with access to the namespace, sending whatever they like.

Each test drives a real dev server and a real worker serving `tests.hostile.agents`, and talks
to runs either with the `temporal` CLI (as such a person would) or with raw gRPC requests (to
send exact bytes, encodings and numbers of payloads). What every test checks, besides its own
point: no workflow task failed, the run still answers, nothing that needs approval ran without a
decision, and the run can still be approved.

And after every test, `hitl verify` reads each run the test started (its chain and nested
runs) from history alone: every executed call must be proven, and every effect the tools
recorded must be one of those calls (`verified_runs`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest_asyncio
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from hitl.cli.history import Report
from hitl.cli.verify import render, roots_since, verify_run
from hitl.wire import DecisionInput, DecisionRecord, RunInput, RunOutput, RunStatus, WaitInput
from hitl.worker.devserver import DevServer
from tests.helpers import Ledger, history, serving, tool_activity_count
from tests.hostile.agents import AGENTS
from tests.hostile.raw import task_failures


@dataclass
class Desk:
    """A worker serving the hostile agents, and what tests need around it."""

    client: Client
    server: DevServer
    task_queue: str
    ledger: Ledger

    async def park(self, agent: str = "Gate desk") -> tuple[WorkflowHandle[Any, RunOutput], str]:
        """Start a run as `temporal workflow start` would and wait until it parks."""
        handle = await self.client.start_workflow(
            "AgentRun",
            RunInput(agent=agent, input="wire the refund"),
            id=f"hostile-{uuid.uuid4().hex[:10]}",
            task_queue=self.task_queue,
            result_type=RunOutput,
        )
        status: RunStatus = await handle.execute_update("wait", WaitInput(), result_type=RunStatus)
        assert status.phase == "awaiting_approval", status
        [pending] = status.pending
        return handle, pending.call_id

    async def still_healthy(
        self, handle: WorkflowHandle[Any, RunOutput], call_id: str, tool: str = "wire"
    ) -> RunStatus:
        """The run took no harm: no task failed, it answers, it still waits, nothing ran."""
        hist = await history(handle)
        assert task_failures(hist) == [], "a payload failed a workflow task"
        desc = await handle.describe()
        assert desc.status == WorkflowExecutionStatus.RUNNING
        status: RunStatus = await handle.query("status", result_type=RunStatus)
        assert [p.call_id for p in status.pending] == [call_id], status
        assert status.decisions == []
        assert tool_activity_count(hist) == 0, "a tool ran without a decision"
        assert self.ledger.count(tool) == 0
        return status

    async def approve_and_finish(
        self, handle: WorkflowHandle[Any, RunOutput], call_id: str, tool: str = "wire"
    ) -> RunOutput:
        """A legitimate approval still works, and the tool runs exactly once."""
        await handle.execute_update(
            "approve", DecisionInput(call_id=call_id, approver="ops"), result_type=DecisionRecord
        )
        out = await handle.result()
        assert self.ledger.count(tool) == 1
        assert task_failures(await history(handle)) == []
        return out


@pytest_asyncio.fixture
async def desk(dev_client: Client, dev_server: DevServer, ledger: Ledger) -> AsyncIterator[Desk]:
    async with serving(dev_client, *AGENTS) as tq:
        yield Desk(dev_client, dev_server, tq, ledger)


async def verify_since(client: Client, began: datetime, ledger: Ledger) -> list[Report]:
    """`hitl verify` over every run started since `began`: each executed call is proven, and
    each effect a tool recorded (`workflow id:call id`) is one of those calls."""
    span = datetime.now(UTC) - began + timedelta(seconds=1)
    reports = [
        await verify_run(client, root) for root in await roots_since(client, span, limit=1000)
    ]
    unproven = [line for r in reports if not r.ok for line in render([r])]
    assert not unproven, "hitl verify cannot prove an executed call:\n" + "\n".join(unproven)
    proven = {
        f"{c.workflow_id}:{c.call_id.rsplit('/', 1)[-1]}"
        for r in reports
        for c in r.calls
        if c.verdict.ok
    }
    effects = {key for key, _, _, _ in ledger.rows()}
    assert effects <= proven, f"effects of calls verify did not see run: {effects - proven}"
    return reports


@pytest_asyncio.fixture(autouse=True)
async def verified_runs(dev_client: Client, ledger: Ledger) -> AsyncIterator[None]:
    """After each test: every run it started verifies (see `verify_since`)."""
    began = datetime.now(UTC)
    yield
    await verify_since(dev_client, began, ledger)
