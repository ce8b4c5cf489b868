"""Floods that would jam a run: waits that hold every update slot, the update budget, signals.

Temporal admits at most 10 updates in flight per run and 2,000 in its history, and terminates
a run at 51,200 events. Each of these is reachable by one person with the `temporal` CLI; none
may stop a person from deciding.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.client import WorkflowHandle

from hitl.wire import DecisionInput, DecisionRecord, RunInput, RunOutput, RunStatus, WaitInput
from tests.helpers import history, tool_activity_count
from tests.hostile import raw
from tests.hostile.conftest import Desk


async def test_long_polls_cannot_take_every_update_slot(desk: Desk) -> None:
    """Ten event-stream polls that never return would hold every slot the server allows; the
    run admits five, and a decision still gets through."""
    handle, call_id = await desk.park()
    offset = await handle.query("__temporal_workflow_stream_offset", result_type=int)
    poll = raw.json_payload({"topics": ["events"], "from_offset": offset + 1000})
    answers = [
        await raw.update(
            desk.client, handle.id, "__temporal_workflow_stream_poll", [poll], accepted_only=True
        )
        for _ in range(10)
    ]
    assert [a.ok for a in answers].count(True) == 5
    assert {a.type for a in answers if not a.ok} == {"TooManyWaiters"}
    await desk.approve_and_finish(handle, call_id)


@pytest.mark.timeout(180)  # 2,100 updates: 41 s in the suite on 2 cores, >60 s at -n 3
async def test_the_update_budget_cannot_be_spent(desk: Desk) -> None:
    """2,100 accepted updates would exhaust a run's 2,000: it continues as new while parked,
    keeps its pending call, and the decision sent by workflow id lands on the new run."""
    handle, call_id = await desk.park()
    first_run = (await handle.describe()).run_id
    wait = raw.json_payload({})
    sem = asyncio.Semaphore(4)
    statuses = set()

    async def one() -> bool:
        async with sem:
            while True:
                answer = await raw.update(desk.client, handle.id, "wait", [wait])
                if answer.rpc is None:
                    return answer.ok  # accepted, or refused as a wait too many
                statuses.add(answer.rpc.status)  # the run is continuing as new: send again

    accepted = await asyncio.gather(*(one() for _ in range(2100)))
    assert sum(accepted) >= 2000, sum(accepted)
    latest = desk.client.get_workflow_handle(handle.id)
    assert (await latest.describe()).run_id != first_run, "it continued as new"
    status: RunStatus = await latest.query("status", result_type=RunStatus)
    assert [p.call_id for p in status.pending] == [call_id] and status.phase == "awaiting_approval"
    await _approve_latest(desk, latest, call_id)


async def test_a_parked_run_compacts_under_a_signal_flood(desk: Desk) -> None:
    """Refused signals grow history; past the run's threshold it continues as new while
    parked, with its pending call, deadline-free wait, refusals and stream intact."""
    wid = f"flood-{uuid.uuid4().hex[:8]}"
    handle: WorkflowHandle[RunInput, RunOutput] = await desk.client.start_workflow(
        "AgentRun",
        RunInput(agent="Gate desk", input="wire", run_config={"continue_as_new_after_events": 40}),
        id=wid,
        task_queue=desk.task_queue,
        result_type=RunOutput,
    )
    status: RunStatus = await handle.execute_update("wait", WaitInput(), result_type=RunStatus)
    [pending] = status.pending
    first_run = (await handle.describe()).run_id
    junk = raw.json_payload({"call_id": "nope"})
    for _ in range(30):
        sent = await raw.signal(desk.client, wid, "approve", [junk])
        while not sent.ok:  # the run is continuing as new: send again
            assert sent.rpc is not None and "closing" in sent.message, sent
            sent = await raw.signal(desk.client, wid, "approve", [junk])
    latest = desk.client.get_workflow_handle(wid)

    async def continued() -> bool:
        return (await latest.describe()).run_id != first_run

    from tests.helpers import wait_for

    await wait_for(continued, what="the parked run to continue as new")
    status = await latest.query("status", result_type=RunStatus)
    assert [p.call_id for p in status.pending] == [pending.call_id]
    assert status.refused and status.refused[-1].error_type == "UnknownCall", "refusals kept"
    await _approve_latest(desk, latest, pending.call_id)


async def _approve_latest(desk: Desk, handle: WorkflowHandle[object, object], call_id: str) -> None:
    rec: DecisionRecord = await handle.execute_update(
        "approve", DecisionInput(call_id=call_id, approver="ops"), result_type=DecisionRecord
    )
    assert rec.kind == "approve"
    out = await desk.client.get_workflow_handle(handle.id, result_type=RunOutput).result()
    assert out.final_output == "wired $250"
    assert desk.ledger.count("wire") == 1, "the tool ran once, on the new run"
    # No run of the chain scheduled the tool before the decision.
    assert tool_activity_count(await history(handle)) == 1
    assert raw.task_failures(await history(handle)) == []
