"""The benchmark's configurations (variants, plan) and one dev server with its workers and
drivers (`Stack`), shared by `bench.run`, `bench.sections` and `bench.profile`."""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.procs import (
    BENCH,
    PEER_PYTHON,
    Driver,
    Worker,
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

    # N was cut on 2026-11-26 to keep `make bench` near its 6-minute budget (docs/benchmarks.md
    # says from what): latency 50/20 -> 30/15 runs, throughput 200 -> 60 at once (the rate is flat
    # from 25 at once up), parked 1,000 -> 300 per side, the floor 50 -> 20 runs; and on
    # 2026-11-27 (373 s on a quiet machine): secondary latency 15 -> 10 runs, parked 300 -> 240
    # per side (still 140 past the default cache of 100), replayed 150 -> 100 (twice the bounded
    # cache of 50).
    latency_runs: int = 30
    latency_runs_secondary: int = 10
    warmup_runs: int = 2
    """Unmeasured runs per variant before its latency, and per side before parking."""
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
    throughput_runs: int = 60
    throughput_variants: tuple[str, ...] = (
        "ours-client",
        "peer",
        "ours",
        "ours-local-tool",
        "ours-scripted",
        "peer-scripted",
    )
    throughput_runs_secondary: int = 40
    # Throughput against concurrency (the chart), besides `throughput_runs` above.
    scaling_levels: tuple[int, ...] = (5, 25, 50, 100)
    parked_runs: int = 240
    parked_query_sample: int = 100
    parked_replay_sample: int = 100
    long_turns: tuple[int, ...] = (10, 20, 30, 40, 50, 60, 70, 80, 90, 100)
    long_variants: tuple[str, ...] = ("ours", "peer", "ours-scripted", "peer-local")
    floor_runs: int = 20
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

    def spawn_wire(self) -> Worker:
        """The scripted model behind the OpenAI wire format, one process for both sides (it
        needs no server, so it starts while the server does)."""
        from hitl.worker.devserver import free_port

        self.wire_port = free_port()
        argv = [sys.executable, "-m", "bench.wire", "--port", str(self.wire_port)]
        self.wire = Worker("wire", argv, self.logs / "wire.log").spawn()
        return self.wire

    def start_wire(self) -> None:
        self.spawn_wire().wait_ready()

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
        started = self.spawn_workers(specs)
        for w in started:
            w.wait_ready()
        return started

    def spawn_workers(self, specs: list[tuple[str, str, str, int | None]]) -> list[Worker]:
        """Spawn workers (name, kind, queue, cache) without waiting for them (`Worker.ready`)."""
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
