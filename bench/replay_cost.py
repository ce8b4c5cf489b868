"""What a new workflow instance costs: `python -m bench.replay_cost [--replays 30]`.

Every start, and every query or decision that reaches a parked run evicted from the worker's
cache, builds a new workflow instance and replays the history into it. This times that, per
runner, on one recorded one-approval history of each side: the sandbox as each side's worker
configures it, variants of it, and no sandbox. Our side runs here; the peer's side runs the same
code in `bench/.peer-venv` (`--side peer` is how this module is invoked there). Not part of
`make bench`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions


async def time_replays(
    label: str,
    make_replayer: Callable[[WorkflowRunner], Replayer],
    runner: WorkflowRunner,
    history_json: str,
    n: int,
) -> dict[str, Any]:
    replayer = make_replayer(runner)
    warm = await replayer.replay_workflow(WorkflowHistory.from_json("warm", history_json))
    assert warm.replay_failure is None

    async def histories() -> AsyncIterator[WorkflowHistory]:
        for i in range(n):
            yield WorkflowHistory.from_json(f"replay-{i}", history_json)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    async with replayer.workflow_replay_iterator(histories()) as results:
        async for r in results:
            if r.replay_failure is not None:
                raise r.replay_failure
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    out = {"runner": label, "cpu_ms": 1000 * cpu / n, "wall_ms": 1000 * wall / n}
    print(f"  {label:58s} CPU {out['cpu_ms']:6.1f} ms/replay, wall {out['wall_ms']:6.1f} ms")
    return out


async def ours(address: str, n: int) -> list[dict[str, Any]]:
    from bench.ours.agents import PROMPT, agent
    from hitl import Runner, connect
    from hitl.client import data_converter
    from hitl.serving import serve_agents
    from hitl.worker.build import PASSTHROUGH, cache_workflow_bytecode
    from hitl.workflows.agent_run import AgentRun

    client = await connect(address=address)
    queue = f"replay-{uuid.uuid4().hex[:6]}"
    async with serve_agents(agent, client=client, task_queue=queue):
        result = await Runner.run(agent, PROMPT, client=client, task_queue=queue, serve=False)
        state = result.to_state()
        for item in result.interruptions:
            state.approve(item)
        await Runner.run(agent, state, client=client, serve=False)
    history = await client.get_workflow_handle(result.workflow_id).fetch_history()
    text = history.to_json()
    print(f"ours: one-approval history, {len(history.events)} events")

    def replayer(runner: WorkflowRunner) -> Replayer:
        return Replayer(
            workflows=[AgentRun], data_converter=data_converter(), workflow_runner=runner
        )

    cache_workflow_bytecode()  # as build_worker does
    default = SandboxRestrictions.default
    runners: list[tuple[str, WorkflowRunner]] = [
        (
            "sandboxed, as worker/build.py configures it",
            SandboxedWorkflowRunner(restrictions=default.with_passthrough_modules(*PASSTHROUGH)),
        ),
        (
            "sandboxed, + `workflows` passed through",
            SandboxedWorkflowRunner(
                restrictions=default.with_passthrough_modules(*PASSTHROUGH, "workflows")
            ),
        ),
        ("unsandboxed", UnsandboxedWorkflowRunner()),
    ]
    return [await time_replays(label, replayer, r, text, n) for label, r in runners]


async def peer(address: str, n: int) -> list[dict[str, Any]]:
    from temporalio.client import Client, WithStartWorkflowOperation
    from temporalio.common import WorkflowIDConflictPolicy
    from temporalio.worker import Worker

    from bench.peer.worker import plugin
    from bench.peer.workflow import ACTIVITIES, Decision, PeerAgentRun, PeerInput

    client = await Client.connect(address, plugins=[plugin(False, scripted=True)])
    queue = f"replay-{uuid.uuid4().hex[:6]}"
    wid = f"peer-replay-{uuid.uuid4().hex[:6]}"
    async with Worker(client, task_queue=queue, workflows=[PeerAgentRun], activities=ACTIVITIES):
        op = WithStartWorkflowOperation(
            PeerAgentRun.run,
            PeerInput("Refund order 1001"),
            id=wid,
            task_queue=queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        status = await client.execute_update_with_start_workflow(
            PeerAgentRun.wait, start_workflow_operation=op
        )
        handle = await op.workflow_handle()
        for call in status.pending:
            await handle.execute_update(PeerAgentRun.approve, Decision(call.call_id))
        await handle.result()
    history = await handle.fetch_history()
    text = history.to_json()
    print(f"peer: one-approval history, {len(history.events)} events")

    def replayer(runner: WorkflowRunner) -> Replayer:
        return Replayer(
            workflows=[PeerAgentRun], plugins=[plugin(False, scripted=True)], workflow_runner=runner
        )

    runners: list[tuple[str, WorkflowRunner]] = [
        ("sandboxed, as OpenAIAgentsPlugin configures it", SandboxedWorkflowRunner()),
        ("unsandboxed", UnsandboxedWorkflowRunner()),
    ]
    return [await time_replays(label, replayer, r, text, n) for label, r in runners]


async def amain(args: argparse.Namespace) -> int:
    if args.side == "peer":
        await peer(args.address, args.replays)
        return 0
    from bench.procs import BENCH, PEER_PYTHON, ROOT, clean_env, ensure_peer_venv
    from hitl.worker.devserver import DevServer

    with DevServer(tuned=True) as server:
        await ours(server.address, args.replays)
        if not args.only_ours:
            ensure_peer_venv(BENCH / "results" / "peer-install.log.tmp")
            cmd = [str(PEER_PYTHON), "-m", "bench.replay_cost", "--side", "peer"]
            cmd += ["--address", server.address, "--replays", str(args.replays)]
            proc = await asyncio.create_subprocess_exec(*cmd, cwd=ROOT, env=clean_env())
            await proc.wait()
    return 0


def main() -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.replay_cost", description=__doc__.splitlines()[0]
    )
    p.add_argument("--replays", type=int, default=30)
    p.add_argument("--side", choices=["ours", "peer"], default="ours", help=argparse.SUPPRESS)
    p.add_argument("--address", help=argparse.SUPPRESS)
    p.add_argument("--only-ours", action="store_true")
    return asyncio.run(amain(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
