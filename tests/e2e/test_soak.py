"""Opt-in soak (`make test PYTEST_ARGS="-m soak"`): workers killed at random under load.

RELIABILITY.md #30. Runs are started, parked and approved while two worker processes are
SIGKILLed and restarted at random moments. Afterwards the invariants hold:

- I1: every started run is listable and Completed (none vanished, none still running);
- I2/I3: every approved call has exactly one effect in the ledger, under its own key;
- I5: each run's result says its order was shipped;
- I6: no run is stuck: no run has more than a few failed workflow tasks in a row.

`HITL_SOAK_RUNS` (default 200) and `HITL_SOAK_SEED` tune it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from hitl.wire import (
    DecisionInput,
    DecisionRecord,
    RunOutput,
)
from hitl.worker.devserver import DevServer
from tests.e2e.test_scale_out import STICKY, start_parked
from tests.helpers import Ledger, WorkerProcess, queue_name

# Its runs get 900 s (below), more than the suite's default per-test timeout (pyproject.toml).
pytestmark = [pytest.mark.soak, pytest.mark.timeout(1200)]

RUNS = int(os.environ.get("HITL_SOAK_RUNS", "200"))
SEED = int(os.environ.get("HITL_SOAK_SEED", "7"))


async def _approve(client: Client, wid: str, call_id: str) -> None:
    # A fixed update id: retrying after a worker death is deduplicated by the server.
    handle = client.get_workflow_handle(wid)
    for _ in range(30):
        try:
            await handle.execute_update(
                "approve",
                DecisionInput(call_id=call_id, approver="soak"),
                id=f"approve-{wid}",
                result_type=DecisionRecord,
                rpc_timeout=None,
            )
            return
        except Exception:  # the worker died mid-update: the same id again
            await asyncio.sleep(0.5)
    raise AssertionError(f"could not approve {wid}")


async def test_random_worker_kills_lose_nothing(
    dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    tq = queue_name("soak")
    ledger = tmp_path / "ledger.db"
    Ledger(ledger)
    env = {"HITL_TEST_LEDGER": str(ledger), "HITL_TEST_TOOL_SECONDS": "0.2"}

    def worker(name: str) -> WorkerProcess:
        return WorkerProcess(
            dev_server.address, tq, env=env, extra_args=[*STICKY, "--identity", name]
        )

    workers = [worker("w0").start(), worker("w1").start()]
    stop = asyncio.Event()
    kills = 0

    async def chaos() -> None:
        nonlocal kills
        generation = 2
        while not stop.is_set():
            await asyncio.sleep(rng.uniform(0.5, 2.5))
            if stop.is_set():
                return
            i = rng.randrange(len(workers))
            await asyncio.to_thread(workers[i].kill)
            kills += 1
            workers[i] = await asyncio.to_thread(worker(f"w{generation}").start)
            generation += 1

    chaos_task = asyncio.create_task(chaos())
    try:
        sem = asyncio.Semaphore(20)

        async def one(n: int) -> str:
            async with sem:
                for _ in range(30):
                    try:
                        _, call_id = await start_parked(dev_client, tq, n)
                        break
                    except Exception:  # the wait died with a worker: ask again
                        await asyncio.sleep(0.5)
                else:
                    raise AssertionError(f"run {n} never parked")
                wid = f"{tq}-{n}"
                await _approve(dev_client, wid, call_id)
                handle = dev_client.get_workflow_handle(wid, result_type=RunOutput)
                out = await handle.result()
                return str(out.final_output)

        results = await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(RUNS))), 900)
    finally:
        stop.set()
        await chaos_task
        for w in workers:
            w.stop()

    assert kills > 0, "the soak killed no worker: it proved nothing"
    assert results == [f"Shipped order {n}" for n in range(RUNS)]
    rows = Ledger(ledger).rows("ship_order")
    orders = sorted(json.loads(args)["order_id"] for _, _, args, _ in rows)
    assert orders == list(range(RUNS)), "exactly one effect per approved call"
    listed = [run async for run in dev_client.list_workflows(f"TaskQueue = '{tq}'")]
    assert len(listed) == RUNS
    assert all(run.status == WorkflowExecutionStatus.COMPLETED for run in listed)
    for run in listed[:: max(1, RUNS // 20)]:
        hist = await dev_client.get_workflow_handle(run.id).fetch_history()
        failed = sum(
            1 for e in hist.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        )
        assert failed <= 3, f"{run.id} failed {failed} workflow tasks"
