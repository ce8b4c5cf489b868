"""What reading one parked, evicted run costs the worker: `python -m bench.read_cost [--runs 40]`.

A worker parks `--runs` one-approval runs (our scripted refund agent), then a fresh worker
(default cache, nothing cached: every run is evicted, as most of a large inbox is) serves the
reads. Each way of reading a run is timed on runs of its own, so each read replays: the
`status` query (what `hitl audit` and a decision's first look ask), `hitl show RUN` (a
subprocess), and the console's call page (`describe` and the `snapshot` query). Then the same
reads again on runs now cached, and reading the run's inbox memo from visibility (what `hitl
pending` and the console's inbox read: no worker at all). Worker CPU is read from /proc around
each batch (the worker is otherwise idle). Not part of `make bench` (about two minutes with
`--runs 80` and the peer).

The peer, on the same dev server and in the same run (unless `--no-peer`): `--runs` of its
one-approval runs parked by its worker with the SDK's default cache (its scripted model
provider, `bench/.peer-venv`), its `pending` query of each, cached (what the issue's target is
measured against), then evicted (a fresh worker).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from bench.procs import PEER_PYTHON, ROOT, Worker, ensure_peer_venv

AGENTS = "bench.ours.agents:agent"


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker(address: str, queue: str) -> subprocess.Popen[str]:
    """`python -m hitl.worker` with its defaults, once it says it is ready."""
    argv = [sys.executable, "-m", "hitl.worker", "--agents", AGENTS, "--address", address]
    argv += ["--task-queue", queue, "--log-level", "WARNING"]
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "worker ready" in line:
            return proc
    raise RuntimeError("worker did not start")


async def park(client: Any, queue: str, n: int) -> dict[str, str]:
    """Park `n` runs, ten at a time; their pending call ids."""
    from temporalio.client import WithStartWorkflowOperation
    from temporalio.common import WorkflowIDConflictPolicy

    from hitl.wire import WORKFLOW_TYPE, RunInput, RunOutput, RunStatus, WaitInput

    ids = [f"{queue}-{k}" for k in range(n)]
    calls: dict[str, str] = {}

    async def one(wid: str) -> None:
        op: WithStartWorkflowOperation[Any, RunOutput] = WithStartWorkflowOperation(
            WORKFLOW_TYPE, RunInput(agent="Bench desk", input="Refund order 1001"), id=wid,
            task_queue=queue, result_type=RunOutput,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )  # fmt: skip
        status: RunStatus = await client.execute_update_with_start_workflow(
            "wait", WaitInput(), start_workflow_operation=op, result_type=RunStatus
        )
        assert status.phase == "awaiting_approval", status
        calls[wid] = status.pending[0].call_id

    for i in range(0, n, 10):
        await asyncio.gather(*(one(w) for w in ids[i : i + 10]))
    return calls


async def timed(
    pid: int, runs: list[str], read: Callable[[str], Awaitable[None]]
) -> dict[str, float]:
    """Worker CPU and wall time per read, reading `runs` one after another."""
    walls = []
    cpu0 = cpu_s(pid)
    for wid in runs:
        t0 = time.perf_counter()
        await read(wid)
        walls.append(1000 * (time.perf_counter() - t0))
    return {
        "worker_cpu_ms": 1000 * (cpu_s(pid) - cpu0) / len(runs),
        "wall_ms_median": statistics.median(walls),
        "runs": len(runs),
    }


def readers(
    client: Any, address: str, queue: str, calls: dict[str, str]
) -> dict[str, Callable[[str], Awaitable[None]]]:
    from hitl.cli.inbox import inbox_memo
    from hitl.console.app import create_app
    from hitl.console.auth import COOKIE, Authenticator
    from hitl.console.data import ConsoleData
    from hitl.console.rules import Rules
    from hitl.wire import QUERY_STATUS, RunStatus

    auth = Authenticator(mode="link", user="ann")
    cookie, _ = auth.sessions.issue("ann")
    data = ConsoleData({client.namespace: client}, task_queues=[queue])
    app = create_app(data, auth, rules=Rules(viewers=frozenset({"ann"})))
    web = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8090",
        cookies={COOKIE: cookie},
    )  # fmt: skip

    async def status(wid: str) -> None:
        got = await client.get_workflow_handle(wid).query(QUERY_STATUS, result_type=RunStatus)
        assert got.pending

    async def show(wid: str) -> None:
        argv = [sys.executable, "-m", "hitl.cli", "--address", address, "--task-queue", queue]
        done = await asyncio.to_thread(
            subprocess.run, [*argv, "show", wid], capture_output=True, text=True, cwd=ROOT
        )
        assert done.returncode == 0, done.stderr

    async def call_page(wid: str) -> None:
        page = await web.get(
            "/call", params={"ns": client.namespace, "run": wid, "call": calls[wid]}
        )
        assert page.status_code == 200 and calls[wid] in page.text, page.text[:300]

    async def memo(wid: str) -> None:
        [w] = [w async for w in client.list_workflows(f"WorkflowId = '{wid}'")]
        got = await inbox_memo(w)
        assert got is not None and got.calls

    return {
        "status query": status,
        "hitl show": show,
        "console call page": call_page,
        "inbox memo (visibility)": memo,
    }


def peer_worker(address: str, queue: str, log: Path) -> Worker:
    """The peer's worker (`bench.peer.worker --scripted`), SDK defaults, once ready."""
    argv = [str(PEER_PYTHON), "-m", "bench.peer.worker", "--address", address]
    argv += ["--task-queue", queue, "--scripted"]
    return Worker("peer", argv, log, env={"OPENAI_AGENTS_DISABLE_TRACING": "1"}).start()


