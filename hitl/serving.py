"""Serving agents in this process: the one place the client API reaches worker code.

(Also the local dev server's bootstrap, for `hitl dev`: `DevServer`, `free_port`, `port_free`,
loaded from `hitl.worker.devserver` when first named, so `import hitl` does not load it.)

`Runner.run` serves a script's own agents for the duration of a call when no worker polls the
task queue (`serve="auto"`); `serve_agents` does it for a block. Production runs dedicated
workers (`python -m hitl.worker`). Whether a worker polls is read from the server's poller list.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from hitl.agent import Agent
from hitl.client import connect
from hitl.run_config import RunConfig, RunErrorHandler
from hitl.wire import DEFAULT_TASK_QUEUE

if TYPE_CHECKING:
    from hitl.worker.devserver import DevServer, free_port, port_free

__all__ = [
    "DevServer",
    "free_port",
    "in_process_allow",
    "live_pollers",
    "pollers_advance",
    "port_free",
    "serve_agents",
]

_DEV_SERVER_NAMES = frozenset({"DevServer", "free_port", "port_free"})


def __getattr__(name: str) -> Any:
    # The dev server's bootstrap, loaded on first use (PEP 562): a client never pays for it.
    if name in _DEV_SERVER_NAMES:
        from hitl.worker import devserver

        return getattr(devserver, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


POLLER_FRESH_SECONDS = 90.0

_STOPPED_IDENTITIES: set[str] = set()


async def live_pollers(client: Client, task_queue: str) -> int:
    """How many workers polled `task_queue` for workflow tasks recently."""
    resp = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    now = time.time()
    return sum(
        1
        for p in resp.pollers
        if p.identity not in _STOPPED_IDENTITIES
        and (
            not p.HasField("last_access_time")
            or now - p.last_access_time.ToSeconds() < POLLER_FRESH_SECONDS
        )
    )


async def _last_polls(client: Client, task_queue: str) -> dict[str, int]:
    resp = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return {
        p.identity: p.last_access_time.ToNanoseconds()
        for p in resp.pollers
        if p.identity not in _STOPPED_IDENTITIES
    }


async def pollers_advance(client: Client, task_queue: str, window: float = 3.0) -> bool:
    """Whether some worker polls `task_queue` again (or a new one starts) within `window`.

    Server timestamps are compared with each other only, so clock skew does not matter. A
    server that cannot describe task queues (the time-skipping test server) gives no sign of
    life: `False`.
    """
    try:
        before = await _last_polls(client, task_queue)
    except RPCError as exc:
        if exc.status == RPCStatusCode.UNIMPLEMENTED:
            return False
        raise
    loop = asyncio.get_running_loop()
    deadline = loop.time() + window
    while loop.time() < deadline:
        await asyncio.sleep(0.5)
        after = await _last_polls(client, task_queue)
        if any(t > before.get(identity, -1) for identity, t in after.items()):
            return True
    return False


@contextlib.asynccontextmanager
async def serve_agents(
    *agents: Agent[Any],
    client: Client | None = None,
    task_queue: str = DEFAULT_TASK_QUEUE,
    max_cached_workflows: int | None = None,
    allow: Iterable[Any] = (),
) -> AsyncIterator[Any]:
    """Serve agents with a worker inside this process while the block runs.

    Scripts in the style of the OpenAI Agents SDK examples can wrap their `main()` in it;
    production runs dedicated workers (`python -m hitl.worker`). `allow` lists what runs may name
    besides the agents' own code: the `RunConfig`s (or their functions) and context types the
    script uses (see `hitl.refs`).
    """
    from hitl.worker.build import WorkerOptions, build_worker, check_cluster

    client = await connect(client)
    await check_cluster(client)
    opts = WorkerOptions(task_queue=task_queue)
    if max_cached_workflows is not None:
        opts.max_cached_workflows = max_cached_workflows
    # A unique identity lets later calls ignore this worker's poller entry once it stopped
    # (the server keeps listing pollers for minutes).
    identity = f"{os.getpid()}@{socket.gethostname()}-inprocess-{uuid.uuid4().hex[:8]}"
    worker = build_worker(client, agents, opts, identity=identity, allow=allow)
    try:
        async with worker:
            yield worker
    finally:
        _STOPPED_IDENTITIES.add(identity)


def in_process_allow(
    run_config: RunConfig | None,
    error_handlers: Mapping[str, RunErrorHandler] | None,
    context: Any,
) -> list[Any]:
    """What a run started (or resumed) by this call names: an in-process worker allows it."""
    allow: list[Any] = []
    if run_config is not None:
        allow.append(run_config)
    allow += [fn for fn in (error_handlers or {}).values() if not isinstance(fn, str)]
    if isinstance(context, BaseModel) or (
        dataclasses.is_dataclass(context) and not isinstance(context, type)
    ):
        cls = type(context)
        if "<locals>" not in cls.__qualname__:
            allow.append(cls)
    return allow
