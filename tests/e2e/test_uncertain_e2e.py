"""A worker killed mid-payment, on the real dev server: the call becomes uncertain (one attempt,
no blind retry), an operator settles it with `hitl resolve` each of the three ways, and the
effect ledger proves one payment per call."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client

from hitl import Runner
from hitl.wire import DecisionInput, RunOutput, RunStatus
from hitl.worker.devserver import DevServer
from tests.agents import payout_agent
from tests.e2e.cli_support import hitl
from tests.helpers import Ledger, WorkerProcess, queue_name, tool_activity_count, wait_for


@pytest.mark.parametrize(
    ("outcome", "flags", "final", "attempts"),
    [
        (
            "happened",
            ["--output", "paid ACME $4200 (bank ref 9)"],
            "paid ACME $4200 (bank ref 9)",
            1,
        ),
        ("retry", [], "paid ACME $4200", 2),
        ("give-up", ["--message", "pay it by hand"], "pay it by hand", 1),
    ],
)
async def test_a_killed_payment_asks_a_person_and_pays_once(
    dev_server: DevServer,
    dev_client: Client,
    tmp_path: Path,
    outcome: str,
    flags: list[str],
    final: str,
    attempts: int,
) -> None:
    tq = queue_name("uncertain")
    ledger = Ledger(tmp_path / "ledger.db")
    env = {"HITL_TEST_LEDGER": str(tmp_path / "ledger.db"), "HITL_TEST_TOOL_SECONDS": "120"}
    agents = "tests.agents:payout_agent"
    first = WorkerProcess(dev_server.address, tq, agents=agents, env=env).start()
    try:
        result = await Runner.run(
            payout_agent, "ACME", client=dev_client, task_queue=tq, serve=False
        )
        handle = dev_client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        call_id = result.interruptions[0].call_id
        await handle.execute_update("approve", DecisionInput(call_id=call_id, approver="ops"))
        await wait_for(lambda: ledger.count("payout") == 1, what="the payment to be made")
    finally:
        first.kill()  # the money moved; the answer is lost with the worker
    with WorkerProcess(dev_server.address, tq, agents=agents, env=env):

        async def uncertain() -> bool:
            status = await handle.query("status", result_type=RunStatus)
            return bool(status.pending) and status.pending[0].kind == "uncertain"

        await wait_for(uncertain, timeout=60, what="the call to become uncertain")
        shown = await asyncio.to_thread(hitl, dev_server.address, "show", result.workflow_id)
        assert "UNCERTAIN" in shown.stdout and "hitl resolve" in shown.stdout
        assert "hitl approve" not in shown.stdout, "its approval is over"

        def listed_as_uncertain() -> bool:  # the inbox memo, in visibility: eventually
            table = hitl(dev_server.address, "pending", "--queue", tq)
            rows = [ln for ln in table.stdout.splitlines() if ln.startswith(result.workflow_id)]
            return len(rows) == 1 and "uncertain: hitl resolve" in rows[0]

        await wait_for(
            lambda: asyncio.to_thread(listed_as_uncertain), timeout=30, what="hitl pending"
        )
        done = await asyncio.to_thread(
            hitl,
            dev_server.address,
            "resolve",
            result.workflow_id,
            call_id,
            outcome,
            *flags,
            "--as",
            "ops",
        )
        assert done.returncode == 0, done.stderr
        assert "resolved" in done.stdout
        out = await asyncio.wait_for(handle.result(), 60)
        hist = await handle.fetch_history()
    assert out.final_output == final
    assert ledger.count("payout") == 1, "one payment, whatever the operator chose"
    assert len(ledger.attempts("payout")) == attempts
    assert tool_activity_count(hist) == attempts, "no attempt but the operator's retry"
