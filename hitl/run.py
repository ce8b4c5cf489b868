"""`Runner`: start a durable run, or resume one from a `RunState`, and wait until it settles."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import timedelta
from typing import Any, Literal

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import PendingWorkflowTaskState
from temporalio.api.workflowservice.v1 import (
    DescribeWorkflowExecutionRequest,
)
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from hitl.agent import Agent
from hitl.client import connect
from hitl.errors import (
    AgentsException,
    AlreadyDecidedError,
    DecisionError,
    NoWorkerError,
    RunFailedError,
    UserError,
    from_failure,
)
from hitl.result import RunResult, resolve_agent, typed_final_output
from hitl.run_config import RunConfig, RunErrorHandler
from hitl.serving import (
    in_process_allow,
    live_pollers,
    pollers_advance,
    serve_agents,
)
from hitl.session import TemporalSession
from hitl.starting import (
    StartRequest,
    context_value,
    decision_update_id,
    default_approver,
)
from hitl.state import RunState, ToolApprovalItem, items_from_pending
from hitl.stream import current_offset, events_until_settled
from hitl.wire import (
    DEFAULT_TASK_QUEUE,
    QUERY_SNAPSHOT,
    QUERY_STATUS,
    UPDATE_DECIDE,
    UPDATE_WAIT,
    DecideInput,
    DecisionRequest,
    RunContextData,
    RunEvent,
    RunItem,
    RunOutput,
    RunSnapshot,
    RunStatus,
    WaitInput,
)

log = logging.getLogger("hitl")


ServeMode = Literal["auto"] | bool


WORKER_GRACE_SECONDS = 10.0
"""How long the first update may wait for a worker before `Runner.run` concludes none runs.

