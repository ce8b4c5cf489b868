"""A `Runner` call's line to the cluster: updates that notice when no worker answers.

`Runner.run` and `run_streamed` send every update through a `RunnerConnection`, which serves
the agent in this process when no worker takes the run (`serve="auto"`) or says so with
`NoWorkerError` (`serve=False`). `hitl.run` holds what the calls do; this module how they reach
the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import PendingWorkflowTaskState
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from hitl.agent import Agent
from hitl.errors import NoWorkerError
from hitl.serving import live_pollers, pollers_advance, serve_agents
from hitl.wire import QUERY_STATUS, UPDATE_DECIDE, DecideInput, RunStatus

log = logging.getLogger("hitl")


ServeMode = Literal["auto"] | bool


WORKER_GRACE_SECONDS = 10.0
"""How long the first update may wait for a worker before `Runner.run` concludes none runs.

Only used when the server lists pollers (they may be stale): with none at all, `serve="auto"`
serves at once. Loaded workers can take seconds to pick up a task, so this is generous."""

BUSY_CHECKS = 2
"""How many times `worker_is_busy` looks (each watches the queue's pollers for 3 s)."""


class RunnerConnection:
    """One `Runner.run` call: its client, agent, queue, and (if needed) an in-process worker.

    Whether a worker is alive cannot be read reliably from the server (it lists pollers for
    minutes after they stop), so the session watches its first update instead: when no worker
    accepts it within `WORKER_GRACE_SECONDS` and no worker is busy (`worker_is_busy`), it
    serves the agent in-process (`serve="auto"`) or raises `NoWorkerError` (`serve=False`).
    The update stays queued on the server either way.
    """

    def __init__(
        self,
        client: Client,
        agent: Agent[Any],
        task_queue: str,
        mode: ServeMode,
        allow: list[Any] | None = None,
    ):
        self.client = client
        self.agent = agent
        self.task_queue = task_queue
        self.mode = mode
        self.allow = allow or []
        """What this call's runs name (run config, context type): the in-process worker
        allows it, since it is this script's own code."""
        self.serving = False
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> RunnerConnection:
        if self.mode is True or (
            self.mode == "auto" and await live_pollers(self.client, self.task_queue) == 0
        ):
            await self.serve()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def serve(self) -> None:
        """Start the in-process worker for the rest of this call (once)."""
        if self.serving:
            return
        if self.mode == "auto":
            log.warning(
                "no worker serves task queue %r: serving agent %r in this process for this call "
                "(run `python -m hitl.worker --agents ...` for production)",
                self.task_queue,
                self.agent.name,
            )
        await self._stack.enter_async_context(
            serve_agents(
                self.agent, client=self.client, task_queue=self.task_queue, allow=self.allow
            )
        )
        self.serving = True

    async def no_worker(self, workflow_id: str) -> None:
        """React to an update that no worker accepted in time."""
        if self.mode is False or self.serving:
            raise NoWorkerError(
                f"no worker accepted run {workflow_id} on task queue {self.task_queue!r} within "
                f"{WORKER_GRACE_SECONDS:g}s. The server holds the request in memory until a "
                "worker takes it (a server restart loses it; a decision that arrives after its "
                "call's approval deadline is refused): start one with `python -m hitl.worker "
                "--agents <module>:<agent>` and run the same call again to see the outcome"
            )
        await self.serve()

    async def update(
        self,
        workflow_id: str,
        name: str,
        arg: Any,
        *,
        update_id: str | None = None,
        start: Callable[[], WithStartWorkflowOperation[Any, Any]] | None = None,
        result_type: type[Any] = RunStatus,
    ) -> Any:
        """Send an update and wait for its result, serving in-process if no worker accepts it.

        The server keeps a request no worker took in time: sending it again with the same
        update id (and, for a start, USE_EXISTING) attaches to it instead of making another.
        """
        uid = update_id or f"{name}-{uuid.uuid4().hex}"
        while True:
            op = start() if start is not None else None
            try:
                uh = await self._send(workflow_id, name, arg, uid, op, result_type)
            except (WorkflowUpdateRPCTimeoutOrCancelledError, RPCError) as exc:
                if not _not_accepted_in_time(exc):
                    await _retrieve(op, BaseException)
                    raise
                await _retrieve(op, Exception)  # consume the operation's timeout error
                await self._wait_or_serve(workflow_id)
                continue
            except WorkflowUpdateFailedError as exc:
                if refusal_type(exc) != "TooManyWaiters":
                    raise
                # Others hold every waiting slot of the run (the slots left are for decisions):
                # send a decision without waiting, then watch the run by query.
                if _waits_for_decision(name, arg):
                    arg = arg.model_copy(update={"wait": False})
                    uid, start = f"{uid}-nowait", None
                    continue
                return await self.poll_settled(workflow_id)
            except BaseException:
                # The start operation shares the failure (e.g. the id names a closed run):
                # retrieve it, or asyncio reports a future whose exception nobody read.
                await _retrieve(op, BaseException)
                raise
            result = await uh.result()
            if name == UPDATE_DECIDE and isinstance(arg, DecideInput) and not arg.wait:
                return await self.poll_settled(workflow_id)
            return result

    async def _send(
        self,
        workflow_id: str,
        name: str,
        arg: Any,
        uid: str,
        op: WithStartWorkflowOperation[Any, Any] | None,
        result_type: type[Any],
    ) -> WorkflowUpdateHandle[Any]:
        """Send the update (with the start, if any); returns once a worker accepted it.

        Until the in-process worker serves, a worker gets `WORKER_GRACE_SECONDS` to accept it.
        """
        grace = None if self.serving else timedelta(seconds=WORKER_GRACE_SECONDS)
        if op is not None:
            return await self.client.start_update_with_start_workflow(
                name,
                arg,
                start_workflow_operation=op,
                id=uid,
                wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                result_type=result_type,
                rpc_timeout=grace,
            )
        handle: WorkflowHandle[Any, Any] = self.client.get_workflow_handle(workflow_id)
        return await handle.start_update(
            name,
            arg,
            id=uid,
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            result_type=result_type,
            rpc_timeout=grace,
        )

    async def _wait_or_serve(self, workflow_id: str) -> None:
        """After an update no worker accepted in time: wait on while a worker is busy.

        Otherwise there is none: serve in-process, or say so (`no_worker`).
        """
        if await self.worker_is_busy(workflow_id):
            log.info(
                "workers on task queue %r are busy; still waiting for run %s",
                self.task_queue,
                workflow_id,
            )
        else:
            await self.no_worker(workflow_id)

    async def poll_settled(self, workflow_id: str) -> RunStatus:
        """Read the run by query until it waits for people, finishes or continues as new."""
        handle: WorkflowHandle[Any, Any] = self.client.get_workflow_handle(workflow_id)
        delay = 0.2
        while True:
            status: RunStatus = await handle.query(QUERY_STATUS, result_type=RunStatus)
            if status.continued_as_new or status.phase in (
                "awaiting_approval",
                "completed",
                "failed",
            ):
                return status
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 2.0)

    async def worker_is_busy(self, workflow_id: str) -> bool:
        """After the grace period: is a worker slow on this run (wait on) or is there none?

        A worker polled the queue recently (the server keeps a poller for `POLLER_FRESH_SECONDS`:
        a loaded worker stops polling this queue while its slots are taken and it works through
        its sticky queue, so a missing poll says little), it holds the run's workflow task (it
        is *started*), or the queue's workers keep polling. A worker that died less than that
        long ago still counts: the call waits on, and says so once its poller goes stale.
        """
        if self.serving:
            return True
        with contextlib.suppress(RPCError):  # (the checks below still decide)
            if await live_pollers(self.client, self.task_queue) > 0:
                return True
        # Twice: a worker whose slots are all taken polls again only as it frees one, and it may
        # spend a while on runs already on its sticky queue. Taking a busy worker for a missing
        # one is the costly mistake (NoWorkerError, or a second worker); the other only waits.
        # A failed look proves nothing either: an update-with-start whose deadline passed before
        # the start was stored leaves no run to describe yet (NOT_FOUND), and a loaded server
        # may refuse or time out a describe; only the pollers' silence means "no worker".
        for _ in range(BUSY_CHECKS):
            with contextlib.suppress(RPCError):
                if await self.holds_task(workflow_id):
                    return True
            with contextlib.suppress(RPCError):
                if await pollers_advance(self.client, self.task_queue):
                    return True
        return False

    async def holds_task(self, workflow_id: str) -> bool:
        """Whether a worker has started the run's pending workflow task (it is working on it)."""
        desc = await self.client.workflow_service.describe_workflow_execution(
            DescribeWorkflowExecutionRequest(
                namespace=self.client.namespace,
                execution=WorkflowExecution(workflow_id=workflow_id),
            )
        )
        task = desc.pending_workflow_task
        return desc.HasField("pending_workflow_task") and (
            task.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED
        )


