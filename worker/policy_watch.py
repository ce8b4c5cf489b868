"""The worker's watch on the namespace's policy registry: what new runs pin.

A worker built with `policy_registry=...` keeps the registry's current policy in memory, read
by an asyncio task of the worker process (a `current_policy` query every `interval` seconds),
never from inside a workflow task: `resolve_agent` (a local activity in a run's first workflow
task) only reads this memory. Asking the registry from there deadlocked a worker that caches no
workflows (the query needs a workflow task on the same worker, which evicted the run waiting
for it). The run records what `resolve_agent` returned, so its pin is in its history once.

Until the watch has had a first answer, `resolve_agent` fails retryably (`RegistryNotRead`)
instead of pinning the file: a run never pins an older policy because its worker just started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.plugin import SimplePlugin
from temporalio.service import RPCError, RPCStatusCode

from hitl.activities.policy import pinned_document
from hitl.wire import (
    POLICY_REGISTRY_ID,
    POLICY_REGISTRY_TYPE,
    QUERY_CURRENT_POLICY,
    CurrentPolicy,
    PinnedPolicy,
    RegistryInput,
)

log = logging.getLogger("hitl.worker")

DEFAULT_INTERVAL = 5.0
"""Seconds between two readings of the registry: how long a publication takes to reach new
runs at most (plus a query's round trip)."""


class RegistryWatch:
    """The registry's current policy as this worker last read it (else the worker's file).

    Args:
        registry_id: The registry's workflow id (one per namespace: `POLICY_REGISTRY_ID`).
        interval: Seconds between two readings.
    """

    def __init__(self, registry_id: str = POLICY_REGISTRY_ID, interval: float = DEFAULT_INTERVAL):
        self.registry_id = registry_id
        self.interval = interval
        self.fallback: PinnedPolicy | None = None
        """The worker's own policy (its file): pinned while the registry has none."""
        self.current: PinnedPolicy | None = None
        self.answered = False
        """The registry answered at least once (with a policy or with none)."""
        self._changed = asyncio.Condition()

    def policy(self) -> PinnedPolicy | None:
        """What a run starting now pins: the registry's policy, else the worker's file.

        Raises:
            ApplicationError: `RegistryNotRead` (retryable) before the first answer.
        """
        if not self.answered:
            raise ApplicationError(
                f"this worker has not read the policy registry {self.registry_id!r} yet",
                type="RegistryNotRead",
            )
        return self.current or self.fallback

    async def read(self, client: Client, task_queue: str) -> None:
        """Read the registry once (starting it on `task_queue` if the namespace has none).

        Believed only from a `PolicyRegistry` on this task queue (so served by workers running
        our code), and only a document that matches its digest.
        """
        handle = client.get_workflow_handle(self.registry_id)
        desc = await _described(handle)
        if desc is None or desc.status != WorkflowExecutionStatus.RUNNING:
            with contextlib.suppress(WorkflowAlreadyStartedError):  # (another worker did)
                await client.start_workflow(
                    POLICY_REGISTRY_TYPE,
                    RegistryInput(),
                    id=self.registry_id,
                    task_queue=task_queue,
                )
            desc = await handle.describe()
        if desc.workflow_type != POLICY_REGISTRY_TYPE or desc.task_queue != task_queue:
            raise RuntimeError(
                f"{self.registry_id!r} is a {desc.workflow_type} on task queue "
                f"{desc.task_queue!r}, not our registry on {task_queue!r}"
            )
        answer = await handle.query(QUERY_CURRENT_POLICY, result_type=CurrentPolicy)
        if answer.policy is not None:
            pinned_document(answer.policy)  # validates it and checks its digest
        async with self._changed:
            if answer.policy != self.current or not self.answered:
                log.info(
                    "policy registry: %s",
                    f"{answer.policy.name}@{answer.policy.version}" if answer.policy else "none",
                )
            self.current, self.answered = answer.policy, True
            self._changed.notify_all()

    async def watch(self, client: Client, task_queue: str) -> None:
        """Read the registry every `interval` seconds until cancelled (errors are logged)."""
        while True:
            try:
                await asyncio.wait_for(self.read(client, task_queue), timeout=30)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep the last answer: a blip changes no run's pin
                log.warning("reading the policy registry failed: %r", exc)
            await asyncio.sleep(self.interval)

    async def wait_for(self, digest: str | None, timeout: float = 30.0) -> None:
        """Return once the registry's policy read here has `digest` (`None`: none)."""

        def seen() -> bool:
            got = self.current.digest if self.current is not None else None
            return self.answered and got == digest

        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(seen), timeout)


async def _described(handle: WorkflowHandle[Any, Any]) -> WorkflowExecutionDescription | None:
    """The registry's description, `None` when the namespace has no such workflow."""
    try:
        return await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


class WatchRegistry(SimplePlugin):
    """Runs a `RegistryWatch` for as long as the worker runs."""

    def __init__(self, watch: RegistryWatch, client: Client, task_queue: str) -> None:
        @contextlib.asynccontextmanager
        async def lifetime() -> AsyncIterator[None]:
            task = asyncio.create_task(watch.watch(client, task_queue))
            try:
                yield
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

        super().__init__("hitl.WatchRegistry", run_context=lifetime)


def registry_watch(option: bool | str | RegistryWatch) -> RegistryWatch | None:
    """The watch `build_worker(policy_registry=...)` asks for.

    `True` for the namespace's registry, a workflow id for another, or a `RegistryWatch`.
    """
    if isinstance(option, RegistryWatch):
        return option
    if option is True:
        return RegistryWatch()
    if isinstance(option, str) and option:
        return RegistryWatch(option)
    return None


__all__ = ["DEFAULT_INTERVAL", "RegistryWatch", "WatchRegistry", "registry_watch"]
