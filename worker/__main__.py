"""`python -m hitl.worker --agents module:attr [...]`: serve agents on a task queue.

Connection settings come from `temporalio.envconfig` (the `temporal` CLI's profiles and
`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, TLS variables). A wrong address,
namespace or credential exits with code 2 and a one-line reason. Every option has an environment
variable (`HITL_*`, listed in `--help`), so a container needs no command line.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from hitl.client import check_namespace, connect, hard_exit
from hitl.errors import UserError
from hitl.registry import AgentRegistry, load_agents, load_object
from hitl.storage import close_storage
from hitl.wire import DEFAULT_TASK_QUEUE
from hitl.worker.build import (
    DEFAULT_GRACEFUL_SHUTDOWN,
    DEFAULT_MAX_CACHED_WORKFLOWS,
    DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS,
    DEFAULT_STICKY_QUEUE_TIMEOUT,
    WorkerOptions,
    build_worker,
    check_cluster,
)
from hitl.worker.refusals import log_refusals
from hitl.worker.telemetry import Tracing, metrics_runtime, start_tracing

__all__ = ["check_namespace", "main", "parse_args"]

log = logging.getLogger("hitl.worker")

EXIT_CONFIG = 2
"""Bad options, unreachable server, unknown namespace, rejected credentials."""


def _number(kind: Callable[[str], float], minimum: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum:g}, got {text!r}")
        return value

    return parse


def _flag(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (each defaults to its environment variable)."""
    env = os.environ.get
    p = argparse.ArgumentParser(
        prog="python -m hitl.worker",
        description=(__doc__ or "").splitlines()[0],
    )
    for flag, settings in _options():
        p.add_argument(flag, **settings)
    args = p.parse_args(argv)
    if not args.agents:
        args.agents = [a.strip() for a in env("HITL_AGENTS", "").split(",") if a.strip()]
    if not args.agents:
        p.error("no agents to serve: give --agents MODULE[:ATTR] or set HITL_AGENTS")
    if not args.allow:
        args.allow = [a.strip() for a in env("HITL_ALLOW", "").split(",") if a.strip()]
    return args


