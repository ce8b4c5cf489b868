"""The peer's driver (`bench/.peer-venv/bin/python -m bench.peer.driver --address HOST:PORT`).

Plays the user's side with the Temporal client, the same way our driver does: update-with-start
of `wait` returns once the run waits for approval (pending visible); the decision is the
`approve` update, then `handle.result()` returns the final output. Listing pending approvals:
the peer has no approval inbox, so it lists the running `PeerAgentRun`s of the queue and asks
each for its `pending` query (what `hitl pending` does for ours after its visibility query).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import uuid
from typing import Any

from agents import RunConfig
from agents import Runner as SDKRunner
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from bench import proto
from bench.peer.model import ScriptedPeerProvider
from bench.peer.worker import plugin
from bench.peer.workflow import Decision, PeerAgentRun, PeerInput, PeerStatus, make_agent

PROMPT = "Refund order 1001"
client: Client


async def one_run(mode: str, queue: str) -> tuple[float, float, str]:
    """Start -> pending (ms), decision -> completed (ms), workflow id."""
    wid = f"peer-{uuid.uuid4().hex[:12]}"
    op = WithStartWorkflowOperation(
        PeerAgentRun.run,
        PeerInput(PROMPT, tool_mode=mode),
        id=wid,
        task_queue=queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    t0 = proto.now_ms()
    status: PeerStatus = await client.execute_update_with_start_workflow(
        PeerAgentRun.wait, start_workflow_operation=op
    )
    t1 = proto.now_ms()
    if status.phase != "awaiting_approval" or not status.pending:
        raise RuntimeError(f"run {wid} did not pause: {status}")
    handle = await op.workflow_handle()
    t2 = proto.now_ms()
    for call in status.pending:
        await handle.execute_update(PeerAgentRun.approve, Decision(call.call_id, True))
    out = await handle.result()
    t3 = proto.now_ms()
    if not str(out).startswith("Done"):
        raise RuntimeError(f"run {wid} ended with {out!r}")
    return t1 - t0, t3 - t2, wid


async def latency(key: str, n: int, queue: str, api: str = "client") -> dict[str, Any]:
    pending, complete, ids = [], [], []
    for _ in range(n):
        a, b, wid = await one_run(key, queue)
        pending.append(a)
        complete.append(b)
        ids.append(wid)
    return {"start_pending": pending, "decide_complete": complete, "workflow_ids": ids}


async def throughput(
    key: str, n: int, queue: str, api: str = "client", timeout_s: float | None = None
) -> dict[str, Any]:
    return await proto.burst(n, lambda: one_run(key, queue), timeout_s)


async def park(
    key: str,
    n: int,
    queue: str,
    concurrency: int,
    checkpoints: list[int],
    pids: dict[str, int],
    api: str = "client",
) -> dict[str, Any]:
    parked = 0
    samples: list[dict[str, Any]] = []
    wanted = sorted(set(checkpoints))

    async def start(i: int) -> str:
        nonlocal parked
        wid = f"peer-park-{uuid.uuid4().hex[:12]}"
        op = WithStartWorkflowOperation(
            PeerAgentRun.run,
            PeerInput(PROMPT, tool_mode=key),
            id=wid,
            task_queue=queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        status = await client.execute_update_with_start_workflow(
            PeerAgentRun.wait, start_workflow_operation=op
        )
        if status.phase != "awaiting_approval":
            raise RuntimeError(f"run {wid} did not pause")
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
    query = (
        f"WorkflowType = 'PeerAgentRun' AND ExecutionStatus = 'Running' AND TaskQueue = '{queue}'"
    )

    async def count_pending(wid: str) -> int:
        return len(await client.get_workflow_handle(wid).query(PeerAgentRun.pending))

    return await proto.list_and_query(
        client, query, expected, count_pending, pids, checkpoints, query_limit
    )


async def history(workflow_id: str) -> dict[str, Any]:
    return await proto.history_of(client, workflow_id)


async def long_run(key: str, turns: int, queue: str, checkpoints: list[int]) -> dict[str, Any]:
    wid = f"peer-long-{uuid.uuid4().hex[:12]}"
    t0 = proto.now_ms()
    out = await client.execute_workflow(
        PeerAgentRun.run,
        PeerInput(f"turns={turns}", kind="long", max_turns=turns + 2),
        id=wid,
        task_queue=queue,
    )
    wall = (proto.now_ms() - t0) / 1000.0
    hist = await client.get_workflow_handle(wid).fetch_history()
    events = list(hist.events)
    scheduled_tool = {
        e.event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "fetch_chunk"
    }

    def tool_done(e: Any) -> bool:
        return (
            e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
            and e.activity_task_completed_event_attributes.scheduled_event_id in scheduled_tool
        )

    return {
        "wall_s": wall,
        "final_output": str(out),
        "continued_as_new": False,
        "total": proto.history_sizes(events),
        "at_turn": proto.cumulative_bytes_at(events, tool_done, checkpoints),
    }


async def floor(n: int) -> dict[str, Any]:
    """The same flow with the OpenAI Agents SDK alone, in this process: no Temporal at all."""
    agent = make_agent("refund", "inline")
    config = RunConfig(model_provider=ScriptedPeerProvider(), tracing_disabled=True)
    pending, complete = [], []
    for _ in range(n):
        t0 = proto.now_ms()
        result = await SDKRunner.run(agent, PROMPT, run_config=config)
        t1 = proto.now_ms()
        if not result.interruptions:
            raise RuntimeError("the in-process run did not pause")
        state = result.to_state()
        for item in result.interruptions:
            state.approve(item)
        t2 = proto.now_ms()
        done = await SDKRunner.run(agent, state, run_config=config)
        t3 = proto.now_ms()
        if not str(done.final_output).startswith("Done"):
            raise RuntimeError(f"in-process run ended with {done.final_output!r}")
        pending.append(t1 - t0)
        complete.append(t3 - t2)
    return {"start_pending": pending, "decide_complete": complete}


async def warmup(key: str, n: int, queue: str, api: str = "client") -> dict[str, Any]:
    for _ in range(n):
        await one_run(key, queue)
    return {"runs": n}


async def main() -> None:
    global client
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    args = p.parse_args()
    client = await Client.connect(args.address, plugins=[plugin(False, scripted=True)])
    await proto.serve(
        {
            "latency": latency,
            "throughput": throughput,
            "park": park,
            "list_pending": list_pending,
            "history": history,
            "long_run": long_run,
            "long_runs": functools.partial(proto.long_runs, long_run),
            "floor": floor,
            "warmup": warmup,
        }
    )


if __name__ == "__main__":
    asyncio.run(main())
