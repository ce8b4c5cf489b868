"""`RunConfig`: per-run options, and the argument types of the callables it names."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeAlias

from hitl.context import RunContextWrapper, TContext
from hitl.errors import UserError
from hitl.guardrails import InputGuardrail, OutputGuardrail
from hitl.limits import run_config_problems
from hitl.model import Model
from hitl.refs import callable_ref, wrapped_ref
from hitl.tools import ApproverFunction
from hitl.wire import ModelSettings, RunConfigSpec, RunItem


@dataclass
class ToolErrorFormatterArgs(Generic[TContext]):
    """What a `tool_error_formatter` receives when a call is rejected.

    Attributes:
        kind: The error category; currently always `"approval_rejected"`.
        tool_type: The tool runtime (`"function"`).
        tool_name: Name of the rejected tool.
        call_id: The model's call id.
        default_message: The text the model would see without a formatter.
        run_context: The run's context.
    """

    kind: Literal["approval_rejected"]
    tool_type: str
    tool_name: str
    call_id: str
    default_message: str
    run_context: RunContextWrapper[TContext]


@dataclass
class RunErrorHandlerInput(Generic[TContext]):
    """What an error handler receives (`error_handlers={"max_turns": handler}`)."""

    kind: Literal["max_turns"]
    message: str
    max_turns: int
    context: TContext
    input_items: list[dict[str, Any]]
    new_items: list[RunItem]


@dataclass
class ModelInputData:
    """What a model call is given: instructions and input items (editable by a filter)."""

    input: list[dict[str, Any]]
    instructions: str | None


@dataclass
class CallModelData(Generic[TContext]):
    """What a `call_model_input_filter` receives."""

    model_data: ModelInputData
    agent: Any
    context: TContext


@dataclass
class RunErrorHandlerResult:
    """A controlled final output from an error handler.

    Attributes:
        final_output: The run's final output.
        include_in_history: Add the output to the transcript as an assistant message.
    """

    final_output: Any
    include_in_history: bool = True


ToolErrorFormatter: TypeAlias = Callable[
    [ToolErrorFormatterArgs[Any]], str | Awaitable[str | None] | None
]
RunErrorHandler: TypeAlias = Callable[
    [RunErrorHandlerInput[Any]],
    RunErrorHandlerResult | Any | Awaitable[RunErrorHandlerResult | Any],
]


@dataclass
class RunConfig:
    """Options for one run (override the agents' own settings).

    Callables (`tool_error_formatter`, `error_handlers`) run on workers, in activities, so they
    must be module-level functions the worker can import.

    Attributes:
        model: A model (name or `Model`, e.g. `OpenAIModel(base_url=...)`) for every agent.
        model_settings: Settings applied over each agent's own.
        max_turns: Model turns before `MaxTurnsExceeded` (default 10).
        tool_error_formatter: Text the model sees when a call is rejected without a message.
        error_handlers: `{"max_turns": handler}`; the handler may return a final output.
        workflow_name: Name of the run in traces.
        group_id: Groups runs of one conversation in traces.
        trace_metadata: Extra trace attributes.
        max_tool_argument_bytes: Larger tool arguments are refused to the model, never executed.
        max_tool_output_bytes: Tool outputs are cut to this size.
        max_consecutive_bad_turns: Unusable model turns in a row before the run fails with
            `ModelBehaviorError`.
        continue_as_new_after_events: Continue as new at this history length (besides
            Temporal's own suggestion).
        auto_approve: The run's key of two-key auto-approval: calls of tools declared with
            `auto_approve=True` are approved without a person (recorded as `auto_approval`).
        approver: A programmatic approver for every call that needs approval, consulted after
            the tool's own (`(ctx, ApprovalCall) -> ToolApproved | ToolDenied | None`).
        input_guardrails: Checked before the first model call (module-level guardrails).
        output_guardrails: Checked on the final output (module-level guardrails).
        pre_approval_tool_input_guardrails: Also run tool input guardrails before an approval
            is requested: a refusal becomes the tool output and no approval is created; an
            allowance still pauses, and the guardrail runs again after the approval.
        handoff_input_filter: `(HandoffInputData) -> HandoffInputData` for every handoff
            without its own filter.
        nest_handoff_history: Collapse the transcript into one message at each handoff.
        handoff_history_mapper: `(list[item]) -> list[item]` building that collapsed history.
        call_model_input_filter: `(CallModelData) -> ModelInputData`, applied in the model
            activity right before each call (trim history, redact).
        context_serializer: Turns a context object JSON-serializable (client side).
        context_deserializer: Rebuilds it from JSON (workers; module-level function).
        strict_context: Refuse a context that cannot be serialized (else it is dropped, with
            a warning, and user code sees `None`).
        trace_include_sensitive_data: Put tool arguments and outputs on trace spans.
        approvers: Who may decide this run's calls (approver ids); a tool's own
            `approvers` list takes precedence. Others are refused with `NotAuthorized`.
        signed_decisions: Every decision of the run must be signed by a key of the worker's
            approver directory (see `hitl.signing`).
        approval_timeout: For tools without their own: seconds a call waits before it expires.
        remind_after: For tools without their own: seconds before a waiting call is reminded.
        escalate_after: For tools without their own: seconds before a waiting call escalates.
        escalate_to: For tools without their own: who joins the approvers on escalation.
        auto_previous_response_id: Let the provider keep the conversation (the OpenAI
            Responses API's `previous_response_id`; also a `Runner.run` argument, as in the
            SDK): each model call sends only what is new since the previous response. The
            response id is kept in the run (across pauses, worker restarts and
            continue-as-new). Models on Chat Completions, scripted models
            and runs with a `call_model_input_filter` send the whole transcript as before; so
            does the first call after a handoff, and a call whose previous response the
            provider no longer has.
        model_task_queue: Task queue for remote model calls (default: the run's own queue).
        tool_task_queue: Task queue for tool executions (default: the run's own queue), served
            for example by `python -m hitl.worker --activities-only` inside a private network.
        session_input_callback: With a client-managed session (`SQLiteSession`, any object
            with the SDK's session protocol): `(history, new_items) -> items`, sync or async,
            the run's input made of the session's items and the new ones (e.g. only the last
            ten turns). It runs here, on the client, before the run starts; what it returns
            must end with the new items (the turn written back to the session is what comes
            after the history it kept). Nothing of it is sent to the workers.
    """

    model: str | Model | None = None
    model_settings: ModelSettings | None = None
    max_turns: int | None = None
    tool_error_formatter: ToolErrorFormatter | None = None
    error_handlers: dict[str, RunErrorHandler] = field(default_factory=dict)
    workflow_name: str | None = None
    group_id: str | None = None
    trace_metadata: dict[str, Any] = field(default_factory=dict)
    max_tool_argument_bytes: int = 64 * 1024
    max_tool_output_bytes: int = 128 * 1024
    max_consecutive_bad_turns: int = 3
    continue_as_new_after_events: int | None = None
    auto_approve: bool = False
    approver: ApproverFunction | None = None
    model_task_queue: str | None = None
    tool_task_queue: str | None = None
    input_guardrails: list[InputGuardrail] = field(default_factory=list)
    output_guardrails: list[OutputGuardrail] = field(default_factory=list)
    pre_approval_tool_input_guardrails: bool = False
    handoff_input_filter: Callable[..., Any] | None = None
    nest_handoff_history: bool = False
    handoff_history_mapper: Callable[..., Any] | None = None
    call_model_input_filter: Callable[..., Any] | None = None
    context_serializer: Callable[[Any], Any] | None = None
    context_deserializer: Callable[[Any], Any] | None = None
    strict_context: bool = False
    trace_include_sensitive_data: bool = False
    approvers: list[str] = field(default_factory=list)
    signed_decisions: bool = False
    approval_timeout: float | None = None
    remind_after: float | None = None
    escalate_after: float | None = None
    escalate_to: list[str] = field(default_factory=list)
    auto_previous_response_id: bool = False
    session_input_callback: Callable[[list[Any], list[Any]], Any] | None = None

    def callables(self) -> list[Any]:
        """Every function (or guardrail) this config names: what a worker must allow."""
        found: list[Any] = [
            self.tool_error_formatter,
            *self.error_handlers.values(),
            self.approver,
            *self.input_guardrails,
            *self.output_guardrails,
            self.handoff_input_filter,
            self.handoff_history_mapper,
            self.call_model_input_filter,
            self.context_deserializer,
        ]
        return [fn for fn in found if fn is not None and not isinstance(fn, str)]

    def spec(self) -> RunConfigSpec:
        """The config as data (callables become references a worker resolves by name)."""
        unknown = set(self.error_handlers) - {"max_turns"}
        if unknown:
            raise UserError(f"unsupported error_handlers keys: {sorted(unknown)}")
        spec = self._spec()
        problems = run_config_problems(spec)
        if problems:
            raise UserError("; ".join(problems))
        return spec

    def _spec(self) -> RunConfigSpec:
        return RunConfigSpec(
            model=self.model.spec() if isinstance(self.model, Model) else self.model,
            model_settings=self.model_settings,
            max_turns=self.max_turns,
            tool_error_formatter=(
                callable_ref(self.tool_error_formatter, what="tool_error_formatter")
                if self.tool_error_formatter
                else None
            ),
            error_handlers={
                k: callable_ref(v, what=f"error_handlers[{k!r}]")
                for k, v in self.error_handlers.items()
            },
            workflow_name=self.workflow_name,
            group_id=self.group_id,
            trace_metadata=self.trace_metadata,
            max_tool_argument_bytes=self.max_tool_argument_bytes,
            max_tool_output_bytes=self.max_tool_output_bytes,
            max_consecutive_bad_turns=self.max_consecutive_bad_turns,
            continue_as_new_after_events=self.continue_as_new_after_events,
            auto_approve=self.auto_approve,
            approver=callable_ref(self.approver, what="approver") if self.approver else None,
            model_task_queue=self.model_task_queue or None,
            tool_task_queue=self.tool_task_queue or None,
            input_guardrails=[
                wrapped_ref(g, what="input_guardrails") for g in self.input_guardrails
            ],
            output_guardrails=[
                wrapped_ref(g, what="output_guardrails") for g in self.output_guardrails
            ],
            pre_approval_tool_input_guardrails=self.pre_approval_tool_input_guardrails,
            handoff_input_filter=_ref(self.handoff_input_filter, "handoff_input_filter"),
            nest_handoff_history=self.nest_handoff_history,
            handoff_history_mapper=_ref(self.handoff_history_mapper, "handoff_history_mapper"),
            call_model_input_filter=_ref(self.call_model_input_filter, "call_model_input_filter"),
            context_deserializer=_ref(self.context_deserializer, "context_deserializer"),
            trace_include_sensitive_data=self.trace_include_sensitive_data,
            approvers=list(self.approvers),
            signed_decisions=self.signed_decisions,
            approval_timeout_seconds=self.approval_timeout,
            remind_after_seconds=self.remind_after,
            escalate_after_seconds=self.escalate_after,
            escalate_to=list(self.escalate_to),
            auto_previous_response_id=self.auto_previous_response_id,
        )


def _ref(fn: Callable[..., Any] | None, what: str) -> str | None:
    return callable_ref(fn, what=what) if fn is not None else None
