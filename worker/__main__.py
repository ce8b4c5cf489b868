"""`python -m worker --agents module:attr [...]`: serve agents on a task queue.

Connection settings come from `temporalio.envconfig` (the `temporal` CLI's profiles and
`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, TLS variables). A wrong address or
namespace exits non-zero with a one-line reason.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any

from hitl.client import connect
from hitl.errors import UserError
from hitl.registry import AgentRegistry, load_agents
from hitl.wire import DEFAULT_TASK_QUEUE
from worker.build import (
    DEFAULT_MAX_CACHED_WORKFLOWS,
    WorkerOptions,
    build_worker,
    detect_features,
)

log = logging.getLogger("hitl.worker")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m worker", description=__doc__.splitlines()[0])
    p.add_argument(
        "--agents",
        action="append",
        required=True,
        metavar="MODULE[:ATTR]",
        help="agents to serve: an Agent, a list/dict of Agents, or a module (repeatable)",
    )
    p.add_argument("--task-queue", default=os.environ.get("HITL_TASK_QUEUE", DEFAULT_TASK_QUEUE))
    p.add_argument("--address", help="host:port (default: envconfig, else localhost:7233)")
    p.add_argument("--namespace", help="namespace (default: envconfig, else default)")
    p.add_argument("--profile", help="envconfig profile name")
    p.add_argument(
        "--max-cached-workflows",
        type=int,
        default=int(os.environ.get("HITL_MAX_CACHED_WORKFLOWS", DEFAULT_MAX_CACHED_WORKFLOWS)),
    )
    p.add_argument("--max-concurrent-activities", type=int, default=None)
    p.add_argument("--max-concurrent-workflow-tasks", type=int, default=None)
    p.add_argument("--graceful-shutdown", type=float, default=10.0, metavar="SECONDS")
    p.add_argument("--identity", default=None)
    p.add_argument("--log-level", default=os.environ.get("HITL_LOG_LEVEL", "INFO"))
    return p.parse_args(argv)


async def check_namespace(client: Any) -> None:
    """Fail fast when the namespace does not exist (the worker would poll forever)."""
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.service import RPCError

    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=client.namespace)
        )
    except RPCError as exc:
        raise UserError(f"namespace {client.namespace!r}: {exc.message}") from None


async def main(argv: list[str] | None = None) -> int:
    """Run the worker until SIGINT/SIGTERM; returns the exit code."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        agents = [a for ref in args.agents for a in load_agents(ref)]
        registry = AgentRegistry(agents)
        client = await connect(profile=args.profile, address=args.address, namespace=args.namespace)
        await check_namespace(client)
    except UserError as exc:
        print(f"worker: {exc.message}", file=sys.stderr)
        return 2
    options = WorkerOptions(
        task_queue=args.task_queue,
        max_cached_workflows=args.max_cached_workflows,
        max_concurrent_activities=args.max_concurrent_activities,
        max_concurrent_workflow_tasks=args.max_concurrent_workflow_tasks,
        graceful_shutdown=args.graceful_shutdown,
    )
    options = await detect_features(client, options)
    worker = build_worker(client, registry, options, identity=args.identity)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        log.info(
            "worker ready: task queue %r, namespace %r, agents %s",
            args.task_queue,
            client.namespace,
            ", ".join(registry.names),
        )
        print(f"worker ready on task queue {args.task_queue!r}", flush=True)
        await stop.wait()
        log.info("shutting down (in-flight activities get %gs)", args.graceful_shutdown)
    return 0


if __name__ == "__main__":
    from hitl.cli import hard_exit

    hard_exit(asyncio.run(main()))