OPTIONS: list[tuple[str, dict[str, Any]]] = [
    (
        "--agents",
        {
            "action": "append",
            "metavar": "MODULE[:ATTR]",
            "help": "agents to serve: an Agent, a list/dict of Agents, or a module "
            "(repeatable; env HITL_AGENTS, comma-separated)",
        },
    ),
    (
        "--allow",
        {
            "action": "append",
            "default": [],
            "metavar": "MODULE:ATTR",
            "help": "also let runs name this function, guardrail, context type, Model or "
            "RunConfig (or a list of them): e.g. a RunConfig's tool_error_formatter "
            "(repeatable; env HITL_ALLOW, comma-separated). Runs can name nothing else "
            "besides the agents' own code",
        },
    ),
    (
        "--task-queue",
        {
            "env": ("HITL_TASK_QUEUE", DEFAULT_TASK_QUEUE),
            "help": "queue to poll (env HITL_TASK_QUEUE; now %(default)s)",
        },
    ),
    (
        "--policy",
        {
            "metavar": "FILE",
            "help": "the approval policy runs started here pin (YAML or JSON, see "
            "docs/policies.md; env HITL_POLICY)",
        },
    ),
    (
        "--policy-registry",
        {
            "action": "store_true",
            "help": "serve the namespace's policy registry and pin its policy in new runs "
            "(the --policy file's while it has none; docs/policies.md)",
        },
    ),
    ("--address", {"help": "host:port (default: envconfig, else localhost:7233)"}),
    ("--namespace", {"help": "namespace (default: envconfig, else default)"}),
    ("--profile", {"help": "envconfig profile name (env TEMPORAL_PROFILE)"}),
    (
        "--activities-only",
        {
            "nargs": "?",
            "const": True,
            "env": ("HITL_ACTIVITIES_ONLY", "false"),
            "type": _flag,
            "metavar": "BOOL",
            "help": "serve tools and model calls only, no workflows: a worker for a run's "
            "tool_task_queue / model_task_queue (env HITL_ACTIVITIES_ONLY)",
        },
    ),
    (
        "--otel",
        {
            "nargs": "?",
            "const": True,
            "env": ("HITL_OTEL", "false"),
            "type": _flag,
            "metavar": "BOOL",
            "help": "trace runs with OpenTelemetry (the tracing extra); spans go where "
            "OTEL_TRACES_EXPORTER says (otlp by default, console, none) (env HITL_OTEL)",
        },
    ),
    (
        "--metrics-port",
        {
            "type": _number(int, 1),
            "env": ("HITL_METRICS_PORT", None),
            "metavar": "PORT",
            "help": "serve Prometheus metrics on this port (/metrics): the SDK's worker "
            "metrics and the runs' decisions, edits, escalations and time to decide "
            "(env HITL_METRICS_PORT; default off)",
        },
    ),
    (
        "--metrics-host",
        {
            "env": ("HITL_METRICS_HOST", "127.0.0.1"),
            "help": "address the metrics port binds (env HITL_METRICS_HOST; now "
            "%(default)s; 0.0.0.0 in a container a scraper reaches)",
        },
    ),
    (
        "--max-cached-workflows",
        {
            "type": _number(int, 0),
            "env": ("HITL_MAX_CACHED_WORKFLOWS", str(DEFAULT_MAX_CACHED_WORKFLOWS)),
            "help": "runs kept in memory; parked runs beyond it replay when woken "
            "(env HITL_MAX_CACHED_WORKFLOWS; now %(default)s)",
        },
    ),
    (
        "--max-concurrent-activities",
        {
            "type": _number(int, 1),
            "env": ("HITL_MAX_CONCURRENT_ACTIVITIES", None),
            "help": "tool and model calls at once (env HITL_MAX_CONCURRENT_ACTIVITIES; "
            "default 100)",
        },
    ),
    (
        "--max-concurrent-workflow-tasks",
        {
            "type": _number(int, 2),
            "env": (
                "HITL_MAX_CONCURRENT_WORKFLOW_TASKS",
                str(DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS),
            ),
            "help": "workflow tasks (CPU work in this process) at once "
            "(env HITL_MAX_CONCURRENT_WORKFLOW_TASKS; now %(default)s)",
        },
    ),
    (
        "--graceful-shutdown",
        {
            "type": _number(float, 0),
            "env": ("HITL_GRACEFUL_SHUTDOWN", f"{DEFAULT_GRACEFUL_SHUTDOWN:g}"),
            "metavar": "SECONDS",
            "help": "on SIGTERM, in-flight activities get this long to finish before they "
            "are cancelled and retried elsewhere (env HITL_GRACEFUL_SHUTDOWN; now "
            "%(default)s)",
        },
    ),
    (
        "--sticky-queue-timeout",
        {
            "type": _number(float, 1),
            "env": ("HITL_STICKY_QUEUE_TIMEOUT", f"{DEFAULT_STICKY_QUEUE_TIMEOUT:g}"),
            "metavar": "SECONDS",
            "help": "how long a run's next task waits for the worker that cached it before "
            "another worker takes it, e.g. after a crash (env HITL_STICKY_QUEUE_TIMEOUT; "
            "now %(default)s)",
        },
    ),
    (
        "--identity",
        {
            "env": ("HITL_WORKER_IDENTITY", None),
            "help": "shown in history (env HITL_WORKER_IDENTITY; default pid@host)",
        },
    ),
    (
        "--audit-log",
        {
            "env": ("HITL_AUDIT_LOG", None),
            "metavar": "FILE",
            "help": "append updates the runs refused to this JSON-lines file, for `hitl "
            "audit --worker-log` (env HITL_AUDIT_LOG)",
        },
    ),
    (
        "--log-level",
        {
            "env": ("HITL_LOG_LEVEL", "INFO"),
            "help": "env HITL_LOG_LEVEL; now %(default)s",
        },
    ),
]
"""The worker's options as (flag, `add_argument` settings): one row each, in `--help` order.
`"env": (NAME, FALLBACK)` makes the default the environment variable NAME, read when the
options are parsed (`_options`); `--agents` and `--allow` fall back to theirs after parsing
(an empty list there means "not given")."""


