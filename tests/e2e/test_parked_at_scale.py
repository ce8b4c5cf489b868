"""Opt-in scale soak (`-m soak`): N parked runs on one dev server (issue 31).

`HITL_SCALE_RUNS` runs (default 100,000) are started on their own dev server (SQLite file) and
park on one approval each, served by one worker with its default cache. Then, with no worker
running: the console's inbox (first page, a search) and `hitl pending` over every run, and a
visibility listing of every run (what `hitl audit` lists before it asks each run). With a
worker again: 1,000 runs chosen at random are approved at once, and the ledger proves that
each decided call's tool ran exactly once and no other tool ran. A sample `hitl audit` (which
asks each run for its status) gives its cost per run.

Parking 100,000 runs takes hours on a small machine, so it can be done in parts:
`HITL_SCALE_DIR` keeps the server's SQLite file, the ledger and `progress.json` in a directory
of its own (kept between invocations), and `HITL_SCALE_PARK_MINUTES` bounds the parking of one
invocation: when it runs out, the runs parked so far are recorded and the test is skipped,
saying how many; the next invocation with the same directory parks the rest (the runs'
ids are their numbers: a run whose start was cut off is asked again, `USE_EXISTING`), then
measures. Each part's rate, CPU and load are in the report.

It measures; correctness is asserted, times are not. Figures go to
`bench/results/soak-parked-N.{json,md}` and the test prints them (`-s`). The shipping agent's
scripted model is a local activity, so a run parks in one workflow task: the fastest honest
way to park (the operator path's start, the worker's real code).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import random
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy

from hitl.client import data_converter
from hitl.console.app import PAGE_SIZE, create_app
from hitl.console.auth import COOKIE, Authenticator
from hitl.console.data import ConsoleData
from hitl.console.rules import Rules
from hitl.wire import WORKFLOW_TYPE, DecisionInput, RunInput, RunOutput, RunStatus, WaitInput
from hitl.worker.devserver import DevServer, temporal_binary
from tests.agents import shipping_agent
from tests.helpers import ROOT, Ledger, WorkerProcess, hitl_cli, queue_name, wait_for

pytestmark = [pytest.mark.soak, pytest.mark.timeout(4 * 3600)]

RUNS = int(os.environ.get("HITL_SCALE_RUNS", "100000"))
DECIDE = int(os.environ.get("HITL_SCALE_DECIDE", "1000"))
AUDIT_SAMPLE = 1000
"""Runs `hitl audit` asks for their status (each one an evicted run's replay)."""
STARTS_AT_ONCE = 32
DECISIONS_AT_ONCE = 20
SCALE_DIR = os.environ.get("HITL_SCALE_DIR")
"""A directory kept between invocations (the server's database, the ledger, the progress)."""
PARK_MINUTES = float(os.environ.get("HITL_SCALE_PARK_MINUTES", "0"))
"""Minutes one invocation spends parking (0: until all are parked)."""
RESULTS = ROOT / "bench" / "results"


# ----------------------------------------------------------------------------- measuring


def rss_mb(pid: int) -> float:
    """Resident memory of a process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sqlite_bytes(path: Path) -> tuple[int, int]:
    """(bytes in use: pages minus free pages, WAL included; the files' size on disk)."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)) as db:
        page = db.execute("PRAGMA page_size").fetchone()[0]
        used = db.execute("PRAGMA page_count").fetchone()[0]
        used -= db.execute("PRAGMA freelist_count").fetchone()[0]
    on_disk = sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())
    return used * page, on_disk


def machine() -> dict[str, Any]:
    """Cores, memory, CPU model, load and the dev server's version."""
    meminfo = Path("/proc/meminfo").read_text().split("\n", 1)[0]
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "",
    )
    version = subprocess.run([temporal_binary(), "--version"], capture_output=True, text=True)
    return {
        "cores": os.cpu_count(),
        "memory_gb": round(int(meminfo.split()[1]) / 2**20, 1),
        "cpu": cpu,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "temporal": version.stdout.strip(),
        "load_average_at_start": os.getloadavg(),
    }


