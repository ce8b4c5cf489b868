"""Scale-out on the real dev server: several worker processes share one task queue.

One worker is SIGKILLed mid-way through 50 runs (the other carries on: every run completes,
every approved call has exactly one effect, and only the calls the dead worker was running are
attempted again), or stopped with SIGTERM: its in-flight tool finishes on it within the grace
period, or is cancelled after it and handed to another worker.

The ship_order tool (tests/agents.py) notes every attempt in the ledger before its effect, with
the process that ran it and how its body ended, so a tool body that ran twice always shows.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.common import WorkflowIDConflictPolicy

from hitl.wire import WORKFLOW_TYPE, DecisionInput, RunInput, RunOutput, RunStatus, WaitInput
from hitl.worker.devserver import DevServer
from tests.agents import shipping_agent
from tests.helpers import (
    Attempt,
    Ledger,
    WorkerProcess,
    event_count,
    queue_name,
    tool_activity_count,
    tool_started,
    wait_for,
)

RUNS = 50

# A SIGKILLed worker cannot hand its cached runs back: their next workflow task waits on its
# sticky queue for this long before any worker may take it (Temporal's default is 10 s). A short
# timeout keeps the test quick; production keeps the default unless fast takeover matters more
# than cache hits (docs/production.md).
STICKY = ["--sticky-queue-timeout", "2"]


def shipments(ledger: Path) -> list[Attempt]:
    return Ledger(ledger).attempts("ship_order")


def effects_by_order(ledger: Path) -> dict[int, list[str]]:
    """Idempotency keys of the recorded shipments (the business rows), per order."""
    out: dict[int, list[str]] = defaultdict(list)
    for key, _, args, _ in Ledger(ledger).rows("ship_order"):
        out[json.loads(args)["order_id"]].append(key)
    return dict(out)


def workflow_task_identities(hist: WorkflowHistory) -> set[str]:
    return {
        e.workflow_task_started_event_attributes.identity
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
    }


def tool_attempt(hist: WorkflowHistory) -> tuple[int, str]:
    """(attempt, worker identity) that completed the run's one execute_tool activity."""
    scheduled, started = tool_started(hist)
    [_] = [
        e
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        and e.activity_task_completed_event_attributes.scheduled_event_id == scheduled
    ]
    return started.attempt, started.identity