def _options() -> list[tuple[str, dict[str, Any]]]:
    """`OPTIONS` with each `env` default read from the environment now."""
    rows = []
    for flag, settings in OPTIONS:
        row = dict(settings)
        if "env" in row:
            name, fallback = row.pop("env")
            row["default"] = os.environ.get(name, fallback)
        rows.append((flag, row))
    return rows


async def _serve(args: argparse.Namespace, tracing: Tracing | None) -> tuple[AgentRegistry, Any]:
    """The agents to serve and the client to serve them with (`UserError`: why not)."""
    agents = [a for ref in args.agents for a in load_agents(ref)]
    registry = AgentRegistry(agents, allow=[load_object(ref) for ref in args.allow])
    runtime = metrics_runtime(args.metrics_host, args.metrics_port) if args.metrics_port else None
    # connect() also checks the namespace: a worker on a missing one would poll forever.
    client = await connect(
        profile=args.profile,
        address=args.address,
        namespace=args.namespace,
        plugins=[tracing.plugin] if tracing else (),
        runtime=runtime,
    )
    return registry, client


def _build(client: Any, registry: Any, options: WorkerOptions, args: Any) -> Any:
    """The worker, or `None` (said on stderr) when its policy cannot be used.

    A policy that cannot be used is refused before the worker serves anything.
    """
    try:
        return build_worker(
            client,
            registry,
            options,
            identity=args.identity,
            policy=args.policy,
            policy_registry=args.policy_registry,
        )
    except UserError as exc:
        print(f"worker: {exc.message}", file=sys.stderr)
        return None


async def main(argv: list[str] | None = None) -> int:
    """Run the worker until SIGINT/SIGTERM; returns the exit code."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.audit_log:
        log_refusals(args.audit_log)
    tracing: Tracing | None = None
    try:
        tracing = start_tracing() if args.otel else None
        registry, client = await _serve(args, tracing)
    except UserError as exc:
        print(f"worker: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    options = WorkerOptions(
        task_queue=args.task_queue,
        max_cached_workflows=args.max_cached_workflows,
        max_concurrent_activities=args.max_concurrent_activities,
        max_concurrent_workflow_tasks=args.max_concurrent_workflow_tasks,
        graceful_shutdown=args.graceful_shutdown,
        activities_only=args.activities_only,
        sticky_queue_timeout=args.sticky_queue_timeout,
    )
    if not options.activities_only:
        await check_cluster(client)
    worker = _build(client, registry, options, args)
    if worker is None:
        return EXIT_CONFIG
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    role = "activities only" if options.activities_only else "workflows and activities"
    if tracing is not None:
        role += ", tracing"
    if args.metrics_port:
        role += f", metrics on {args.metrics_host}:{args.metrics_port}"
    async with worker:
        log.info(
            "worker ready (%s): task queue %r, namespace %r, agents %s",
            role,
            args.task_queue,
            client.namespace,
            ", ".join(registry.names),
        )
        print(f"worker ready on task queue {args.task_queue!r} ({role})", flush=True)
        await stop.wait()
        log.info("shutting down (in-flight activities get %gs)", args.graceful_shutdown)
    await close_storage(client)
    if tracing is not None:
        tracing.shutdown()  # export what is buffered: the process exits without teardown
    return 0


if __name__ == "__main__":
    hard_exit(asyncio.run(main()))
