"""A local tool's worker dies midway: the decision holds, the call runs again, one effect."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from hitl import Runner
from hitl.wire import DecisionInput, RunOutput
from hitl.worker.devserver import DevServer
from tests.agents import local_refund_agent
from tests.helpers import Ledger, WorkerProcess, queue_name, tool_activity_count, wait_for


async def test_worker_killed_during_a_local_tool_reruns_it_with_the_same_key(
    dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    """The approval's workflow task never completes (the tool holds it), so the decision is not
    yet accepted when the worker dies; the server keeps the update and hands it, with the
    workflow task, to the next worker, which records the decision once and runs the call again
    under the same idempotency key: two executions, one effect."""
    ledger_path = tmp_path / "ledger.db"
    started = tmp_path / "started"
    env = {
        "HITL_TEST_LEDGER": str(ledger_path),
        "HITL_TEST_STARTED": str(started),
        "HITL_TEST_TOOL_SECONDS": "60",
    }
    tq = queue_name("localtool")
    first = WorkerProcess(dev_server.address, tq, env=env).start()
    try:
        result = await Runner.run(
            local_refund_agent, "refund order 42", client=dev_client, task_queue=tq, serve=False
        )
        (item,) = result.interruptions
        handle = dev_client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        decision = asyncio.create_task(
            handle.execute_update(
                "approve", DecisionInput(call_id=item.call_id, approver="ops"), id="approve-42"
            )
        )
        await wait_for(started.exists, what="the tool to start")
        assert not decision.done(), "the answer waits for the local call"
    finally:
        first.kill()  # the effect is committed; the workflow task never completes
    with WorkerProcess(dev_server.address, tq, env=env):
        await asyncio.wait_for(decision, 60)
        out = await asyncio.wait_for(handle.result(), 60)

    assert out.final_output == "Refunded order 42"
    assert started.read_text() == "2", "the call ran again on the second worker"
    rows = Ledger(ledger_path).rows()
    assert len(rows) == 1 and rows[0][3] == 2, "two executions, one effect (idempotency key)"
    assert rows[0][0] == f"{result.workflow_id}:{item.call_id}"
    assert [(d.kind, d.approver) for d in out.decisions] == [("approve", "ops")]
    hist = await handle.fetch_history()
    accepted = [
        e
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        and e.workflow_execution_update_accepted_event_attributes.accepted_request.meta.update_id
        == "approve-42"
    ]
    assert len(accepted) == 1, "the decision was accepted once, by the second worker"
    assert tool_activity_count(hist) == 0
