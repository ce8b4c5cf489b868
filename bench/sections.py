"""The measurements `bench.run` makes on one `Stack`: latency, throughput, parked runs,
history and the floor; each returns what goes into the results file."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from typing import Any

from bench import proto
from bench.procs import (
    ROOT,
    BenchError,
    proc_cmdline,
    sqlite_used_bytes,
)
from bench.stack import (
    BOUNDED_CACHE,
    BURST_TIMEOUT_SECONDS,
    HEADLINE,
    LONG_KEYS,
    PARK_CONCURRENCY,
    VARIANTS,
    Plan,
    Stack,
    log,
)


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
            "warmup", key=v.key, n=plan.warmup_runs, queue=stack.queue(name), api=v.api
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


SETTLE = 1.0
"""A factor on the pauses that let background work settle before a figure is taken, and on the
idle server's sample (`--quick`: `QUICK_SETTLE`; its figures are not for quoting)."""
QUICK_SETTLE = 0.3


async def idle_server_cpu(stack: Stack, seconds: float = 2.0) -> float:
    """The dev server's CPU while nothing runs (ms per second), to read the others against."""
    before = proto.snapshot({"server": stack.server.pid})
    await asyncio.sleep(seconds * SETTLE)
    after = proto.snapshot({"server": stack.server.pid})
    return cpu_delta_ms(before, after, "server") / (after["_"]["wall"] - before["_"]["wall"])


async def section_throughput(
    stack: Stack, n: int, names: list[str], timeout_s: float | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        v = VARIANTS[name]
        pids = stack.pids(name)
        await asyncio.sleep(1.0 * SETTLE)  # let the previous section's background work settle
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


def early_worker_specs(plan: Plan) -> list[tuple[str, str, str, int | None]]:
    """Workers the parked section and the floor start with their defaults, which `bench.run`
    starts with the others (a fresh worker idles on its own queue until its section)."""
    specs: list[tuple[str, str, str, int | None]] = []
    if "parked" in plan.sections:
        specs += [(f"{side}-default", side, f"park-{side}", None) for side in sorted(plan.sides())]
    if "floor" in plan.sections and "ours" in plan.sides():
        specs.append(("raw", "raw", "raw", None))
    return specs


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
        worker = stack.workers.get(name) or stack.start_worker(name, side, queue)
        try:
            await driver.call("warmup", key=key, n=plan.warmup_runs, queue=queue, api="client")
            await asyncio.sleep(0.5 * SETTLE)
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
            await asyncio.sleep(1.0 * SETTLE)
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
            await asyncio.sleep(0.5 * SETTLE)
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
    """One long run per variant, all at once (each driver takes its side's runs together):
    what they measure is history bytes, which the load does not change; their wall times are
    of runs sharing the machine."""
    turns = max(plan.long_turns)
    by_side: dict[str, list[str]] = {}
    for name in names:
        by_side.setdefault(VARIANTS[name].side, []).append(name)
    replies = await asyncio.gather(
        *(
            stack.drivers[side].call(
                "long_runs",
                runs=[
                    {
                        "key": LONG_KEYS.get(name, VARIANTS[name].key),
                        "queue": stack.queue(name),
                    }
                    for name in group
                ],
                turns=turns,
                checkpoints=list(plan.long_turns),
            )
            for side, group in by_side.items()
        )
    )
    out: dict[str, Any] = {}
    for group, results in zip(by_side.values(), replies, strict=True):
        for name, res in zip(group, results, strict=True):
            res["total"].pop("by_type", None)
            out[name] = res
            at = ", ".join(f"{k}: {r['bytes'] / 1024:.0f} KB" for k, r in res["at_turn"].items())
            log(f"  long run {name:13s} {turns} turns in {res['wall_s']:.1f}s; history: {at}")
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
        if "raw" not in stack.workers:
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