async def start_parked(
    client: Client, tq: str, n: int
) -> tuple[WorkflowHandle[Any, RunOutput], str]:
    """Start a run as `temporal workflow start` does, wait until it parks; its call id.

    (The operator path, the same calls `hitl` and the `temporal` CLI make.) Calling it again
    for the same `n` finds the run instead of starting another.
    """
    handle = await client.start_workflow(
        WORKFLOW_TYPE,
        RunInput(agent=shipping_agent.name, input=f"ship order {n}"),
        id=f"{tq}-{n}",
        task_queue=tq,
        result_type=RunOutput,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    status = await handle.execute_update("wait", WaitInput(), result_type=RunStatus)
    [pending] = status.pending
    assert pending.tool_name == "ship_order", status
    return handle, pending.call_id


# Each first attempt lingers this long after its effect; with 4 tool slots per worker the 50
# approved shipments take several rounds, so the kill lands with some done, some running on
# the victim and most still to come.
LINGER = "0.5"
SLOTS = ["--max-concurrent-activities", "4"]
DONE_BEFORE_KILL = 5


async def test_fifty_runs_on_two_workers_survive_killing_one_mid_way(
    dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    tq = queue_name("scale")
    ledger = tmp_path / "ledger.db"
    Ledger(ledger)
    env = {"HITL_TEST_LEDGER": str(ledger), "HITL_TEST_TOOL_SECONDS": LINGER}
    workers = {
        name: WorkerProcess(
            dev_server.address, tq, env=env, extra_args=[*STICKY, *SLOTS, "--identity", name]
        )
        for name in ("worker-a", "worker-b")
    }
    await asyncio.gather(*(asyncio.to_thread(w.start) for w in workers.values()))
    names = {w.process.pid: name for name, w in workers.items() if w.process}
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

        # Kill a worker once both have finished several shipments, at a moment it is running
        # one (effect committed, activity not completed): the worst case for one effect.
        chosen: list[str] = []

        def victim_now() -> bool:
            rows = shipments(ledger)
            done = Counter(a.pid for a in rows if a.outcome == "done")
            running = [a.pid for a in rows if a.outcome is None]
            if running and all(done[pid] >= DONE_BEFORE_KILL for pid in names):
                chosen.append(names[running[-1]])
            return bool(chosen)

        await wait_for(victim_now, timeout=60, what="both workers to ship, one mid-shipment")
        victim_name = chosen[0]
        workers[victim_name].kill()
        [survivor_name] = [name for name in workers if name != victim_name]
        survivor = workers[survivor_name]
        victim_pid = next(pid for pid, name in names.items() if name == victim_name)
        # The victim is dead: what it had started, and which bodies it never finished, is final.
        at_kill = [a for a in shipments(ledger) if a.pid == victim_pid]
        started = {a.key for a in shipments(ledger)}
        assert len(started) < RUNS, "the kill came mid-way: some shipments had not started"

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
    expected = {n: f"{h.id}:{call_id}" for n, (h, call_id) in enumerate(parked)}

    # Effects: exactly one business row per approved call, under the call's idempotency key.
    assert effects_by_order(ledger) == {n: [key] for n, key in expected.items()}

    # Attempts: only the calls the victim had started were attempted again, each exactly once
    # more, on the survivor; the ones it was still running are among them.
    by_key: dict[str, list[Attempt]] = defaultdict(list)
    for a in shipments(ledger):
        by_key[a.key].append(a)
    assert set(by_key) == set(expected.values())
    unfinished = {a.key for a in at_kill if a.outcome is None}
    twice = {key for key, rows in by_key.items() if len(rows) > 1}
    assert unfinished, "the kill landed while the victim was running shipments"
    assert unfinished <= twice <= {a.key for a in at_kill}, {k: by_key[k] for k in twice}
    assert survivor.process is not None
    survivor_pid = survivor.process.pid
    for key, rows in by_key.items():
        if key in twice:
            first, again = rows
            assert (first.pid, first.attempt) == (victim_pid, 1), rows
            assert (again.pid, again.attempt, again.outcome) == (survivor_pid, 2, "done"), rows
        else:
            [once] = rows
            assert once.outcome == "done", rows

    # History: one execute_tool per run, closed by the attempt and worker the ledger saw last;
    # every interrupted call completed on attempt 2 by the survivor.
    histories = await asyncio.gather(*(h.fetch_history() for h in handles))
    assert [tool_activity_count(h) for h in histories] == [1] * RUNS, "scheduled once per run"
    closed = {expected[n]: tool_attempt(hist) for n, hist in enumerate(histories)}
    for key, (attempt, identity) in closed.items():
        last = by_key[key][-1]
        assert (attempt, identity) == (last.attempt, names[last.pid]), (key, by_key[key])
        if attempt > 1:
            assert (attempt, identity) == (2, survivor_name), (key, attempt, identity)
    assert {key for key, (attempt, _) in closed.items() if attempt == 2} >= twice
    assert sum(event_count(h, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED) for h in histories) == 0
    seen = set().union(*(workflow_task_identities(h) for h in histories))
    assert {"worker-a", "worker-b"} <= seen, f"both workers ran workflow tasks: {seen}"


@dataclass
class Stopped:
    """What `sigterm_mid_tool` saw: the run, the worker it stopped and the other one."""

    handle: WorkflowHandle[Any, RunOutput]
    call_id: str
    busy: WorkerProcess
    other: WorkerProcess
    started: Attempt
    out: RunOutput
    stopped_in: float
    """Seconds from SIGTERM until the stopped worker exited (with code 0)."""
    finished_in: float
    """Seconds from SIGTERM until the run completed."""


async def sigterm_mid_tool(
    dev_server: DevServer,
    client: Client,
    ledger: Path,
    *,
    grace: str,
    linger: str,
    order: int,
    names: tuple[str, str],
) -> Stopped:
    """Two workers; approve one shipment; SIGTERM the worker running it (what `docker stop`
    sends) with `grace` seconds of graceful shutdown while the tool lingers `linger` s."""
    tq = queue_name(names[0])
    Ledger(ledger)
    env = {"HITL_TEST_LEDGER": str(ledger), "HITL_TEST_TOOL_SECONDS": linger}
    workers = [
        WorkerProcess(
            dev_server.address,
            tq,
            env=env,
            extra_args=["--graceful-shutdown", grace, "--identity", name],
        )
        for name in names
    ]
    await asyncio.gather(*(asyncio.to_thread(w.start) for w in workers))
    try:
        handle, call_id = await start_parked(client, tq, order)
        await handle.execute_update("approve", DecisionInput(call_id=call_id))
        await wait_for(lambda: shipments(ledger), what="the shipment to start")
        [started] = shipments(ledger)
        busy = next(w for w in workers if w.process and w.process.pid == started.pid)
        other = next(w for w in workers if w is not busy)
        assert busy.process is not None and other.process is not None
        sent = time.monotonic()
        os.kill(started.pid, signal.SIGTERM)
        code = await asyncio.to_thread(busy.process.wait, 30)
        stopped_in = time.monotonic() - sent
        assert code == 0, "".join(busy.output)
        out = await asyncio.wait_for(handle.result(), 30)
        return Stopped(
            handle, call_id, busy, other, started, out, stopped_in, time.monotonic() - sent
        )
    finally:
        for w in workers:
            w.kill()


async def test_sigterm_lets_the_in_flight_tool_finish(
    dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.db"
    # The worker stays up until its 3 s shipment is done, then exits cleanly.
    run = await sigterm_mid_tool(
        dev_server,
        dev_client,
        ledger,
        grace="30",
        linger="3",
        order=7,
        names=("drain-a", "drain-b"),
    )
    handle, call_id = run.handle, run.call_id
    assert run.out.final_output == "Shipped order 7"
    assert shipments(ledger) == [
        Attempt(f"{handle.id}:{call_id}", "ship_order", run.started.pid, 1, "done")
    ], "the tool finished on the stopping worker; nothing was retried"
    assert effects_by_order(ledger) == {7: [f"{handle.id}:{call_id}"]}
    hist = await handle.fetch_history()
    assert tool_attempt(hist) == (1, run.busy.extra_args[-1])
    other = run.other.extra_args[-1]
    assert other in workflow_task_identities(hist), "the other worker finished the run"


async def test_sigterm_past_the_grace_hands_the_tool_to_another_worker(
    dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.db"
    # The first attempt would run 20 s; the stopping worker gives it 1 s.
    run = await sigterm_mid_tool(
        dev_server,
        dev_client,
        ledger,
        grace="1",
        linger="20",
        order=9,
        names=("handover-a", "handover-b"),
    )
    handle, busy, other = run.handle, run.busy, run.other
    assert busy.process is not None and other.process is not None
    assert run.out.final_output == "Shipped order 9"
    key = f"{handle.id}:{run.call_id}"
    assert shipments(ledger) == [
        Attempt(key, "ship_order", busy.process.pid, 1, "cancelled"),
        Attempt(key, "ship_order", other.process.pid, 2, "done"),
    ], "cancelled on the stopping worker after its grace, retried on the other with the same key"
    assert effects_by_order(ledger) == {9: [key]}, "one effect"
    assert run.stopped_in < 10, f"the worker waited {run.stopped_in:.1f}s, not for the 20 s tool"
    assert run.finished_in < 15, f"the run finished {run.finished_in:.1f}s after SIGTERM"
    hist = await handle.fetch_history()
    assert tool_activity_count(hist) == 1
    assert tool_attempt(hist) == (2, other.extra_args[-1])