async def peer_reads(client: Any, address: str, n: int, log: Path) -> dict[str, Any]:
    """The peer's `pending` query of its parked runs: cached, then evicted (a fresh worker)."""
    from temporalio.client import WithStartWorkflowOperation
    from temporalio.common import WorkflowIDConflictPolicy

    queue = "read-cost-peer"
    ids = [f"{queue}-{k}" for k in range(n + 1)]  # the last: each worker's first, untimed read

    async def one(wid: str) -> None:
        op: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            "PeerAgentRun", {"prompt": "Refund order 1001", "tool_mode": "activity"}, id=wid,
            task_queue=queue, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )  # fmt: skip
        status = await client.execute_update_with_start_workflow(
            "wait", start_workflow_operation=op
        )
        assert status["phase"] == "awaiting_approval", status

    async def pending(wid: str) -> None:
        assert await client.get_workflow_handle(wid).query("pending")

    w = peer_worker(address, queue, log)
    out: dict[str, Any] = {}
    try:
        for i in range(0, n + 1, 10):
            await asyncio.gather(*(one(wid) for wid in ids[i : i + 10]))
        out["cached"] = await timed(w.pid, ids[: n // 2], pending)
    finally:
        w.stop()
    w = peer_worker(address, queue, log)
    try:
        await pending(ids[n])  # its first replay also imports what its sandbox needs
        out["evicted"] = await timed(w.pid, ids[n // 2 : n], pending)
    finally:
        w.stop()
    return out


def _line(name: str, got: dict[str, Any]) -> str:
    """One way of reading: its worker CPU and wall time, evicted and cached."""
    e, c = got["evicted"], got["cached"]
    return (
        f"  {name:26s} evicted: worker CPU {e['worker_cpu_ms']:5.1f} ms, wall "
        f"{e['wall_ms_median']:6.1f} ms | cached: worker CPU {c['worker_cpu_ms']:5.1f} ms, "
        f"wall {c['wall_ms_median']:6.1f} ms"
    )


def report(k: int, out: dict[str, Any], peer: dict[str, Any] | None) -> None:
    print(f"reading one parked run ({k} runs per way, worker default cache):")
    for name, got in out.items():
        print(_line(name, got))
    if peer is None:
        return
    print(_line("peer `pending` query", peer) + f" ({peer['cached']['runs']} runs each)")
    base = peer["cached"]["worker_cpu_ms"]
    for name, got in out.items():
        if base > 0 and got["evicted"]["worker_cpu_ms"] > 0:
            ratio = got["evicted"]["worker_cpu_ms"] / base
            print(f"  {name} evicted / peer cached: {ratio:.2f}x (target <= 1.0x)")


async def amain(n: int, with_peer: bool) -> int:
    from temporalio.client import Client

    from hitl.client import data_converter
    from hitl.worker.devserver import DevServer

    with tempfile.TemporaryDirectory() as tmp, DevServer(db_filename=Path(tmp) / "db") as server:
        client = await Client.connect(server.address, data_converter=data_converter())
        queue = "read-cost"
        first = worker(server.address, queue)
        try:
            calls = await park(client, queue, n + 1)  # one more: the first, untimed read
        finally:
            first.terminate(), first.wait()
        w = worker(server.address, queue)  # a fresh cache: every parked run is evicted
        try:
            kinds = readers(client, server.address, queue, calls)
            ids = list(calls)
            await kinds["status query"](ids.pop())  # a first replay imports what the sandbox needs
            k = n // len(kinds)
            out: dict[str, Any] = {}
            for i, (name, read) in enumerate(kinds.items()):
                batch = ids[i * k : (i + 1) * k]
                out[name] = {"evicted": await timed(w.pid, batch, read)}
                out[name]["cached"] = await timed(w.pid, batch, read)
        finally:
            w.terminate(), w.wait()
        peer = None
        if with_peer:
            ensure_peer_venv(Path(tmp) / "peer-install.log")  # as `bench.run` does: once
            peer = await peer_reads(client, server.address, n, Path(tmp) / "peer-worker.log")
    report(k, out, peer)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.read_cost", description=__doc__.splitlines()[0]
    )
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--no-peer", action="store_true", help="ours only (no bench/.peer-venv)")
    args = p.parse_args()
    return asyncio.run(amain(args.runs, not args.no_peer))


if __name__ == "__main__":
    sys.exit(main())