def timed_cli(address: str, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    out = hitl_cli(address, *args, timeout=3600)
    return out, time.monotonic() - began


# ----------------------------------------------------------------------------- parking


async def park(
    client: Client,
    tq: str,
    runs: range,
    worker: WorkerProcess,
    server: DevServer,
    deadline: float | None = None,
    saved: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Park `runs` (their numbers), `STARTS_AT_ONCE` at a time, until `deadline` (monotonic
    seconds) if any: the part's rate, with worker RSS and the CPU of both processes along the
    way. `to` is the first number not parked (every run below it is); `saved(k)` is told,
    every 15 s, a number below which every run has parked (an invocation cut off resumes
    there)."""
    assert worker.process is not None and server.pid is not None
    wpid, spid = worker.process.pid, server.pid
    numbers = iter(runs)
    taken: list[int] = []
    flying: set[int] = set()
    curve: list[dict[str, float]] = []
    cpu0 = {"worker": cpu_s(wpid), "server": cpu_s(spid)}
    began = time.monotonic()

    async def starter() -> None:
        # Closed loop: each starter waits for its run to park before the next start (`wait`
        # with the start, as `Runner.run` sends it). Fire-and-forget starts outrun the server:
        # at 20,000 they piled up 6,000 unstarted workflow tasks and parking fell to 1 run/s.
        while deadline is None or time.monotonic() < deadline:
            k = next(numbers, None)
            if k is None:
                return
            taken.append(k)
            flying.add(k)
            status = await park_one(client, tq, k)
            assert status.phase == "awaiting_approval" and len(status.pending) == 1, status
            flying.discard(k)

    async def parked() -> int:
        return (await client.count_workflows(f'TaskQueue="{tq}" AND {AWAITING}')).count

    async def sampler(done: asyncio.Event) -> None:
        while not done.is_set():
            got = await parked()
            curve.append(
                {"s": time.monotonic() - began, "parked": got, "worker_rss_mb": rss_mb(wpid)}
            )
            print(f"  parked {got:,}/{runs.stop:,} at {curve[-1]['s']:.0f}s", flush=True)
            if saved is not None and taken:
                saved(min(flying) if flying else max(taken) + 1)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), 15)

    done = asyncio.Event()
    sampling = asyncio.create_task(sampler(done))
    await asyncio.gather(*(starter() for _ in range(STARTS_AT_ONCE)))
    started = time.monotonic() - began
    # Every start taken was awaited until its run parked: all below the next number are.
    to = max(taken, default=runs.start - 1) + 1
    await wait_for(lambda: counted(parked, to), timeout=3600, what=f"{to} parked runs")
    took = time.monotonic() - began
    done.set()
    await sampling
    n = to - runs.start
    return {
        "from": runs.start,
        "to": to,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": os.getloadavg(),
        "starts_s": started,
        "parked_s": took,
        "parked_per_s": n / took,
        "worker_cpu_s": cpu_s(wpid) - cpu0["worker"],
        "server_cpu_s": cpu_s(spid) - cpu0["server"],
        "worker_cpu_ms_per_run": 1000 * (cpu_s(wpid) - cpu0["worker"]) / max(n, 1),
        "server_cpu_ms_per_run": 1000 * (cpu_s(spid) - cpu0["server"]) / max(n, 1),
        "worker_rss_mb_final": rss_mb(wpid),
        "curve": curve,
    }


def parts_total(parts: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """The parking of every part, as one: rate and CPU per run over the parts' own runs and
    time (an invocation cut off before it recorded its part is in neither)."""
    took = sum(p["parked_s"] for p in parts)
    timed = sum(p["to"] - p["from"] for p in parts)
    return {
        "parts": len(parts),
        "runs_timed": timed,
        "parked_s": took,
        "parked_per_s": timed / took,
        "worker_cpu_ms_per_run": 1000 * sum(p["worker_cpu_s"] for p in parts) / timed,
        "server_cpu_ms_per_run": 1000 * sum(p["server_cpu_s"] for p in parts) / timed,
        "worker_rss_mb_final": parts[-1]["worker_rss_mb_final"],
        "by_part": [{k: v for k, v in p.items() if k != "curve"} for p in parts],
        "curve": parts[-1]["curve"],
    }


async def park_one(client: Client, tq: str, k: int) -> RunStatus:
    """Start run `k` with a `wait` update (as `Runner.run` does); asked again (the same run:
    `USE_EXISTING`) when a loaded server lets the request go before the run parked."""
    for _ in range(10):
        op: WithStartWorkflowOperation[Any, RunOutput] = WithStartWorkflowOperation(
            WORKFLOW_TYPE,
            RunInput(agent=shipping_agent.name, input=f"ship order {k}"),
            id=f"{tq}-{k}",
            task_queue=tq,
            result_type=RunOutput,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        try:
            status: RunStatus = await client.execute_update_with_start_workflow(
                "wait", WaitInput(), start_workflow_operation=op, result_type=RunStatus
            )
            return status
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            continue
    raise AssertionError(f"run {k} did not park after 10 tries")


AWAITING = "HitlStatus='awaiting_approval' AND ExecutionStatus='Running'"


async def counted(count: Any, expected: int) -> bool:
    return bool(await count() >= expected)


# ----------------------------------------------------------------------------- reading


async def quiet() -> None:
    """Wait for the work a console left in the background (the counts it did not wait for,
    the settled views' reading): each console is measured on a server no other one keeps busy."""
    me = asyncio.current_task()
    if others := [t for t in asyncio.all_tasks() if t is not me]:
        await asyncio.wait(others, timeout=60)


async def console_pages(client: Client, tq: str, n: int, limit: int = 5000) -> dict[str, Any]:
    """The console's inbox against the server (no worker), reading at most `limit` runs: its
    reading of Temporal alone, then the first page, a search for a run it read, a search for
    the oldest run (past the reading when it was cut: the server's search) and the filter for
    calls waiting over an hour, each by a console that has read nothing yet (the worst case: a
    reading nobody made in the last 30 s), and the search for the oldest from a reading."""
    auth = Authenticator(mode="link", user="ann")
    cookie, _ = auth.sessions.issue("ann")

    def console() -> tuple[ConsoleData, httpx.AsyncClient]:
        data = ConsoleData({client.namespace: client}, task_queues=[tq], limit=limit)
        app = create_app(data, auth, rules=Rules(viewers=frozenset({"ann"})))
        web = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://127.0.0.1:8090",
            cookies={COOKIE: cookie},
        )
        return data, web

    data, web = console()
    began = time.perf_counter()
    inbox = await data.inbox()
    out: dict[str, Any] = {
        "console_read_limit": data.limit,
        "console_rows_read": len(inbox.rows),
        "inbox reading (s)": time.perf_counter() - began,
        "waiting (counted)": inbox.counted(),
    }
    # Search for one of the runs it read, and for the oldest (run 0: read only when all were).
    target = random.Random(1).choice(inbox.rows).workflow_id
    pages = {
        "first page": "/",
        "search (one run)": f"/?q={target}",
        "search (the oldest run)": f"/?q={tq}-0",
        "filter (waiting over 1 h)": "/?age=1h",
        "filter (one tool)": "/?tool=ship_order",
    }
    for what, path in pages.items():
        await quiet()
        async with console()[1] as fresh:
            began = time.perf_counter()
            page = await fresh.get(path)
            out[f"{what} (s)"] = time.perf_counter() - began
        assert page.status_code == 200, page.text[:500]
        out[f"{what}: rows shown"] = page.text.count("<tr data-call=")
    await quiet()
    async with web:  # its reading is a few seconds old: served as it is
        for what, path in {
            "search (the oldest run)": f"/?q={tq}-0&sort=newest",
            "filter (one tool)": "/?tool=ship_order&sort=newest",
        }.items():
            began = time.perf_counter()
            page = await web.get(path)
            out[f"{what}, from a reading (s)"] = time.perf_counter() - began
    assert out["console_rows_read"] == min(n, data.limit)
    assert out["first page: rows shown"] == min(n, PAGE_SIZE, data.limit)
    assert out["search (one run): rows shown"] == 1
    assert out["search (the oldest run): rows shown"] == 1
    if n > data.limit:  # cut: counted, unless the count took over 2 s
        assert out["waiting (counted)"] in (None, n), out["waiting (counted)"]
    return out


async def listings(client: Client, address: str, tq: str, n: int) -> dict[str, Any]:
    """With no worker: `hitl pending` over every run, and every run listed as an audit export
    lists them (visibility only, no per-run query)."""
    out, took = timed_cli(address, "--task-queue", tq, "pending", "--json", "--limit", str(n))
    assert out.returncode == 0 and not out.stderr, out.stderr[-2000:]
    rows = json.loads(out.stdout)
    calls = {r["workflow_id"]: r["call_id"] for r in rows}
    assert len(calls) == n and all(r.get("confirmed", True) for r in rows)
    began = time.monotonic()
    query = f"WorkflowType = '{WORKFLOW_TYPE}' AND TaskQueue = '{tq}'"
    listed = [w.id async for w in client.list_workflows(query)]
    audit_list_s = time.monotonic() - began
    assert sorted(listed) == sorted(calls)
    return {
        "calls": calls,
        "hitl_pending_all_s": took,
        "hitl_pending_rows": len(rows),
        "visibility_list_all_s": audit_list_s,
        "visibility_list_runs_per_s": n / audit_list_s,
    }


# ----------------------------------------------------------------------------- deciding


async def decide(
    client: Client, calls: dict[str, str], chosen: list[str], worker: WorkerProcess
) -> dict[str, Any]:
    """Approve `chosen` (`DECISIONS_AT_ONCE` at a time) and wait for each run's result."""
    assert worker.process is not None
    queue = iter(chosen)
    outputs: dict[str, str] = {}
    answered: list[float] = []
    began = time.monotonic()

    async def decider() -> None:
        for wid in queue:
            handle = client.get_workflow_handle(wid, result_type=RunOutput)
            await handle.execute_update("approve", DecisionInput(call_id=calls[wid]))
            answered.append(time.monotonic() - began)
            outputs[wid] = (await handle.result()).final_output or ""

    cpu0 = cpu_s(worker.process.pid)
    await asyncio.gather(*(decider() for _ in range(DECISIONS_AT_ONCE)))
    took = time.monotonic() - began
    assert outputs == {w: f"Shipped order {w.rsplit('-', 1)[1]}" for w in chosen}
    return {
        "decided": len(chosen),
        "decisions_answered_s": max(answered),
        "all_completed_s": took,
        "completed_per_s": len(chosen) / took,
        "worker_cpu_ms_per_decision": 1000 * (cpu_s(worker.process.pid) - cpu0) / len(chosen),
        "worker_rss_mb_after": rss_mb(worker.process.pid),
    }


def check_effects(ledger: Path, chosen: list[str]) -> dict[str, Any]:
    """Every decided call's effect happened exactly once, no other call's tool ran at all, and
    no call was scheduled twice (a second body of one call is a retry: attempt 2 or later)."""
    attempts = Ledger(ledger).attempts("ship_order")
    effects = Counter(key.split(":", 1)[0] for key, _, _, _ in Ledger(ledger).rows("ship_order"))
    # The idempotency key is `workflow_id:call_id`: one key per decided call.
    by_run: dict[str, list[int]] = {}
    for a in attempts:
        by_run.setdefault(a.key.split(":", 1)[0], []).append(a.attempt)
    assert set(by_run) == set(effects) == set(chosen), "a tool ran for a run nobody decided"
    assert all(v == 1 for v in effects.values()), "an effect twice"
    # A retry's attempt may be lost before the body runs (attempts 1 and 3): no call may have
    # two bodies of one attempt, nor two first attempts.
    assert all(len(set(v)) == len(v) and v.count(1) == 1 for v in by_run.values()), by_run
    retried = sorted(k for k, v in by_run.items() if len(v) > 1)
    return {"tool_attempts": len(attempts), "effects": sum(effects.values()), "retried": retried}


async def why_retried(client: Client, runs: list[str]) -> list[str]:
    """What ended the first attempt of a retried tool call (its retry's `last_failure`)."""
    why = []
    for wid in runs[:5]:
        history = await client.get_workflow_handle(wid).fetch_history()
        for e in history.events:
            if e.HasField("activity_task_started_event_attributes"):
                started = e.activity_task_started_event_attributes
                if started.attempt > 1:
                    why.append(f"{wid}: attempt {started.attempt}, {started.last_failure.message}")
    return why


# ----------------------------------------------------------------------------- the test


class Progress:
    """What earlier invocations parked, kept in `progress.json` of the soak's directory."""

    def __init__(self, home: Path, n: int) -> None:
        self.path = home / "progress.json"
        self.data: dict[str, Any] = (
            json.loads(self.path.read_text()) if self.path.exists() else {"runs": n}
        )
        if self.data["runs"] != n:
            raise AssertionError(
                f"{home} holds a soak of {self.data['runs']:,} runs, not {n:,}: "
                "use another HITL_SCALE_DIR or the same HITL_SCALE_RUNS"
            )
        if self.data.get("deciding"):
            raise AssertionError(
                f"{home}: an earlier invocation began deciding its runs; "
                "start again in a fresh HITL_SCALE_DIR"
            )

    def save(self) -> None:
        self.path.write_text(json.dumps(self.data, indent=1, default=str) + "\n")


async def test_parked_runs_at_scale(tmp_path: Path) -> None:
    n = RUNS
    report: dict[str, Any] = {"runs": n, "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}
    report["machine"] = machine()
    home = Path(SCALE_DIR) if SCALE_DIR else tmp_path
    home.mkdir(parents=True, exist_ok=True)
    progress = Progress(home, n)
    db = home / "scale.db"
    server = DevServer(db_filename=db, log_file=home / "server.log").start()
    try:
        client = await Client.connect(server.address, data_converter=data_converter())
        await _soak(client, server, db, home, progress, report)
    finally:
        server.stop()
    report["machine"]["load_average_at_end"] = os.getloadavg()
    write_report(report)


async def _soak(
    client: Client,
    server: DevServer,
    db: Path,
    home: Path,
    progress: Progress,
    report: dict[str, Any],
) -> None:
    n, state = report["runs"], progress.data
    if "task_queue" not in state:
        state |= {"task_queue": queue_name("scale"), "next": 0, "parts": []}
        state["storage0"] = sqlite_bytes(db)
        progress.save()
    tq, ledger = state["task_queue"], home / "ledger.db"
    Ledger(ledger)
    env = {"HITL_TEST_LEDGER": str(ledger)}
    if state["next"] < n:
        # Unfinished starts of a part cut off are asked again: the same runs (`USE_EXISTING`).
        resume = max(0, state.get("saved", 0), state["next"] - STARTS_AT_ONCE)

        def saved(k: int) -> None:
            state["saved"] = k
            progress.save()

        deadline = time.monotonic() + 60 * PARK_MINUTES if PARK_MINUTES else None
        with WorkerProcess(server.address, tq, env=env) as worker:
            assert worker.process is not None
            state.setdefault("worker_rss_mb_idle", rss_mb(worker.process.pid))
            part = await park(client, tq, range(resume, n), worker, server, deadline, saved)
        state["next"] = part["to"]
        state["parts"].append(part)
        progress.save()
        if state["next"] < n:
            pytest.skip(
                f"parked {state['next']:,} of {n:,} runs in {len(state['parts'])} part(s) "
                f"(HITL_SCALE_PARK_MINUTES={PARK_MINUTES:g}); run again with "
                f"HITL_SCALE_DIR={home} to go on"
            )
    report["worker_rss_mb_idle"] = state["worker_rss_mb_idle"]
    report["parking"] = parts_total(state["parts"], n)
    storage0, storage1 = state["storage0"], sqlite_bytes(db)
    report["storage"] = {
        "used_bytes_per_run": (storage1[0] - storage0[0]) / n,
        "file_bytes_per_run": (storage1[1] - storage0[1]) / n,
        "file_mb_total": storage1[1] / 2**20,
    }
    print(json.dumps(report, indent=1, default=str), flush=True)
    report["console"] = await console_pages(client, tq, n)
    if n > 1000:
        report["console_1000"] = await console_pages(client, tq, n, limit=1000)
    got = await listings(client, server.address, tq, n)
    calls = got.pop("calls")
    report["listing"] = got
    print(json.dumps(report["console"] | got, indent=1), flush=True)
    chosen = random.Random(n).sample(sorted(calls), min(DECIDE, n))
    state["deciding"] = True
    progress.save()
    with WorkerProcess(server.address, tq, env=env) as worker:
        report["deciding"] = await decide(client, calls, chosen, worker)
        out, took = timed_cli(
            server.address, "--task-queue", tq, "audit", "--limit", str(AUDIT_SAMPLE)
        )
        assert out.returncode == 0, out.stderr[-2000:]
        report["audit_sample"] = {
            "runs": min(n, AUDIT_SAMPLE),
            "s": took,
            "rows": out.stdout.count("\n"),
        }
    report["deciding"] |= check_effects(ledger, chosen)
    report["deciding"]["why_retried"] = await why_retried(client, report["deciding"]["retried"])
    still = (await client.count_workflows(f'TaskQueue="{tq}" AND {AWAITING}')).count
    assert still == n - len(chosen), still
    report["still_parked"] = still


# ----------------------------------------------------------------------------- the report


def write_report(report: dict[str, Any]) -> None:
    stem = RESULTS / f"soak-parked-{report['runs']}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    stem.with_suffix(".md").write_text(markdown(report))
    print(markdown(report), flush=True)


def console_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """The console's figures added with its searches past a cut reading (absent before)."""
    rows = []
    for c in (r["console"], r.get("console_1000")):
        if not c or "search (the oldest run) (s)" not in c:
            continue
        read = f"reading at most {c['console_read_limit']:,} runs"
        rows += [
            (f"console, {read}: its reading alone", f"{c['inbox reading (s)']:.2f} s"),
            (f"console, {read}: first page, nothing read yet", f"{c['first page (s)']:.2f} s"),
            (
                f"console, {read}: search for the oldest run (past any cut), nothing read yet",
                f"{c['search (the oldest run) (s)']:.2f} s",
            ),
            (
                f"console, {read}: the same search from a reading",
                f"{c['search (the oldest run), from a reading (s)']:.2f} s",
            ),
            (
                f"console, {read}: filter waiting over 1 h, nothing read yet",
                f"{c['filter (waiting over 1 h) (s)']:.2f} s "
                f"({c['filter (waiting over 1 h): rows shown']} rows on the page)",
            ),
        ]
        if "filter (one tool) (s)" in c:
            rows += [
                (
                    f"console, {read}: filter by tool, nothing read yet / from a reading",
                    f"{c['filter (one tool) (s)']:.2f} s / "
                    f"{c['filter (one tool), from a reading (s)']:.2f} s",
                )
            ]
    return rows


def markdown(r: dict[str, Any]) -> str:
    m, p, s, c, li, d = (
        r["machine"],
        r["parking"],
        r["storage"],
        r["console"],
        r["listing"],
        r["deciding"],
    )
    n, a = r["runs"], r["audit_sample"]
    rows = [
        ("runs parked (one approval each)", f"{n:,}"),
        (
            "parking rate",
            f"{p['parked_per_s']:.1f} runs/s "
            f"({p.get('runs_timed', n):,} runs in {p['parked_s']:.0f} s"
            + (f", in {p['parts']} parts" if p.get("parts", 1) > 1 else "")
            + ")",
        ),
        (
            "server / worker CPU per parked run",
            f"{p['server_cpu_ms_per_run']:.1f} / {p['worker_cpu_ms_per_run']:.1f} ms",
        ),
        ("storage per parked run (SQLite, pages in use)", f"{s['used_bytes_per_run']:,.0f} B"),
        ("storage per parked run (file size delta)", f"{s['file_bytes_per_run']:,.0f} B"),
        (
            "worker RSS, default cache: idle -> all parked",
            f"{r['worker_rss_mb_idle']:.0f} -> {p['worker_rss_mb_final']:.0f} MB",
        ),
        (
            f"console's reading of the inbox, no worker ({c['console_rows_read']:,} calls of "
            f"{n:,} runs; it reads at most {c['console_read_limit']:,} runs)",
            f"{c['inbox reading (s)']:.2f} s",
        ),
        ("console first page, nothing read yet", f"{c['first page (s)']:.2f} s"),
        ("console search for one run, nothing read yet", f"{c['search (one run) (s)']:.2f} s"),
        *console_rows(r),
        (
            f"`hitl pending --json` over all {n:,} runs, no worker",
            f"{li['hitl_pending_all_s']:.1f} s",
        ),
        (
            f"list every run from visibility (audit export's listing), {n:,} runs",
            f"{li['visibility_list_all_s']:.1f} s ({li['visibility_list_runs_per_s']:,.0f} runs/s)",
        ),
        (
            f"`hitl audit` of {a['runs']:,} runs (a status query each, worker up)",
            f"{a['s']:.1f} s ({1000 * a['s'] / a['runs']:.1f} ms/run)",
        ),
        (
            f"decide {d['decided']:,} at random, {DECISIONS_AT_ONCE} at once: all completed",
            f"{d['all_completed_s']:.1f} s ({d['completed_per_s']:.1f} runs/s)",
        ),
        (
            "tool bodies run for the decided calls (effects exactly once each, checked)",
            f"{d['tool_attempts']:,} attempts ({len(d['retried'])} retried), "
            f"{d['effects']:,} effects",
        ),
        ("still parked afterwards", f"{r['still_parked']:,}"),
    ]
    head = (
        f"Measured {r['date']} on {m['cores']} cores ({m['cpu']}), {m['memory_gb']} GB, "
        f"{m['os']}, Python {m['python']}, {m['temporal']}; load average "
        f"{m['load_average_at_start'][0]:.2f} at start, {m['load_average_at_end'][0]:.2f} at end."
    )
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    return f"{head}\n\n| what | measured |\n|---|---:|\n{table}\n"


if __name__ == "__main__":  # re-render the markdown of a results file
    print(markdown(json.loads(Path(sys.argv[1]).read_text())))
