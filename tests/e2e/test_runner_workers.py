"""`Runner.run(serve=False)` tells a busy worker from a missing one (dev server, real worker)."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client

import hitl.connection
import hitl.serving
from hitl import Agent, ModelReply, ModelRequest, Runner, ScriptedModel
from hitl.errors import NoWorkerError
from hitl.worker.build import WorkerOptions, build_worker
from tests.helpers import queue_name


async def slow_script(req: ModelRequest) -> ModelReply:
    # Holds the run's first workflow task (a local activity) for a second: with two task slots,
    # most of the runs below wait for a slot far longer than the grace period.
    await asyncio.sleep(1.0)
    return ModelReply.say(f"done: {req.last_user_text()}")


slow_agent = Agent(
    name="Slow agent",
    instructions="Answer slowly.",
    model=ScriptedModel(slow_script, name="tests.e2e.slow_script"),
)


RUNS = 30


@pytest.mark.timeout(180)  # 22-28 s alone here; over the suite's 60 s beside other tests in CI
async def test_a_busy_worker_is_waited_for(
    dev_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Many more runs than workflow-task slots: the worker stops polling this queue for long
    # stretches (it works through its sticky queue), which must not read as "no worker".
    monkeypatch.setattr(hitl.connection, "WORKER_GRACE_SECONDS", 0.3)
    tq = queue_name("busy")
    worker = build_worker(
        dev_client, [slow_agent], WorkerOptions(task_queue=tq, max_concurrent_workflow_tasks=2)
    )
    async with worker:
        results = await asyncio.gather(
            *(
                Runner.run(slow_agent, f"job {n}", client=dev_client, task_queue=tq, serve=False)
                for n in range(RUNS)
            ),
            return_exceptions=True,
        )
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    assert sorted(r.final_output for r in results if not isinstance(r, BaseException)) == sorted(
        f"done: job {n}" for n in range(RUNS)
    )


async def test_a_missing_worker_is_reported(
    dev_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hitl.connection, "WORKER_GRACE_SECONDS", 0.5)
    tq = queue_name("noworker")
    with pytest.raises(NoWorkerError, match="no worker accepted run"):
        await asyncio.wait_for(
            Runner.run(slow_agent, "job", client=dev_client, task_queue=tq, serve=False),
            timeout=30,
        )


async def test_a_run_not_yet_stored_does_not_read_as_no_worker(
    dev_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under load an update-with-start can time out before its start is stored, and a worker's
    # first polls may not have reached the queue's root partition yet: the run is not found and
    # no poller is listed. That proves nothing; a worker that starts polling now is seen.
    async def no_pollers_listed(client: Client, task_queue: str) -> int:
        return 0

    # The worker starts only once the check has read the queue's pollers (its "before"): an
    # idle worker long-polls, so one already listed then would not be seen to poll again.
    looked = asyncio.Event()
    last_polls = hitl.serving._last_polls

    async def reading_polls(client: Client, task_queue: str) -> dict[str, int]:
        polls = await last_polls(client, task_queue)
        looked.set()
        return polls

    monkeypatch.setattr(hitl.connection, "live_pollers", no_pollers_listed)
    monkeypatch.setattr(hitl.serving, "_last_polls", reading_polls)
    tq = queue_name("unstored")
    conn = hitl.connection.RunnerConnection(dev_client, slow_agent, tq, mode=False)
    check = asyncio.create_task(conn.worker_is_busy("run-never-stored"))
    await asyncio.wait_for(looked.wait(), 30)
    async with build_worker(dev_client, [slow_agent], WorkerOptions(task_queue=tq)):
        assert await check is True
    # And with no worker at all, the same check concludes there is none.
    assert await conn.worker_is_busy("run-never-stored") is False
