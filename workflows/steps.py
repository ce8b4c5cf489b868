"""Activity plumbing for `AgentRun`.

Every model call, tool call and hook, with its timeouts, retry policy and the typed failure it
turns into.

User code (predicates, guardrails, filters, formatters, tools) only ever runs in these
activities. Failures that a person must fix become `RunFailure`s (the run fails with a typed
reason); a tool's failure becomes text the model sees.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
)
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from hitl.items import REJECTION_MESSAGE, model_input
    from hitl.limits import MODEL_INPUT_INLINE_BYTES
    from hitl.wire import (
        ACT_CALL_MODEL,
        ACT_EXECUTE_TOOL,
        ACT_FILTER_HANDOFF,
        ACT_HANDLE_RUN_ERROR,
        ACT_LOAD_SESSION,
        ACT_PLAN_TOOLS,
        ACT_READ_RUN,
        ACT_REJECTION_TEXT,
        ACT_RESOLVE_AGENT,
        ACT_RUN_GUARDRAILS,
        ACT_SAVE_SESSION,
        AGENT_NOT_SERVED,
        AgentSpec,
        CallModelInput,
        CallRecord,
        CarriedState,
        ExecuteToolInput,
        GuardrailsInput,
        GuardrailsOutput,
        HandleRunErrorInput,
        HandleRunErrorOutput,
        HandoffFilterInput,
        HandoffFilterOutput,
        ModelResponse,
        PlanCall,
        PlanRequest,
        PlanToolsInput,
        PlanToolsOutput,
        ReadRunInput,
        ReadRunOutput,
        RejectionTextInput,
        RejectionTextOutput,
        ResolveAgentInput,
        ResolvedRun,
        RunInput,
        SessionAppend,
        SessionItems,
        SessionRef,
        ToolOutput,
        ToolSpec,
        TranscriptRef,
        agent_definition,
        definition_digest,
        model_tools,
    )
    from hitl.workflows.failures import failure_from_activity, tool_failure
    from hitl.workflows.inputs import fits

Out = TypeVar("Out", bound=BaseModel)

# Errors a model call must not retry: they need a change by a person, not another attempt.
MODEL_NON_RETRYABLE = ["ModelBehaviorError", "ModelProviderError", "UserError", "PayloadsTooLarge"]
TOOL_NON_RETRYABLE = ["ToolArgumentsInvalid", "ToolNotFound", "PayloadsTooLarge"]
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=8,
    non_retryable_error_types=MODEL_NON_RETRYABLE,
)
LOCAL_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=5,
    non_retryable_error_types=["UserError", "ModelBehaviorError"],
)
READ_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=10,
)
QUIET_REJECTION_PATCH = "hitl-rejection-runs-no-tool"
"""Runs before it called every `UserAction` tool on rejection; later ones only those that
declare `called_on_rejection`."""
MODEL_TIMEOUT = timedelta(seconds=180)
MODEL_HEARTBEAT = timedelta(seconds=30)
"""A regular model activity heartbeats (`activities.heartbeat`): one lost with its worker is
asked again on another after this, not after `MODEL_TIMEOUT` (50 runs stalled 140 s behind a
killed worker: `tests/e2e/test_policy_limit_runs.py`)."""
LOCAL_TIMEOUT = timedelta(seconds=30)

# Local activities fail with the activity's own error (not wrapped in an ActivityError).
ACTIVITY_FAILURES = (ActivityError, ApplicationError, TemporalTimeoutError)


def _server(agent: AgentSpec, tool_name: str) -> str | None:
    tool = agent.tool(tool_name)
    return tool.mcp_server if tool is not None else None


class Steps:
    """The activities of one run. `busy` counts those running (the run is then not parked)."""

    def __init__(self, inp: RunInput, state: CarriedState) -> None:
        self.inp = inp
        self.state = state
        self.busy = 0
        self.agent_sent = False
        """A model call named the pinned graph and its worker did not serve it: this run's
        model calls carry the agent's definition from then on."""

    async def local(
        self,
        name: str,
        arg: BaseModel,
        result_type: type[Out],
        what: str,
        *,
        busy: bool = True,
        timeout: timedelta = LOCAL_TIMEOUT,
    ) -> Out:
        """Run a local activity (user code: predicates, guardrails, hooks); failures are typed.

        While it runs the run counts as busy, so it never reports waiting for a person.
        """
        if busy:
            self.busy += 1
        try:
            result: Out = await workflow.execute_local_activity(
                name,
                arg,
                result_type=result_type,
                start_to_close_timeout=timeout,
                retry_policy=LOCAL_RETRY,
            )
        except ACTIVITY_FAILURES as err:
            raise failure_from_activity(err, what) from None
        finally:
            if busy:
                self.busy -= 1
        return result

    # ----------------------------------------------------------------- run start

    async def resolve(self) -> ResolvedRun:
        """Pin the run to its agent graph (and check what its config names)."""
        return await self.local(
            ACT_RESOLVE_AGENT,
            ResolveAgentInput(agent=self.inp.agent, run_config=self.inp.run_config),
            ResolvedRun,
            "resolving the agent",
            busy=False,
        )

    async def load_session(self) -> list[dict[str, Any]]:
        """The transcript of the run's session."""
        assert self.inp.session is not None
        items = await self.local(
            ACT_LOAD_SESSION,
            SessionRef(session_id=self.inp.session, task_queue=workflow.info().task_queue),
            SessionItems,
            "loading the session",
            busy=False,
        )
        return items.items

    async def save_session(self) -> None:
        """Append this run's turn to its session (once, even if the activity is retried)."""
        assert self.inp.session is not None
        turn = model_input(self.state.own_input, self.state.new_items)
        await workflow.execute_activity(
            ACT_SAVE_SESSION,
            SessionRef(
                session_id=self.inp.session,
                task_queue=workflow.info().task_queue,
                append=SessionAppend(run_id=workflow.info().workflow_id, items=turn),
            ),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
        )

    # ----------------------------------------------------------------- model

    async def call_model(self, agent: AgentSpec, plan: PlanRequest | None = None) -> ModelResponse:
        """Ask the agent's model for the next step (and plan its calls to `plan.tools`)."""
        transcript = model_input(self.state.input_items, self.state.new_items)
        server = self._provider_keeps_conversation(agent)
        since = self._held_by_provider(agent, len(transcript)) if server else 0
        inp = self._model_input(agent, plan, since, server)
        # The activity outlives the client's own timeout (the model's, or the worker default).
        timeout = MODEL_TIMEOUT
        if agent.model.timeout_seconds is not None:
            timeout = max(MODEL_TIMEOUT, timedelta(seconds=agent.model.timeout_seconds + 60))
        self.busy += 1
        try:
            response = await self._model_activity(agent, inp, transcript, since, timeout)
        except ACTIVITY_FAILURES as err:
            raise failure_from_activity(err, "the model call") from None
        finally:
            self.busy -= 1
        s = self.state
        if response.response_id and _responses_api(agent):
            s.last_response_id = response.response_id
        if server and response.response_id:
            # The provider now holds this transcript and the response's output.
            if s.conversation_id is None:
                s.response_id = response.response_id
            s.response_items = len(transcript)
            s.response_agent = agent.id
        if response.chain_restarted:
            s.chains_restarted += 1
            workflow.logger.warning(
                "the provider no longer had the previous response: the whole transcript "
                "(%d items) was sent and response %s starts a new chain",
                len(transcript),
                response.response_id,
            )
        return response

    def _provider_keeps_conversation(self, agent: AgentSpec) -> bool:
        """Whether model calls send only what is new since the previous response."""
        if not _responses_api(agent):
            return False
        if self.state.provider_history:
            return True  # the run continues a conversation the provider holds
        cfg = self.inp.run_config
        return cfg.auto_previous_response_id and not cfg.call_model_input_filter

    def _held_by_provider(self, agent: AgentSpec, items: int) -> int:
        """How many transcript items the provider holds for this agent's conversation (0: none).

        A run that continues the provider's conversation continues it whoever the agent is;
        a run whose chain began inside it starts a new one at a handoff (`auto_previous_...`).
        """
        s = self.state
        if s.provider_history:
            return min(s.response_items, items)
        if s.response_id and s.response_agent == agent.id and s.response_items <= items:
            return s.response_items
        return 0

    def _previous_response(self, since: int) -> str | None:
        """The response this call continues (`None`: none, or the run is in a conversation)."""
        s = self.state
        if s.conversation_id is not None:
            return None
        if since or s.provider_history:
            return s.response_id
        return None

    def _model_input(
        self, agent: AgentSpec, plan: PlanRequest | None, since: int, server: bool = False
    ) -> CallModelInput:
        """The model activity's input, without the transcript (see `_model_activity`)."""
        cfg = self.inp.run_config
        return CallModelInput(
            root_agent=self.inp.agent,
            agent_id=agent.id,
            agent_name=agent.name,
            model=agent.model,
            settings=agent.model_settings.merged_with(cfg.model_settings),
            instructions=agent.instructions,
            dynamic_instructions=agent.dynamic_instructions,
            tools=model_tools(agent),
            output_schema=agent.output_schema,
            output_type_name=agent.output_type_name,
            context=self.state.context,
            turn=self.state.turn,
            max_argument_bytes=cfg.max_tool_argument_bytes,
            stream=cfg.stream_text_deltas and agent.model.provider != "scripted",
            input_filter=cfg.call_model_input_filter,
            previous_response_id=self._previous_response(since),
            conversation_id=self.state.conversation_id if server else None,
            resend_when_lost=not self.state.provider_history,
            since=since,
            plan=plan,
        )

    async def _model_activity(
        self,
        agent: AgentSpec,
        inp: CallModelInput,
        transcript: list[dict[str, Any]],
        since: int,
        timeout: timedelta,
    ) -> ModelResponse:
        """Run the model call: a local activity (instant models) or a regular one."""
        if agent.model.local_activity:
            # Local activity inputs are not stored in history: pass the transcript.
            inp.transcript = transcript
            local: ModelResponse = await workflow.execute_local_activity(
                ACT_CALL_MODEL,
                inp,
                result_type=ModelResponse,
                start_to_close_timeout=timeout,
                retry_policy=MODEL_RETRY,
            )
            return local
        if fits(transcript, MODEL_INPUT_INLINE_BYTES):
            inp.transcript = transcript  # a short run: no query from the activity
        else:
            # Keep history linear in turns: the activity reads the transcript by query instead
            # of receiving the whole conversation on every call.
            info = workflow.info()
            inp.transcript_ref = TranscriptRef(
                workflow_id=info.workflow_id, run_id=info.run_id, end=len(transcript), start=since
            )
        short = inp if self.agent_sent or self.inp.run_config.model else by_reference(inp, agent)
        if short is not inp:
            try:
                return await self._model_regular(agent, short, timeout)
            except ActivityError as err:
                if not _agent_not_served(err):
                    raise
                # The model's worker serves another version of this graph (a deploy since the
                # run started, or a model task queue with other agents): send the definition.
                self.agent_sent = True
        return await self._model_regular(agent, inp, timeout)

    async def _model_regular(
        self, agent: AgentSpec, inp: CallModelInput, timeout: timedelta
    ) -> ModelResponse:
        response: ModelResponse = await workflow.execute_activity(
            ACT_CALL_MODEL,
            inp,
            result_type=ModelResponse,
            start_to_close_timeout=timeout,
            heartbeat_timeout=MODEL_HEARTBEAT,
            retry_policy=MODEL_RETRY,
            summary=f"{agent.name}: {agent.model.name}",
            task_queue=self.inp.run_config.model_task_queue,  # None: the run's own queue
        )
        return response

    # ----------------------------------------------------------------- tools

    async def plan(
        self,
        agent: AgentSpec,
        recs: list[CallRecord],
        skip_policy: list[str],
        *,
        busy: bool = True,
        reserve_as: str | None = None,
    ) -> PlanToolsOutput:
        """Evaluate predicates, render approval requests, consult approver callbacks.

        `reserve_as`: an edit's own id for its limit reservations (`PlanCall.reserve_as`).
        """
        cfg = self.inp.run_config
        return await self.local(
            ACT_PLAN_TOOLS,
            PlanToolsInput(
                root_agent=self.inp.agent,
                agent_id=agent.id,
                calls=[
                    PlanCall(
                        call_id=r.model_id,  # user code sees the model's ids, as when planned
                        # with the model call; the plans come back in this order
                        tool_name=r.tool_name,
                        arguments=r.arguments,
                        mcp_server=_server(agent, r.tool_name),
                        reserve_as=reserve_as,
                    )
                    for r in recs
                ],
                context=self.state.context,
                workflow_id=workflow.info().workflow_id,
                run_approver=cfg.approver,
                skip_policy=skip_policy,
                pre_approval_guardrails=cfg.pre_approval_tool_input_guardrails,
                policy=self.state.policy,
                categories=(
                    {t.name: list(t.categories) for t in agent.tools if t.categories}
                    if self.state.policy is not None
                    else {}
                ),
            ),
            PlanToolsOutput,
            "planning tool calls",
            busy=busy,
        )

    async def execute_tool(self, agent: AgentSpec, rec: CallRecord, tool: ToolSpec) -> ToolOutput:
        """Run one approved (or approval-free) call; a failure becomes text for the model."""
        # Without `workflow_id` and `idempotency_key`: the activity knows its run, and the key
        # is that run's default (`ExecuteToolInput.located`).
        inp = ExecuteToolInput(
            root_agent=self.inp.agent,
            agent_id=agent.id,
            tool_name=rec.tool_name,
            call_id=rec.call_id,
            model_call_id=rec.model_call_id,
            arguments=rec.arguments,
            context=self.state.context,
            decision=rec.decision,
            max_output_bytes=self.inp.run_config.max_tool_output_bytes,
            answers=rec.answers,
            mcp_server=tool.mcp_server,
        )
        try:
            out = await self._tool_activity(inp, tool)
        except ActivityError as err:
            return tool_failure(err, rec, tool)
        if out.context is not None and self.state.context is not None:
            # The tool changed the run context: later activities see the new value.
            self.state.context = self.state.context.model_copy(update={"value": out.context.value})
        return out

    async def _tool_activity(self, inp: ExecuteToolInput, tool: ToolSpec) -> ToolOutput:
        """Run `execute_tool`: a regular activity, or a local one for tools that opted in."""
        timeout = timedelta(seconds=tool.timeout_seconds)
        retry = RetryPolicy(
            # A tool that is not safe to retry gets one attempt: a second one is a person's
            # call (see `Uncertain`).
            maximum_attempts=tool.max_attempts if tool.retry_safe else 1,
            non_retryable_error_types=TOOL_NON_RETRYABLE,
        )
        if tool.local_activity:
            # Runs inside this workflow task, on this worker (`FunctionTool` allows it only for
            # retry-safe tools).
            local: ToolOutput = await workflow.execute_local_activity(
                ACT_EXECUTE_TOOL,
                inp,
                result_type=ToolOutput,
                start_to_close_timeout=timeout,
                retry_policy=retry,
                # The marker keeps neither input nor call id: the summary names the call, so an
                # audit (`hitl verify`) can tell which call a marker ran.
                summary=f"{inp.tool_name} {inp.call_id}",
            )
            return local
        heartbeat = tool.heartbeat_timeout_seconds
        out: ToolOutput = await workflow.execute_activity(
            ACT_EXECUTE_TOOL,
            inp,
            result_type=ToolOutput,
            start_to_close_timeout=timeout,
            heartbeat_timeout=timedelta(seconds=heartbeat) if heartbeat else None,
            retry_policy=retry,
            summary=inp.tool_name,
            task_queue=self.inp.run_config.tool_task_queue,  # None: the run's own
        )
        return out

    async def rejection_text(self, agent: AgentSpec, rec: CallRecord, tool: ToolSpec) -> str:
        """What the model sees for a call rejected without a message."""
        formatter = self.inp.run_config.tool_error_formatter
        asks_tool = tool.user_action and (
            tool.called_on_rejection or not workflow.patched(QUIET_REJECTION_PATCH)
        )
        if not formatter and not asks_tool:
            return REJECTION_MESSAGE
        try:
            out: RejectionTextOutput = await workflow.execute_local_activity(
                ACT_REJECTION_TEXT,
                RejectionTextInput(
                    root_agent=self.inp.agent,
                    agent_id=agent.id,
                    tool_name=rec.tool_name,
                    call_id=rec.call_id,
                    arguments=rec.arguments,
                    formatter=formatter,
                    default_message=REJECTION_MESSAGE,
                    context=self.state.context,
                    decision=rec.decision,
                    workflow_id=workflow.info().workflow_id,
                    mcp_server=tool.mcp_server,
                ),
                result_type=RejectionTextOutput,
                start_to_close_timeout=LOCAL_TIMEOUT,
                retry_policy=LOCAL_RETRY,
            )
        except ACTIVITY_FAILURES:
            workflow.logger.warning("rejection text for %s failed; using the default", rec.call_id)
            return REJECTION_MESSAGE
        return out.message or REJECTION_MESSAGE

    # ----------------------------------------------------------------- hooks

    async def guardrails(
        self, kind: str, agent: AgentSpec, run_level: list[str], subject: Any, final: Any
    ) -> GuardrailsOutput:
        """Run an agent's (and the run's) input or output guardrails."""
        return await self.local(
            ACT_RUN_GUARDRAILS,
            GuardrailsInput(
                kind="input" if kind == "input" else "output",
                root_agent=self.inp.agent,
                agent_id=agent.id,
                run_guardrails=run_level,
                input=subject if isinstance(subject, str | list) else "",
                final_output=final,
                context=self.state.context,
                workflow_id=workflow.info().workflow_id,
            ),
            GuardrailsOutput,
            f"the {kind} guardrails",
            timeout=MODEL_TIMEOUT,
        )

    async def filter_handoff(self, inp: HandoffFilterInput) -> HandoffFilterOutput:
        """Apply a handoff's input filter, or nest the history, for the next agent."""
        return await self.local(
            ACT_FILTER_HANDOFF, inp, HandoffFilterOutput, "the handoff input filter"
        )

    async def handle_run_error(self, inp: HandleRunErrorInput) -> HandleRunErrorOutput:
        """Let the run's `error_handlers` entry turn an error into a final output."""
        return await self.local(
            ACT_HANDLE_RUN_ERROR, inp, HandleRunErrorOutput, "the max_turns error handler"
        )

    async def read_run(self, inp: ReadRunInput) -> ReadRunOutput:
        """Read a nested run's report, or a parent's mail, by query.

        A regular activity: a local one would hold this run's task open while the other run
        waits on it.
        """
        out: ReadRunOutput = await workflow.execute_activity(
            ACT_READ_RUN,
            inp,
            result_type=ReadRunOutput,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=READ_RETRY,
        )
        return out


def by_reference(inp: CallModelInput, agent: AgentSpec) -> CallModelInput:
    """The model call's input without the agent's definition (about 300 bytes per call).

    The activity reads the definition from its registry when its agent's has the same digest.
    An agent whose pinned definition is not the registry's (tools an MCP server listed at the
    run's start, a run's model override) sends it all.
    """
    definition = agent_definition(agent)
    if any(t.mcp_server for t in agent.tools) or any(
        getattr(inp, k) != v for k, v in definition.items()
    ):
        return inp
    left_out = {
        k: CallModelInput.model_fields[k].get_default(call_default_factory=True) for k in definition
    }
    return inp.model_copy(update={**left_out, "definition": definition_digest(agent)})


def _agent_not_served(err: ActivityError) -> bool:
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.type == AGENT_NOT_SERVED


def output_text(value: Any) -> str:
    """A final output as text (for events and nested results)."""
    return value if isinstance(value, str) else json.dumps(value)


def _responses_api(agent: AgentSpec) -> bool:
    """Whether the agent's model answers through the OpenAI Responses API (continuable ids)."""
    return agent.model.provider == "openai" and agent.model.api != "chat"