def _not_accepted_in_time(exc: WorkflowUpdateRPCTimeoutOrCancelledError | RPCError) -> bool:
    """Whether sending an update failed only because no worker accepted it in time.

    Update-with-start reports a timed-out update inside its multi-operation failure, as a bare
    `RPCError` (CANCELLED: "operation was canceled") that the SDK does not turn into its
    timeout error; both mean "not accepted in time".
    """
    return not isinstance(exc, RPCError) or exc.status in (
        RPCStatusCode.CANCELLED,
        RPCStatusCode.DEADLINE_EXCEEDED,
    )


def _waits_for_decision(name: str, arg: Any) -> bool:
    """Whether this is a `decide` that waits for the run to settle (it takes a waiting slot)."""
    return name == UPDATE_DECIDE and isinstance(arg, DecideInput) and arg.wait


async def _retrieve(
    op: WithStartWorkflowOperation[Any, Any] | None, ignore: type[BaseException]
) -> None:
    """Read a start operation's outcome after its update failed, ignoring what it raises.

    The operation shares the update's failure; left unread, asyncio reports a future whose
    exception nobody retrieved.
    """
    if op is not None:
        with contextlib.suppress(ignore):
            await op.workflow_handle()


def refusal_type(exc: WorkflowUpdateFailedError) -> str | None:
    """The typed reason an update was refused with (`ApplicationError.type`), if any."""
    cause = exc.cause
    return cause.type if isinstance(cause, ApplicationError) else None