Only used when the server lists pollers (they may be stale): with none at all, `serve="auto"`
serves at once. Loaded workers can take seconds to pick up a task, so this is generous."""


class Runner:
    """Run agents durably on Temporal (the OpenAI Agents SDK's `Runner`, made durable)."""

    @classmethod
    async def run(
        cls,
        starting_agent: Agent[Any],
        input: str | list[dict[str, Any]] | RunState,
        *,
        context: Any = None,
        max_turns: int | None = None,
        run_config: RunConfig | None = None,
        error_handlers: Mapping[str, RunErrorHandler] | None = None,
        client: Client | None = None,
        task_queue: str | None = None,
        workflow_id: str | None = None,
        serve: ServeMode = "auto",
        approver: str | None = None,
        session: str | TemporalSession | None = None,
    ) -> RunResult:
        """Start a run (or resume one from a `RunState`) and return once it finishes or pauses.

        Args:
            starting_agent: The root agent of the run.
            input: A user message, a list of Responses input items, or a `RunState` whose
                decisions to send.
            context: A JSON-serializable object (dict, pydantic model, dataclass) handed to
                tools, predicates and instructions. It is stored in the run's history: no
                secrets.
            max_turns: Model turns before `MaxTurnsExceeded` (default 10).
            run_config: Per-run options.
            error_handlers: `{"max_turns": handler}` (module-level function).
            client: A connected Temporal client; default: envconfig (`TEMPORAL_ADDRESS`, ...),
                falling back to `localhost:7233`.
            task_queue: Queue of the workers serving the agent (default: `HITL_TASK_QUEUE`, else
                `hitl`).
            workflow_id: A business id for the run (e.g. `refund-order-1001`). Starting the same
                id again returns the existing run instead of starting a second one.
            serve: `"auto"`: if no worker polls the task queue, serve the agent in this process
                for the duration of the call. `True`: always serve in-process. `False`: never;
                fail with `NoWorkerError` when no worker polls.
            approver: Recorded as the approver of decisions sent from a `RunState` that do not
                name one (default: the OS user).
            session: A conversation that spans runs (an id or a `TemporalSession`): the run
                starts from its transcript and appends its own turn when it completes.

        Raises:
            MaxTurnsExceeded, ModelBehaviorError, UserError, ...: the run failed (typed).
            DecisionError: a decision in the `RunState` was refused; nothing changed.
            NoWorkerError: no worker serves the task queue and `serve=False`.
        """
        if not isinstance(starting_agent, Agent):
            raise UserError(f"starting_agent must be an Agent, got {type(starting_agent).__name__}")
        client = await connect(client)
        tq = task_queue or (input.task_queue if isinstance(input, RunState) else None)
        tq = tq or os.environ.get("HITL_TASK_QUEUE") or DEFAULT_TASK_QUEUE
        allow = in_process_allow(
            run_config, error_handlers, input.context if isinstance(input, RunState) else context
        )
        async with _Session(client, starting_agent, tq, serve, allow) as sess:
            if isinstance(input, RunState):
                return await _resume(sess, input, approver)
            request = StartRequest.build(
                starting_agent,
                input,
                context=context,
                max_turns=max_turns,
                run_config=run_config,
                error_handlers=error_handlers,
                workflow_id=workflow_id,
                conversation=session,
            )
            return await _start(sess, request)

    @classmethod
    def run_streamed(
        cls,
        starting_agent: Agent[Any],
        input: str | list[dict[str, Any]] | RunState,
        *,
        context: Any = None,
        max_turns: int | None = None,
        run_config: RunConfig | None = None,
        error_handlers: Mapping[str, RunErrorHandler] | None = None,
        client: Client | None = None,
        task_queue: str | None = None,
        workflow_id: str | None = None,
        serve: ServeMode = "auto",
        approver: str | None = None,
        session: str | TemporalSession | None = None,
    ) -> RunResultStreaming:
        """Like `run`, but `await`/`async for` over `result.stream_events()` to follow the run.

        Events arrive while the run works and up to the moment it pauses or finishes; then the
        result's `final_output`, `interruptions` and `to_state()` are available, as for `run`.
        The arguments are `run`'s. A business `workflow_id` whose run has closed streams no
        events: the result is that run's outcome, as `run` returns it.
        """
        if not isinstance(starting_agent, Agent):
            raise UserError(f"starting_agent must be an Agent, got {type(starting_agent).__name__}")
        return RunResultStreaming(
            starting_agent,
            input,
            _Call(
                context=context,
                max_turns=max_turns,
                run_config=run_config,
                error_handlers=error_handlers,
                client=client,
                task_queue=task_queue,
                workflow_id=workflow_id,
                serve=serve,
                approver=approver,
                session=session,
            ),
        )

    @classmethod
    def run_sync(
        cls,
        starting_agent: Agent[Any],
        input: str | list[dict[str, Any]] | RunState,
        **kwargs: Any,
    ) -> RunResult:
        """`Runner.run` for synchronous code (starts and closes its own event loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(cls.run(starting_agent, input, **kwargs))
        raise UserError("run_sync cannot be called from a running event loop; await Runner.run")


class _Session:
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

    async def __aenter__(self) -> _Session:
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
    ) -> RunStatus:
        """Send an update and wait for its result, serving in-process if no worker accepts it."""
        uid = update_id or f"{name}-{uuid.uuid4().hex}"
        handle: WorkflowHandle[Any, Any] = self.client.get_workflow_handle(workflow_id)
        while True:
            grace = None if self.serving else timedelta(seconds=WORKER_GRACE_SECONDS)
            op = start() if start is not None else None
            try:
                if op is not None:
                    uh = await self.client.start_update_with_start_workflow(
                        name,
                        arg,
                        start_workflow_operation=op,
                        id=uid,
                        wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                        result_type=RunStatus,
                        rpc_timeout=grace,
                    )
                else:
                    uh = await handle.start_update(
                        name,
                        arg,
                        id=uid,
                        wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                        result_type=RunStatus,
                        rpc_timeout=grace,
                    )
            except WorkflowUpdateRPCTimeoutOrCancelledError:
                if op is not None:
                    with contextlib.suppress(Exception):
                        await op.workflow_handle()  # consume the operation's timeout error
                # The request is kept by the server; sending it again with the same update id
                # (and, for a start, USE_EXISTING) attaches to it instead of creating another.
                if await self.worker_is_busy(workflow_id):
                    log.info(
                        "workers on task queue %r are busy; still waiting for run %s",
                        self.task_queue,
                        workflow_id,
                    )
                else:
                    await self.no_worker(workflow_id)
                continue
            except WorkflowUpdateFailedError as exc:
                if _refusal_type(exc) != "TooManyWaiters":
                    raise
                # Others hold every waiting slot of the run (the slots left are for decisions):
                # send a decision without waiting, then watch the run by query.
                if name == UPDATE_DECIDE and isinstance(arg, DecideInput) and arg.wait:
                    arg = arg.model_copy(update={"wait": False})
                    uid, start = f"{uid}-nowait", None
                    continue
                return await self.poll_settled(workflow_id)
            except BaseException:
                if op is not None:
                    # The start operation shares the failure (e.g. the id names a closed run):
                    # retrieve it, or asyncio reports a future whose exception nobody read.
                    with contextlib.suppress(BaseException):
                        await op.workflow_handle()
                raise
            result: RunStatus = await uh.result()
            if name == UPDATE_DECIDE and isinstance(arg, DecideInput) and not arg.wait:
                return await self.poll_settled(workflow_id)
            return result

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

        A worker holds the run's workflow task (it is *started*), or the queue's workers keep
        polling, i.e. finish other tasks (a loaded worker stops polling while all its slots are
        taken, so its last poll advances only as it frees them). A dead worker does neither.
        """
        if self.serving:
            return True
        try:
            desc = await self.client.workflow_service.describe_workflow_execution(
                DescribeWorkflowExecutionRequest(
                    namespace=self.client.namespace,
                    execution=WorkflowExecution(workflow_id=workflow_id),
                )
            )
        except RPCError:
            return False
        task = desc.pending_workflow_task
        if desc.HasField("pending_workflow_task") and (
            task.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED
        ):
            return True
        return await pollers_advance(self.client, self.task_queue)


async def _start(session: _Session, request: StartRequest) -> RunResult:
    wid = request.workflow_id
    try:
        status = await session.update(
            wid, UPDATE_WAIT, WaitInput(), start=lambda: request.operation(session.task_queue)
        )
    except WorkflowAlreadyStartedError:
        log.info("run %s already exists and is closed; returning its outcome", wid)
        return await _settle(session, wid, None)
    except WorkflowUpdateFailedError as exc:
        raise _typed(exc) from None
    except RPCError as exc:
        if exc.status == RPCStatusCode.ALREADY_EXISTS:
            return await _settle(session, wid, None)
        raise
    return await _settle(session, wid, status)


async def _resume(session: _Session, state: RunState, approver: str | None) -> RunResult:
    client, agent = session.client, session.agent
    if state.root_agent.name != agent.name:
        raise UserError(
            f"this RunState belongs to agent {state.root_agent.name!r}, not {agent.name!r}"
        )
    handle = client.get_workflow_handle(state.workflow_id)
    decisions = _decisions(state, approver)
    try:
        status = await _send_decisions(session, state.workflow_id, decisions, _state_context(state))
    except WorkflowUpdateFailedError as exc:
        raise _typed(exc) from None
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        desc = await handle.describe()
        if desc.status == WorkflowExecutionStatus.RUNNING:
            raise
        result = await _settle(session, state.workflow_id, None)
        _check_decisions_applied(result, decisions)
        return result
    return await _settle(session, state.workflow_id, status)


def _decisions(state: RunState, approver: str | None) -> list[DecisionRequest]:
    return [
        d if d.approver else d.model_copy(update={"approver": approver or default_approver()})
        for d in state.decisions.values()
    ]


async def _send_decisions(
    session: _Session,
    workflow_id: str,
    decisions: list[DecisionRequest],
    context: RunContextData | None = None,
) -> RunStatus:
    """Send the decisions (and a new context, if any); return once the run settles again."""
    if not decisions and context is None:
        return await session.update(workflow_id, UPDATE_WAIT, WaitInput())
    return await session.update(
        workflow_id,
        UPDATE_DECIDE,
        DecideInput(decisions=decisions, wait=True, context=context),
        update_id=decision_update_id(workflow_id, UPDATE_DECIDE, decisions, context),
    )


def _state_context(state: RunState) -> RunContextData | None:
    """The new context a state was loaded with (`from_string_with_context`), as data."""
    if not state.context_given:
        return None
    value, ctx_type = context_value(state.context, state.context_serializer, strict=True)
    return RunContextData(value=value, type=ctx_type)


def _check_decisions_applied(result: RunResult, decisions: list[DecisionRequest]) -> None:
    recorded = {d.call_id: d for d in result.decisions}
    for d in decisions:
        prior = recorded.get(d.call_id)
        if prior is None or not prior.answers(d.kind, d):
            what = f"{prior.kind} by {prior.approver or prior.source}" if prior else "not decided"
            raise AlreadyDecidedError(
                f"run {result.workflow_id} finished before this decision arrived; "
                f"call '{d.call_id}' was {what}"
            )


async def _settle(session: _Session, workflow_id: str, status: RunStatus | None) -> RunResult:
    """Turn a settled run into a `RunResult` (or raise its typed failure)."""
    agent, task_queue = session.agent, session.task_queue
    handle: WorkflowHandle[Any, Any] = session.client.get_workflow_handle(
        workflow_id, result_type=RunOutput
    )
    for _ in range(1000):
        if status is None or status.continued_as_new or status.phase in ("starting", "running"):
            try:
                status = await session.update(workflow_id, UPDATE_WAIT, WaitInput())
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
                return await _closed_result(handle, agent, task_queue)
            continue
        if status.phase == "completed":
            return await _closed_result(handle, agent, task_queue)
        if status.phase == "failed":
            err = status.error
            if err is None:
                raise RunFailedError(f"run {workflow_id} failed")
            raise from_failure(err.type, err.message, err.details)
        snap: RunSnapshot = await handle.query(QUERY_SNAPSHOT, result_type=RunSnapshot)
        if snap.status.phase != "awaiting_approval":
            status = snap.status
            continue
        return _paused_result(snap, agent, task_queue)
    raise RunFailedError(f"run {workflow_id} did not settle")


async def _closed_result(
    handle: WorkflowHandle[Any, Any], agent: Agent[Any], task_queue: str
) -> RunResult:
    try:
        out: RunOutput = await handle.result()
    except WorkflowFailureError as exc:
        raise _typed(exc) from None
    last = resolve_agent(agent, out.last_agent, out.last_agent_name)
    desc_run_id = out.run_id or handle.run_id or ""
    status = RunStatus(
        workflow_id=handle.id,
        run_id=desc_run_id,
        phase="completed",
        agent=agent.name,
        current_agent=out.last_agent,
        current_agent_name=out.last_agent_name,
        turn=out.turns,
        decisions=out.decisions,
        usage=out.usage,
        items=len(out.input_items) + len(out.new_items),
        final_output=out.final_output,
    )
    return RunResult(
        final_output=typed_final_output(last, out.final_output),
        interruptions=[],
        new_items=out.new_items,
        input=out.input_items,
        last_agent=last,
        workflow_id=handle.id,
        run_id=desc_run_id,
        usage=out.usage,
        decisions=out.decisions,
        status=status,
        root_agent=agent,
        task_queue=task_queue,
    )


def _paused_result(snap: RunSnapshot, agent: Agent[Any], task_queue: str) -> RunResult:
    st = snap.status
    last = resolve_agent(agent, st.current_agent or agent.name, st.current_agent_name or "")
    return RunResult(
        final_output=None,
        interruptions=items_from_pending(st.pending, agent, st.workflow_id),
        new_items=snap.new_items,
        input=snap.input_items,
        last_agent=last,
        workflow_id=st.workflow_id,
        run_id=st.run_id,
        usage=st.usage,
        decisions=st.decisions,
        status=st,
        root_agent=agent,
        task_queue=task_queue,
    )


def _refusal_type(exc: WorkflowUpdateFailedError) -> str | None:
    cause = exc.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def _typed(exc: BaseException) -> AgentsException:
    """The `hitl` exception for a Temporal failure (update refused, run failed)."""
    cause: BaseException | None = exc.cause if hasattr(exc, "cause") else exc.__cause__
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = getattr(cause, "cause", None)
    if isinstance(cause, ApplicationError):
        details = cause.details[0] if cause.details else None
        typed = from_failure(cause.type, cause.message, details)
        if isinstance(exc, WorkflowUpdateFailedError) and not isinstance(typed, DecisionError):
            return DecisionError(cause.message, details={"type": cause.type})
        return typed
    return RunFailedError(str(exc))


@dataclasses.dataclass
class _Call:
    """The keyword arguments of `Runner.run` (and `run_streamed`)."""

    context: Any = None
    max_turns: int | None = None
    run_config: RunConfig | None = None
    error_handlers: Mapping[str, RunErrorHandler] | None = None
    client: Client | None = None
    task_queue: str | None = None
    workflow_id: str | None = None
    serve: ServeMode = "auto"
    approver: str | None = None
    session: str | TemporalSession | None = None


class RunResultStreaming:
    """A run being followed: iterate `stream_events()`, then read the result like `RunResult`.

    The events are the run's `RunEvent`s (see `hitl.stream`), each with its stream offset.
    """

    def __init__(
        self,
        starting_agent: Agent[Any],
        input: str | list[dict[str, Any]] | RunState,
        call: _Call,
    ) -> None:
        self._agent = starting_agent
        self._input = input
        self._call = call
        self._result: RunResult | None = None
        self.workflow_id: str | None = None
        self.last_offset: int | None = None

    async def stream_events(self) -> AsyncIterator[RunEvent]:
        """Start (or resume) the run and yield its events until it pauses or finishes."""
        call = self._call
        client = await connect(call.client)
        state = self._input if isinstance(self._input, RunState) else None
        tq = call.task_queue or (state.task_queue if state else None)
        tq = tq or os.environ.get("HITL_TASK_QUEUE") or DEFAULT_TASK_QUEUE
        allow = in_process_allow(
            call.run_config, call.error_handlers, state.context if state else call.context
        )
        async with _Session(client, self._agent, tq, call.serve, allow) as sess:
            if state is not None:
                wid = state.workflow_id
                offset = await current_offset(client, wid)
                decisions = _decisions(state, call.approver)
                settled = asyncio.create_task(
                    _send_decisions(sess, wid, decisions, _state_context(state))
                )
            else:
                request = StartRequest.build(
                    self._agent,
                    self._input,
                    context=call.context,
                    max_turns=call.max_turns,
                    run_config=call.run_config,
                    error_handlers=call.error_handlers,
                    workflow_id=call.workflow_id,
                    conversation=call.session,
                )
                request.run_input.run_config.stream_text_deltas = True
                wid, offset = request.workflow_id, 0
                try:
                    await request.start(client, tq)
                except WorkflowAlreadyStartedError:
                    log.info("run %s already exists and is closed; returning its outcome", wid)
                    self.workflow_id = wid
                    self._result = await _settle(sess, wid, None)
                    return
                settled = asyncio.create_task(sess.update(wid, UPDATE_WAIT, WaitInput()))
            self.workflow_id = wid
            try:
                async for event in events_until_settled(client, wid, settled, from_offset=offset):
                    self.last_offset = event.offset
                    yield event
                status = await settled
            except WorkflowUpdateFailedError as exc:
                raise _typed(exc) from None
            finally:
                if not settled.done():
                    settled.cancel()
            self._result = await _settle(sess, wid, status)

    def _done(self) -> RunResult:
        if self._result is None:
            raise UserError("iterate stream_events() until it ends before reading the result")
        return self._result

    @property
    def final_output(self) -> Any:
        """See `RunResult.final_output`."""
        return self._done().final_output

    @property
    def interruptions(self) -> list[ToolApprovalItem]:
        """See `RunResult.interruptions`."""
        return self._done().interruptions

    @property
    def new_items(self) -> list[RunItem]:
        """See `RunResult.new_items`."""
        return self._done().new_items

    def to_state(self) -> RunState:
        """See `RunResult.to_state`."""
        return self._done().to_state()

    def to_input_list(self) -> list[dict[str, Any]]:
        """See `RunResult.to_input_list`."""
        return self._done().to_input_list()

    @property
    def result(self) -> RunResult:
        """The settled `RunResult`."""
        return self._done()
