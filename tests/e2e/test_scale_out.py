"""Scale-out on the real dev server: several worker processes share one task queue.

One worker is SIGKILLed (the others carry on: every run completes, every approved tool has
exactly one effect) or stopped with SIGTERM (its in-flight tool finishes on it first).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory

from hitl.wire import WORKFLOW_TYPE, DecisionInput, RunInput, RunOutput, RunStatus, WaitInput
from tests.agents import shipping_agent
from tests.helpers import (
    Ledger,
    WorkerProcess,
    event_count,
    queue_name,
    tool_activity_count,
    wait_for,
)
from worker.devserver import DevServer

RUNS = 50

# A SIGKILLed worker cannot hand its cached runs back: their next workflow task waits on its
# sticky queue for this long before any worker may take it (Temporal's default is 10 s). A short
# timeout keeps the test quick; production keeps the default unless fast takeover matters more
# than cache hits (README.md (Production)).
STICKY = ["--sticky-queue-timeout", "2"]


def effects(ledger: Path) -> list[tuple[str, int, int]]:
    """(idempotency key, pid of the first attempt, attempts) per recorded shipment."""
    return [(key, json.loads(args)["pid"], n) for key, _, args, n in Ledger(ledger).rows()]


def workflow_task_identities(hist: WorkflowHistory) -> set[str]:
    return {
        e.workflow_task_started_event_attributes.identity
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
    }


async def start_parked(
    client: Client, tq: str, n: int
) -> tuple[WorkflowHandle[Any, RunOutput], str]:
    """Start a run as `temporal workflow start` does, wait until it parks; its call id.

    (The operator path, the same calls `hitl` and the `temporal` CLI make.)
    """
    handle = await client.start_workflow(
        WORKFLOW_TYPE,
        RunInput(agent=shipping_agent.name, input=f"ship order {n}"),
        id=f"{tq}-{n}",
        task_queue=tq,
        result_type=RunOutput,
    )
    status = await handle.execute_update("wait", WaitInput(), result_type=RunStatus)
    [pending] = status.pending
    assert pending.tool_name == "ship_order", status
    return handle, pending.call_id


async def test_fifty_runs_on_two_workers_survive_killing_one(
    dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    tq = queue_name("scale")
    ledger = tmp_path / "ledger.db"
    Ledger(ledger)
    env = {"HITL_TEST_LEDGER": str(ledger), "HITL_TEST_TOOL_SECONDS": "4"}
    workers = {
        name: WorkerProcess(
            dev_server.address, tq, env=env, extra_args=[*STICKY, "--identity", name]
        )
        for name in ("worker-a", "worker-b")
    }
    await asyncio.gather(*(asyncio.to_thread(w.start) for w in workers.values()))
    approvals: asyncio.Future[list[object]] | None = None
    try:
        parked = await asyncio.gather(*(start_parked(dev_client, tq, n) for n in range(RUNS)))
        handles = [h for h, _ in parked]
        approvals = asyncio.gather(
            *(
                h.execute_update("approve", DecisionInput(call_id=call_id), id=f"ok-{h.id}")
                for h, call_id in parked
            )
        )
        # Kill whichever worker records a shipment first, while that shipment still runs (each
        # first attempt lingers after its effect): the worst case for at-most-one-effect. Later
        # approvals of runs it had cached are taken over by the survivor.
        pids = {w.process.pid: name for name, w in workers.items() if w.process}
        await wait_for(lambda: effects(ledger), what="a shipment to start")
        victim = pids[effects(ledger)[0][1]]
        workers[victim].kill()
        survivor = next(w for name, w in workers.items() if name != victim)

        await asyncio.wait_for(approvals, 60)
        outs = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 60)
        assert survivor.process is not None and survivor.process.poll() is None
        survivor.stop()
        assert survivor.process.returncode == 0, "".join(survivor.output)
    finally:
        if approvals is not None and not approvals.done():
            approvals.cancel()  # never leave update calls running when the loop closes
        for w in workers.values():
            w.kill()

    assert [o.final_output for o in outs] == [f"Shipped order {n}" for n in range(RUNS)]
    rows = effects(ledger)
    expected_keys = {f"{h.id}:{call_id}" for h, call_id in parked}
    assert len(rows) == RUNS and {key for key, _, _ in rows} == expected_keys, "one effect each"
    victim_pid = next(p for p, name in pids.items() if name == victim)
    assert any(pid == victim_pid and attempts > 1 for _, pid, attempts in rows), (
        "the kill interrupted a shipment, which another worker retried with the same key"
    )

    histories = await asyncio.gather(*(h.fetch_history() for h in handles))
    assert [tool_activity_count(h) for h in histories] == [1] * RUNS, "scheduled once per run"
    assert sum(event_count(h, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED) for h in histories) == 0
    seen = set().union(*(workflow_task_identities(h) for h in histories))
    assert {"worker-a", "worker-b"} <= seen, f"both workers ran workflow tasks: {seen}"


async def test_sigterm_lets_the_in_flight_tool_finish(
    dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    tq = queue_name("drain")
    ledger = tmp_path / "ledger.db"
    Ledger(ledger)
    env = {"HITL_TEST_LEDGER": str(ledger), "HITL_TEST_TOOL_SECONDS": "3"}
    workers = [
        WorkerProcess(
            dev_server.address,
            tq,
            env=env,
            extra_args=["--graceful-shutdown", "30", "--identity", name],
        )
        for name in ("drain-a", "drain-b")
    ]
    await asyncio.gather(*(asyncio.to_thread(w.start) for w in workers))
    try:
        handle, call_id = await start_parked(dev_client, tq, 7)
        await handle.execute_update("approve", DecisionInput(call_id=call_id))
        await wait_for(lambda: effects(ledger), what="the shipment to start")
        [(_, pid, _)] = effects(ledger)
        busy = next(w for w in workers if w.process and w.process.pid == pid)
        assert busy.process is not None
        os.kill(pid, signal.SIGTERM)  # what `docker stop` sends
        # The worker stays up until its shipment is done, then exits cleanly.
        code = await asyncio.to_thread(busy.process.wait, 30)
        assert code == 0, "".join(busy.output)
        out = await asyncio.wait_for(handle.result(), 30)
    finally:
        for w in workers:
            w.kill()

    assert out.final_output == "Shipped order 7"
    [(_, _, attempts)] = effects(ledger)
    assert attempts == 1, "the tool finished on the stopping worker; nothing was retried"
    hist = await handle.fetch_history()
    [done] = [
        e for e in hist.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    ]
    [started] = [
        e.activity_task_started_event_attributes
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.event_id == done.activity_task_completed_event_attributes.started_event_id
    ]
    assert started.identity == busy.extra_args[-1] and started.attempt == 1
    other = next(w for w in workers if w is not busy).extra_args[-1]
    assert other in workflow_task_identities(hist), "the other worker finished the run"
