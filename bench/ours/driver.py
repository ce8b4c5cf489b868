"""Our driver: `python -m bench.ours.driver --address HOST:PORT` (a `bench.proto` command loop).

It plays the user's side through the public API, as the quickstart's tour does:
`Runner.run(agent, PROMPT, serve=False)` returns once the run is paused (update-with-start of
`wait`, then the `snapshot` query), `result.to_state()` + `state.approve(item)` +
`Runner.run(agent, state)` sends the decision (the `decide` update, which returns once the run
settles) and returns the final output (`handle.result()`). Listing pending approvals does what
`hitl pending` does: a visibility query on `HitlStatus`, then the `status` query of each run.
The runs are served by a separate worker process (`python -m hitl.worker`).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import uuid
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateStage
from temporalio.common import WorkflowIDConflictPolicy

from bench import proto
from bench.ours.agents import BY_KEY, PROMPT
from hitl import WORKFLOW_TYPE, Runner, RunStatus, connect
from hitl.starting import new_workflow_id
from hitl.wire import DecisionInput, RunInput, RunOutput, WaitInput

client: Client


async def one_run(key: str, queue: str, api: str = "runner") -> tuple[float, float, str]:
    """Start -> pending (ms), decision -> completed (ms), workflow id."""
    if api == "client":
        return await one_run_client(key, queue)
    if api == "raw":
        return await one_raw_steps(queue)
    agent = BY_KEY[key]
    t0 = proto.now_ms()
    result = await Runner.run(agent, PROMPT, client=client, task_queue=queue, serve=False)
    t1 = proto.now_ms()
    if not result.interruptions:
        raise RuntimeError(f"run {result.workflow_id} did not pause: {result.final_output!r}")
    state = result.to_state()
    for item in result.interruptions:
        state.approve(item)
    t2 = proto.now_ms()
    done = await Runner.run(agent, state, client=client, serve=False)
    t3 = proto.now_ms()
    if not str(done.final_output).startswith("Done"):
        raise RuntimeError(f"run {result.workflow_id} ended with {done.final_output!r}")
    return t1 - t0, t3 - t2, result.workflow_id


async def start_client(key: str, queue: str) -> tuple[RunStatus, str]:
    """The operator path: update-with-start of `wait` (what `Runner.run` sends, minus its
    no-worker timeout, `hitl.connection.WORKER_GRACE_SECONDS`, and the `snapshot` query that
    follows)."""
    wid = new_workflow_id(BY_KEY[key].name)
    op = WithStartWorkflowOperation(
        WORKFLOW_TYPE,
        RunInput(agent=BY_KEY[key].name, input=PROMPT),
        id=wid,
        task_queue=queue,
        result_type=RunOutput,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    status: RunStatus = await client.execute_update_with_start_workflow(
        "wait", WaitInput(), start_workflow_operation=op, result_type=RunStatus
    )
    if status.phase != "awaiting_approval" or not status.pending:
        raise RuntimeError(f"run {wid} did not pause: {status.phase}")
    return status, wid


async def one_run_client(key: str, queue: str) -> tuple[float, float, str]:
    """The operator path end to end: `wait` update-with-start, `approve` update (as
    `hitl approve` and `temporal workflow update execute --name approve` send it), result."""
    t0 = proto.now_ms()
    status, wid = await start_client(key, queue)
    t1 = proto.now_ms()
    handle = client.get_workflow_handle(wid, result_type=RunOutput)
    t2 = proto.now_ms()
    for call in status.pending:
        await handle.execute_update(
            "approve",
            DecisionInput(call_id=call.call_id, approver="bench"),
            id=f"approve-{wid}-{call.call_id}",
        )
    out: RunOutput = await handle.result()
    t3 = proto.now_ms()
    if not str(out.final_output).startswith("Done"):
        raise RuntimeError(f"run {wid} ended with {out.final_output!r}")
    return t1 - t0, t3 - t2, wid


async def latency(key: str, n: int, queue: str, api: str = "runner") -> dict[str, Any]:
    pending, complete, ids = [], [], []
    for _ in range(n):
        a, b, wid = await one_run(key, queue, api)
        pending.append(a)
        complete.append(b)
        ids.append(wid)
    return {"start_pending": pending, "decide_complete": complete, "workflow_ids": ids}


async def throughput(
    key: str, n: int, queue: str, api: str = "runner", timeout_s: float | None = None
) -> dict[str, Any]:
    return await proto.burst(n, lambda: one_run(key, queue, api), timeout_s)


async def park(
    key: str,
    n: int,
    queue: str,
    concurrency: int,
    checkpoints: list[int],
    pids: dict[str, int],
    api: str = "client",
) -> dict[str, Any]:
    """Start `n` runs and return once all of them wait for approval (none is decided)."""
    agent = BY_KEY[key]
    parked = 0
    samples: list[dict[str, Any]] = []
    wanted = sorted(set(checkpoints))

    async def start(i: int) -> str:
        nonlocal parked
        if api == "client":
            _, wid = await start_client(key, queue)
        else:
            result = await Runner.run(agent, PROMPT, client=client, task_queue=queue, serve=False)
            if not result.interruptions:
                raise RuntimeError(f"run {result.workflow_id} did not pause")
            wid = result.workflow_id
        parked += 1
        while wanted and parked >= wanted[0]:
            samples.append({"parked": wanted.pop(0), "procs": proto.snapshot(pids)})
        return wid

    t0 = proto.now_ms()
    await proto.bounded_gather(n, concurrency, start)
    wall = (proto.now_ms() - t0) / 1000.0
    return {"wall_s": wall, "starts_per_s": n / wall, "samples": samples}


async def list_pending(
    queue: str,
    expected: int,
    pids: dict[str, int] | None = None,
    checkpoints: list[int] | None = None,
    query_limit: int | None = None,
) -> dict[str, Any]:
    """What `hitl pending` does, timed: visibility query, then the status of each run."""
    query = (
        "HitlStatus = 'awaiting_approval' AND ExecutionStatus = 'Running' "
        f"AND TaskQueue = '{queue}'"
    )

    async def count_pending(wid: str) -> int:
        st = await client.get_workflow_handle(wid).query("status", result_type=RunStatus)
        return len(st.pending)

    return await proto.list_and_query(
        client, query, expected, count_pending, pids, checkpoints, query_limit
    )


async def history(workflow_id: str) -> dict[str, Any]:
    return await proto.history_of(client, workflow_id)


async def long_run(key: str, turns: int, queue: str, checkpoints: list[int]) -> dict[str, Any]:
    """One run of `turns` tool calls with 5 KB outputs; history bytes after each checkpoint."""
    agent = BY_KEY[key]
    t0 = proto.now_ms()
    result = await Runner.run(
        agent, f"turns={turns}", client=client, task_queue=queue, serve=False, max_turns=turns + 2
    )
    wall = (proto.now_ms() - t0) / 1000.0
    handle = client.get_workflow_handle(result.workflow_id)
    hist = await handle.fetch_history()
    events = list(hist.events)
    started = events[0].workflow_execution_started_event_attributes
    scheduled_tool = {
        e.event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "execute_tool"
    }

    def tool_done(e: Any) -> bool:
        return (
            e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
            and e.activity_task_completed_event_attributes.scheduled_event_id in scheduled_tool
        )

    return {
        "wall_s": wall,
        "final_output": str(result.final_output),
        "continued_as_new": bool(started.continued_execution_run_id),
        "total": proto.history_sizes(events),
        "at_turn": proto.cumulative_bytes_at(events, tool_done, checkpoints),
    }


async def raw(n: int, queue: str) -> dict[str, Any]:
    """The floor: a bare update round trip and a bare update-with-start, same server."""
    wid = f"raw-{uuid.uuid4().hex[:10]}"
    handle = await client.start_workflow("BenchRaw", id=wid, task_queue=queue)
    await handle.execute_update("ping", result_type=str)  # warm: first task done
    update_ms = []
    for _ in range(n):
        t0 = proto.now_ms()
        await handle.execute_update("ping", result_type=str)
        update_ms.append(proto.now_ms() - t0)
    await handle.execute_update("stop")
    uws_ms = []
    for _ in range(n):
        op = WithStartWorkflowOperation(
            "BenchRaw",
            id=f"raw-{uuid.uuid4().hex[:10]}",
            task_queue=queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        )
        t0 = proto.now_ms()
        await client.execute_update_with_start_workflow(
            "ping", start_workflow_operation=op, result_type=str
        )
        uws_ms.append(proto.now_ms() - t0)
        h = await op.workflow_handle()
        await h.start_update("stop", wait_for_stage=WorkflowUpdateStage.ACCEPTED)
    return {"update_ms": update_ms, "update_with_start_ms": uws_ms}


async def one_raw_steps(queue: str, local_tool: bool = False) -> tuple[float, float, str]:
    """One run of `bench.raw.BenchRawSteps`, timed like a run of the job."""
    op = WithStartWorkflowOperation(
        "BenchRawSteps",
        local_tool,
        id=f"raw-steps-{uuid.uuid4().hex[:10]}",
        task_queue=queue,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
    )
    t0 = proto.now_ms()
    await client.execute_update_with_start_workflow(
        "wait", start_workflow_operation=op, result_type=bool
    )
    t1 = proto.now_ms()
    h = await op.workflow_handle()
    t2 = proto.now_ms()
    await h.execute_update("approve")
    await h.result()
    t3 = proto.now_ms()
    return t1 - t0, t3 - t2, h.id


async def raw_steps(n: int, queue: str, local_tool: bool = False) -> dict[str, Any]:
    """The floor of the one-approval run's steps (`bench.raw.BenchRawSteps`), timed like a run."""
    pending, complete, wid = [], [], ""
    for i in range(n + 2):  # the first two warm the worker and are not counted
        a, b, wid = await one_raw_steps(queue, local_tool)
        if i >= 2:
            pending.append(a)
            complete.append(b)
    hist = await proto.history_of(client, wid)
    return {"start_pending": pending, "decide_complete": complete, "history": hist}


async def warmup(key: str, n: int, queue: str, api: str = "runner") -> dict[str, Any]:
    for _ in range(n):
        await one_run(key, queue, api)
    return {"runs": n}


async def main() -> None:
    global client
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    args = p.parse_args()
    client = await connect(address=args.address)
    await proto.serve(
        {
            "latency": latency,
            "throughput": throughput,
            "park": park,
            "list_pending": list_pending,
            "history": history,
            "long_run": long_run,
            "long_runs": functools.partial(proto.long_runs, long_run),
            "raw": raw,
            "raw_steps": raw_steps,
            "warmup": warmup,
        }
    )


if __name__ == "__main__":
    asyncio.run(main())
