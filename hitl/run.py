"""`Runner`: start a durable run, or resume one from a `RunState`, and wait until it settles."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeAlias

from temporalio.client import (
    Client,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import WorkflowAlreadyStartedError

from hitl._user_code import call_user
from hitl.agent import Agent
from hitl.client import connect
from hitl.client_tools import answer_client_calls
from hitl.connection import RunnerConnection, ServeMode
from hitl.errors import (
    UserError,
)
from hitl.items import BadInput, normalize_input
from hitl.limits import conversation_problem
from hitl.memory import Session
from hitl.result import RunResult
from hitl.run_config import RunConfig, RunErrorHandler
from hitl.sdk_events import SdkEvents, StreamEvent
from hitl.serving import in_process_allow
from hitl.session import SessionArg, TemporalSession, client_session, read_history, write_turn
from hitl.settling import (
    _answers,
    _decisions,
    _resume,
    _send_decisions,
    _settle,
    _start,
    _state_context,
    _typed,
)
from hitl.starting import (
    StartRequest,
)
from hitl.state import RunState, ToolApprovalItem
from hitl.stream import current_offset, events_until_settled
from hitl.wire import (
    DEFAULT_TASK_QUEUE,
    UPDATE_WAIT,
    RunEvent,
    RunItem,
    SettledStatus,
    WaitInput,
)

log = logging.getLogger("hitl")

_Input: TypeAlias = str | list[dict[str, Any]] | RunState
"""What a run starts from (a message or input items), or the state it resumes."""


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
        session: SessionArg | None = None,
        previous_response_id: str | None = None,
        auto_previous_response_id: bool = False,
        conversation_id: str | None = None,
    ) -> RunResult:
        """Start a run (or resume one from a `RunState`) and return once it finishes or pauses.

        Args:
            starting_agent: The root agent of the run.
            input: A user message, a list of Responses input items, or a `RunState` whose
                decisions to send.
            context: A JSON-serializable object (dict, pydantic model, dataclass) for tools,
                predicates and instructions, stored in the run's history (no secrets).
            max_turns: Model turns before `MaxTurnsExceeded` (default 10).
            run_config: Per-run options.
            error_handlers: `{"max_turns": handler}` (module-level function).
            client: A connected Temporal client; default: envconfig (`TEMPORAL_ADDRESS`, ...),
                falling back to `localhost:7233`.
            task_queue: The agent's workers' queue (default: `HITL_TASK_QUEUE`, else `hitl`).
            workflow_id: A business id for the run (e.g. `refund-order-1001`). Starting the same
                id again returns the existing run instead of starting a second one.
            serve: `"auto"`: if no worker polls the task queue, serve the agent in this process
                for the duration of the call. `True`: always serve in-process. `False`: never;
                fail with `NoWorkerError` when no worker polls.
            approver: Approver of a `RunState`'s decisions that name none (default: the OS user).
            session: A conversation that spans runs: an id or a `TemporalSession` (kept in
                Temporal), or a client-managed session such as `SQLiteSession` (any object
                with the SDK's session methods). The run starts from its items (a client-managed
                one is read here) and its turn is appended when it completes, by the client that
                reads the result (this call, or the `Runner.run(agent, state, ...)` resuming it).
            previous_response_id: Continue the provider's conversation from this response
                (an earlier run's `result.last_response_id`; OpenAI Responses API): `input`
                is only the new user turn, and each model call sends only what is new.
            auto_previous_response_id: Chain the run's model calls by response id even
                without a `previous_response_id` (the first call sends `input` whole).
            conversation_id: Read and write this OpenAI conversation (Conversations API):
                `input` is only the new user turn, and each model call sends only what it lacks.
                Exclusive with `previous_response_id`; none of the three goes with `session`. A
                resumed run keeps the settings it started with.

        Raises:
            MaxTurnsExceeded, ModelBehaviorError, UserError, ...: the run failed (typed).
            DecisionError: a decision in the `RunState` was refused; nothing changed.
            NoWorkerError: no worker serves the task queue and `serve=False`.
        """
        return await _run(starting_agent, input, _Call.of(locals()))

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
        session: SessionArg | None = None,
        previous_response_id: str | None = None,
        auto_previous_response_id: bool = False,
        conversation_id: str | None = None,
    ) -> RunResultStreaming:
        """Like `run`, but `await`/`async for` over `result.stream_events()` to follow the run.

        Events arrive while the run works and up to the moment it pauses or finishes; then the
        result's `final_output`, `interruptions` and `to_state()` are available, as for `run`.
        The arguments are `run`'s. A business `workflow_id` whose run has closed streams no
        events: the result is that run's outcome, as `run` returns it.
        """
        _check_agent(starting_agent)
        return RunResultStreaming(
            starting_agent,
            input,
            _Call.of(locals()),
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


async def _run(agent: Agent[Any], input: _Input, call: _Call) -> RunResult:
    """`Runner.run`: start a run, or send a state's decisions, and wait until it settles."""
    _check_agent(agent)
    _check_conversation(input, call)
    session = client_session(call.session)
    history = await read_history(session) if session and not isinstance(input, RunState) else None
    history = await session_input(call, input, history)
    async with await _connection(agent, input, call) as conn:
        if isinstance(input, RunState):
            result = await _resume(conn, input, call.approver)
        else:
            result = await _start(conn, _start_request(agent, input, call, history))
        while (state := await answer_client_calls(agent, result, call.approver)) is not None:
            result = await _resume(conn, state, call.approver)
    return await _known_session(_known_context(result, input, call), input, history, session)


async def _known_session(
    result: RunResult,
    input: _Input,
    history: list[dict[str, Any]] | None,
    session: Session | None,
) -> RunResult:
    """`result`, knowing which of its input items came from a client-managed session.

    The count goes on with `to_state()`; a completed run's turn is written to `session` here.
    """
    if isinstance(input, RunState):
        result.session_history = input.session_history
        if session is not None and result.session_history is None:
            result.session_history = 0  # a run started without it: its whole transcript
    elif history is not None:
        result.session_history = len(history)
    if session is not None:
        await write_turn(session, result)
    return result


def _known_context(result: RunResult, input: _Input, call: _Call) -> RunResult:
    """`result`, knowing the context this client gave the run (for `to_state()`)."""
    if isinstance(input, RunState):
        result.context, result.context_serializer = input.context, input.context_serializer
    else:
        result.context = call.context
        result.context_serializer = call.run_config.context_serializer if call.run_config else None
    return result


def _check_agent(agent: Any) -> None:
    if not isinstance(agent, Agent):
        raise UserError(f"starting_agent must be an Agent, got {type(agent).__name__}")


def _check_conversation(input: _Input, call: _Call) -> None:
    """Refuse server-managed conversation settings that cannot go together (`UserError`)."""
    problem = conversation_problem(
        call.previous_response_id,
        call.conversation_id,
        call.session,
        call.auto_previous_response_id,
    )
    if problem is not None:
        raise UserError(problem)
    given = call.previous_response_id or call.conversation_id or call.auto_previous_response_id
    if isinstance(input, RunState) and given:
        log.info(
            "run %s keeps the conversation settings it started with; the ones given to "
            "resume it are not used",
            input.workflow_id,
        )


async def _connection(agent: Agent[Any], input: _Input, call: _Call) -> RunnerConnection:
    """The call's line to the cluster, on its task queue (else the state's, else the default)."""
    state = input if isinstance(input, RunState) else None
    client = await connect(call.client)
    queue = call.task_queue or (state.task_queue if state else None)
    queue = queue or os.environ.get("HITL_TASK_QUEUE") or DEFAULT_TASK_QUEUE
    allow = in_process_allow(
        call.run_config, call.error_handlers, state.context if state else call.context
    )
    return RunnerConnection(client, agent, queue, call.serve, allow)


async def session_input(
    call: _Call, input: _Input, history: list[dict[str, Any]] | None
) -> list[dict[str, Any]] | None:
    """The session's items the run starts from, after `RunConfig.session_input_callback`.

    The callback gets the history and the new items and returns the run's whole input, which
    must end with the new items: what precedes them is the history the run keeps.
    """
    callback = call.run_config.session_input_callback if call.run_config else None
    if callback is None or history is None or isinstance(input, RunState):
        return history
    try:
        new = normalize_input(input)
    except BadInput as exc:
        raise UserError(str(exc)) from None
    merged = await call_user(callback, list(history), list(new), what="session_input_callback")
    if not isinstance(merged, list) or not all(isinstance(i, dict) for i in merged):
        raise UserError("session_input_callback must return a list of input items")
    if len(merged) < len(new) or merged[len(merged) - len(new) :] != new:
        raise UserError(
            "session_input_callback must keep the new input items, last (the turn written "
            "back to the session is what follows the history it keeps)"
        )
    return merged[: len(merged) - len(new)]


def _start_request(
    agent: Agent[Any],
    input: str | list[dict[str, Any]],
    call: _Call,
    history: list[dict[str, Any]] | None = None,
) -> StartRequest:
    """What starting a run of `agent` on `input` sends (the same for `run` and `run_streamed`).

    `history`: a client-managed session's items, read before.
    """
    session = call.session
    return StartRequest.build(
        agent,
        input,
        context=call.context,
        max_turns=call.max_turns,
        run_config=call.run_config,
        error_handlers=call.error_handlers,
        workflow_id=call.workflow_id,
        conversation=session if isinstance(session, str | TemporalSession) else None,
        history=history,
        previous_response_id=call.previous_response_id,
        auto_previous_response_id=call.auto_previous_response_id,
        conversation_id=call.conversation_id,
    )


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
    session: SessionArg | None = None
    previous_response_id: str | None = None
    auto_previous_response_id: bool = False
    conversation_id: str | None = None

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> _Call:
        """The options out of `Runner.run`'s `locals()`: each is named once, in its signature."""
        return cls(**{f.name: arguments[f.name] for f in dataclasses.fields(cls)})


class RunResultStreaming:
    """A run being followed: iterate `stream_events()`, then read the result like `RunResult`.

    `stream_events()` yields the OpenAI Agents SDK's stream events (`hitl.sdk_events`), so
    SDK streaming code runs unchanged; `run_events()` yields instead every `RunEvent` the run
    publishes (`hitl.stream`: approvals requested and decided, pauses, deadlines), each with
    its stream offset. Iterate one of them, once.
    """

    def __init__(self, starting_agent: Agent[Any], input: _Input, call: _Call) -> None:
        self._agent = starting_agent
        self._input = input
        self._call = call
        self._result: RunResult | None = None
        self.workflow_id: str | None = None
        self.last_offset: int | None = None

    async def stream_events(self) -> AsyncIterator[StreamEvent]:
        """Start (or resume) the run and yield the SDK's stream events until it settles.

        `RawResponsesStreamEvent` (text deltas), `RunItemStreamEvent` (items, with the SDK's
        names) and `AgentUpdatedStreamEvent`, until the run pauses or finishes.
        """
        sdk = SdkEvents(self._agent)
        async for event in self.run_events():
            for out in sdk.translate(event):
                yield out

    async def run_events(self) -> AsyncIterator[RunEvent]:
        """Start (or resume) the run and yield its `RunEvent`s until it pauses or finishes."""
        call, input = self._call, self._input
        _check_conversation(input, call)
        session = client_session(call.session)
        history = (
            await read_history(session) if session and not isinstance(input, RunState) else None
        )
        history = await session_input(call, input, history)
        async with await _connection(self._agent, input, call) as sess:
            client, known = sess.client, None
            if isinstance(input, RunState):
                wid, known = input.workflow_id, input._transcript
                offset = await current_offset(client, wid)
                decisions = _decisions(input, call.approver)
                settled = asyncio.create_task(
                    _send_decisions(
                        sess,
                        wid,
                        decisions,
                        _state_context(input),
                        _answers(input, call.approver),
                        known,
                    )
                )
            else:
                request = _start_request(self._agent, input, call, history)
                request.run_input.run_config.stream_text_deltas = True
                wid, offset = request.workflow_id, 0
                try:
                    await request.start(client, sess.task_queue)
                except WorkflowAlreadyStartedError:
                    log.info("run %s already exists and is closed; returning its outcome", wid)
                    self.workflow_id = wid
                    result = _known_context(await _settle(sess, wid, None), input, call)
                    self._result = await _known_session(result, input, history, session)
                    return
                settled = asyncio.create_task(
                    sess.update(wid, UPDATE_WAIT, WaitInput(items=True), result_type=SettledStatus)
                )
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
            result = _known_context(await _settle(sess, wid, status, known), input, call)
            self._result = await _known_session(result, input, history, session)

    def _done(self) -> RunResult:
        if self._result is None:
            raise UserError(
                "iterate stream_events() (or run_events()) until it ends before reading the result"
            )
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
    def last_response_id(self) -> str | None:
        """See `RunResult.last_response_id`."""
        return self._done().last_response_id

    @property
    def result(self) -> RunResult:
        """The settled `RunResult`."""
        return self._done()
