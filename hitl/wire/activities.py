"""The inputs and outputs of our activities."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import Field

from hitl.limits import DEFAULT_TOOL_OUTPUT_BYTES
from hitl.wire.base import WireModel, derived
from hitl.wire.decisions import DecisionRecord, InputAnswer
from hitl.wire.graph import (
    AgentSpec,
    ModelSettings,
    ModelSpec,
)
from hitl.wire.names import idempotency_key as default_key
from hitl.wire.policy import PinnedPolicy, PolicyVerdict
from hitl.wire.runs import (
    ApprovalRequestData,
    PolicyDecision,
    RunContextData,
    RunErrorInfo,
    RunItem,
    Usage,
)

__all__ = [
    "CallModelInput",
    "CallPlan",
    "ExecuteToolInput",
    "GuardrailVerdict",
    "GuardrailsInput",
    "GuardrailsOutput",
    "HandleRunErrorInput",
    "HandleRunErrorOutput",
    "HandoffFilterInput",
    "HandoffFilterOutput",
    "InputFilterRecord",
    "ModelResponse",
    "HANDOFF_PARAMETERS",
    "ModelTool",
    "agent_definition",
    "definition_digest",
    "model_tools",
    "NotifierResult",
    "NotifyEvent",
    "NotifyInput",
    "NotifyOutput",
    "PlanCall",
    "PlanRequest",
    "PlanToolsInput",
    "PlanToolsOutput",
    "RejectionTextInput",
    "RejectionTextOutput",
    "SessionAppend",
    "SessionInput",
    "SessionItems",
    "SessionRef",
    "ToolOutput",
    "TranscriptRef",
]


class TranscriptRef(WireModel):
    """Where a model activity fetches its transcript (the `transcript` query of this run)."""

    workflow_id: str
    run_id: str
    end: int
    start: int = 0
    """Items before it are not fetched (the provider holds them: `previous_response_id`)."""


class ModelTool(WireModel):
    """A tool as offered to the model."""

    name: str
    description: str
    params_json_schema: dict[str, Any]
    strict: bool = True
    builtin: Literal["shell", "apply_patch", "hosted_mcp"] | None = None
    """A Responses built-in tool (see `ToolSpec.builtin`)."""
    builtin_config: dict[str, Any] | None = None
    """A hosted MCP tool's configuration (see `ToolSpec.builtin_config`)."""


HANDOFF_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {},
    "required": [],
    "additionalProperties": False,
}
"""A handoff's tool takes no arguments."""


def model_tools(agent: AgentSpec) -> list[ModelTool]:
    """What the model is offered: the agent's tools, then its handoffs as tools."""
    tools = [
        ModelTool(
            name=t.name,
            description=t.description,
            params_json_schema=t.params_json_schema,
            strict=t.strict_json_schema,
            builtin=t.builtin,
            builtin_config=t.builtin_config,
        )
        for t in agent.tools
    ]
    return tools + [
        ModelTool(
            name=h.tool_name,
            description=h.tool_description,
            params_json_schema=HANDOFF_PARAMETERS,
        )
        for h in agent.handoffs
    ]


def agent_definition(agent: AgentSpec) -> dict[str, Any]:
    """The `CallModelInput` fields that come from the agent's definition (see `definition`)."""
    return {
        "model": agent.model,
        "instructions": agent.instructions,
        "dynamic_instructions": agent.dynamic_instructions,
        "tools": model_tools(agent),
        "output_schema": agent.output_schema,
        "output_type_name": agent.output_type_name,
    }


def definition_digest(agent: AgentSpec) -> str:
    """A digest of `agent_definition(agent)` (pure: the workflow and the activity agree)."""
    data = {
        k: [t.model_dump(mode="json") for t in v]
        if k == "tools"
        else v.model_dump(mode="json")
        if isinstance(v, WireModel)
        else v
        for k, v in agent_definition(agent).items()
    }
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


class CallModelInput(WireModel):
    """Input of `call_model`.

    The transcript is inline for local activities and while it is small
    (`hitl.limits.MODEL_INPUT_INLINE_BYTES`), else by reference (read by query).
    """

    root_agent: str
    agent_id: str = derived("agent_id", "root_agent")
    agent_name: str = derived("agent_name", "agent_id", "root_agent")
    model: ModelSpec | None = None
    """`None` with `definition` only: the agent's model, instructions, tools and output schema are
    the registry's (see `graph`)."""
    definition: str | None = None
    """Set when the agent's model, instructions, tools and output schema are left out: the
    digest of that definition (`definition_digest`). The activity takes them from its
    registry's agent `agent_id` of `root_agent` when its definition has this digest (else it
    fails with `AgentNotServed` and the run sends the definition). An older worker cannot read
    such an input (no `model`): the attempt fails and is retried on a worker that can."""
    settings: ModelSettings = Field(default_factory=ModelSettings)
    instructions: str | None = None
    dynamic_instructions: bool = False
    tools: list[ModelTool] = Field(default_factory=list)
    output_schema: dict[str, Any] | None = None
    output_type_name: str | None = None
    transcript: list[dict[str, Any]] | None = None
    transcript_ref: TranscriptRef | None = None
    context: RunContextData | None = None
    turn: int = 0
    max_argument_bytes: int = 64 * 1024
    stream: bool = False
    """Ask the model to stream and publish its text deltas on the run's event stream."""
    input_filter: str | None = None
    """The run's `call_model_input_filter` (import reference), applied in this activity."""
    previous_response_id: str | None = None
    """The provider holds the conversation up to this response: send only what is new."""
    since: int = 0
    """With `previous_response_id` or `conversation_id`: the transcript items the provider
    holds (the transcript given, inline or by reference, starts there)."""
    conversation_id: str | None = None
    """The provider's conversation this call reads and writes (OpenAI Conversations API)."""
    resend_when_lost: bool = True
    """When the provider no longer has `previous_response_id`: send the whole transcript
    instead, starting a new chain (`ModelResponse.chain_restarted`). `False`: the transcript
    is not the whole conversation (the provider held turns from before the run), so the call
    fails with `ConversationLost`."""
    plan: PlanRequest | None = None
    """Plan the calls the model makes to these tools in the same activity (`None`: no tool of
    the agent may need a person, or an older workflow: the run plans them itself)."""

    @property
    def model_spec(self) -> ModelSpec:
        """The model to call (once the activity has the agent's definition)."""
        if self.model is None:
            raise ValueError("the model call's input names no model")
        return self.model


class PlanRequest(WireModel):
    """What planning a model call's tool calls needs besides the calls (see `PlanToolsInput`).

    Planning runs the tools' own code (argument parsing, `needs_approval`, requests, approver
    callbacks), so it runs in an activity; done in the model call's activity it costs no
    second activity (and no marker in history) per turn with such calls.
    """

    tools: list[str]
    """The agent's tools that may need a person (MCP tools excluded: their server is needed)."""
    run_approver: str | None = None
    skip_policy: list[str] = Field(default_factory=list)
    pre_approval_guardrails: bool = False
    policy: PinnedPolicy | None = None
    """The run's pinned approval policy: planning evaluates it for each call."""
    categories: dict[str, list[str]] = Field(default_factory=dict)
    """The pinned categories of the tools that declare some (what policy rules match)."""


class InputFilterRecord(WireModel):
    """A `call_model_input_filter`'s effect on one model call, recorded with the response.

    The filtered input itself is not stored (history would hold the transcript twice); its
    digest lets an audit check what the model received against a transcript.
    """

    items_before: int
    """Input items the filter was given."""
    items: int
    """Input items the model received."""
    instructions_changed: bool = False
    digest: str
    """`sha256:<hex>` of the filtered input and instructions (`activities.model.input_digest`)."""


class ModelResponse(WireModel):
    """Output of `call_model`: Responses output items, usage and a validated final output."""

    output: list[dict[str, Any]]
    usage: Usage = Field(default_factory=Usage)
    final_output: Any = None
    has_final_output: bool = False
    response_id: str | None = None
    input_filter: InputFilterRecord | None = None
    """What the run's `call_model_input_filter` did to this call (`None`: no filter ran)."""
    plans: list[CallPlan] | None = None
    """With `CallModelInput.plan`: a plan for each call to those tools (`None`: not planned
    here; the run plans them with `plan_tools`)."""
    chain_restarted: bool = False
    """The provider no longer had `CallModelInput.previous_response_id`: this call sent the
    whole transcript and `response_id` starts a new chain."""


class PlanCall(WireModel):
    """A call to plan: evaluate approval, validate arguments."""

    call_id: str
    tool_name: str
    arguments: str
    mcp_server: str | None = None
    """For an MCP tool: its server, as the run's graph records it."""
    reserve_as: str | None = None
    """The id a policy's limit reservations are made under, when not `call_id`: an edit's own
    (`<model call id>~e<digest of the update id>`), so the edited amount gets its reservation."""


class GuardrailVerdict(WireModel):
    """One guardrail's result."""

    name: str
    tripwire_triggered: bool = False
    output_info: Any = None


class GuardrailsInput(WireModel):
    """Input of `run_guardrails`."""

    kind: Literal["input", "output"]
    root_agent: str
    agent_id: str
    run_guardrails: list[str] = Field(default_factory=list)
    input: str | list[dict[str, Any]] = ""
    final_output: Any = None
    context: RunContextData | None = None
    workflow_id: str = ""


class GuardrailsOutput(WireModel):
    """Output of `run_guardrails`."""

    verdicts: list[GuardrailVerdict]


class HandoffFilterInput(WireModel):
    """Input of `filter_handoff`: the transcript split as the OpenAI Agents SDK splits it."""

    root_agent: str
    from_agent_id: str
    handoff_tool: str
    to_agent_id: str
    input_history: list[dict[str, Any]]
    pre_handoff_items: list[RunItem]
    new_items: list[RunItem]
    run_filter: str | None = None
    nest: bool = False
    mapper: str | None = None
    context: RunContextData | None = None


class HandoffFilterOutput(WireModel):
    """Output of `filter_handoff`: what the next agent starts from."""

    input_history: list[dict[str, Any]]
    pre_handoff_items: list[RunItem]
    new_items: list[RunItem]


class PlanToolsInput(WireModel):
    """Input of `plan_tools`."""

    root_agent: str
    agent_id: str
    calls: list[PlanCall]
    context: RunContextData | None = None
    workflow_id: str = ""
    run_approver: str | None = None
    skip_policy: list[str] = Field(default_factory=list)
    """Tools with a standing always-rule: their approver callbacks need not run."""
    pre_approval_guardrails: bool = False
    policy: PinnedPolicy | None = None
    """The run's pinned approval policy: evaluated for each call."""
    categories: dict[str, list[str]] = Field(default_factory=dict)
    """The pinned categories of the tools that declare some."""


class CallPlan(WireModel):
    """Plan for one call: refused (with the message for the model) or whether it needs approval."""

    call_id: str
    needs_approval: bool = False
    refusal: str | None = None
    note: str | None = None
    request: ApprovalRequestData | None = None
    policy: PolicyDecision | None = None
    tripwire: RunErrorInfo | None = None
    """A pre-approval tool guardrail asked to stop the run."""
    by_policy: bool = False
    """The refusal is a policy's answer (a guardrail), not a mistake of the model: it does not
    count toward `max_consecutive_bad_turns`."""
    required_approvals: int | None = None
    """What the tool's `required_approvals` callable asked for these arguments (`None`: the
    tool has a number, pinned in the graph)."""
    approvers: list[str] | None = None
    """Who may decide the call, when the tool's `approvers` is a callable (`None`: the tool's
    list, pinned in the graph)."""
    verdict: PolicyVerdict | None = None
    """What the run's approval policy said (its approvers narrow the call's, its count and
    deadline only make the call stricter; a `deny` is the refusal)."""


class PlanToolsOutput(WireModel):
    """Output of `plan_tools`, one plan per call, same order."""

    plans: list[CallPlan]


class ExecuteToolInput(WireModel):
    """Input of `execute_tool`.

    Stored with every call that runs, so it leaves out what the activity knows: its run's id
    (`workflow_id`) and the call's default key (`idempotency_key`), filled by `located`; and,
    in sparse payloads, its `derived` fields: the agent when it is the root, and the call id
    and tool name its decision names.
    """

    root_agent: str
    agent_id: str = derived("agent_id", "root_agent")
    tool_name: str = derived("tool_name", ("decision", "tool_name"))
    call_id: str = derived("call_id", ("decision", "call_id"))
    arguments: str
    idempotency_key: str = ""
    """Left out (`""`): the default key, `idempotency_key(workflow_id, call_id)` (`located`)."""
    workflow_id: str = ""
    """Left out (`""`): the run that scheduled the activity (`located`)."""
    context: RunContextData | None = None
    decision: DecisionRecord | None = None
    max_output_bytes: int = DEFAULT_TOOL_OUTPUT_BYTES
    answers: list[InputAnswer] = Field(default_factory=list)
    """Answers to the questions the tool asked on earlier attempts (MCP elicitation)."""
    mcp_server: str | None = None
    """For an MCP tool: its server, as the run's graph records it."""
    model_call_id: str | None = None
    """The id the model gave the call (`call_id` is the run's own), for tools that want it."""

    def located(self, workflow_id: str) -> ExecuteToolInput:
        """This input with what its activity knows filled in where the payload leaves it out.

        `workflow_id` is the activity's (`activity.info().workflow_id`: the run that
        scheduled it); the key, `idempotency_key(workflow_id, call_id)`, byte for byte what
        runs before this version sent. A value the payload holds is kept as it is.
        """
        run = self.workflow_id if "workflow_id" in self.model_fields_set else workflow_id
        key = (
            self.idempotency_key
            if "idempotency_key" in self.model_fields_set
            else default_key(run, self.call_id)
        )
        return self.model_copy(update={"workflow_id": run, "idempotency_key": key})


class ToolOutput(WireModel):
    """Output of `execute_tool`: the text the model sees."""

    output: str
    is_error: bool = False
    truncated: bool = False
    guardrail: str | None = None
    """The tool input guardrail that rejected the call (it did not run)."""
    context: RunContextData | None = None
    """The run context after the tool, when the tool changed it."""


class RejectionTextInput(WireModel):
    """Input of `rejection_text`: what the model should see for a rejected call."""

    root_agent: str
    agent_id: str
    tool_name: str
    call_id: str
    arguments: str
    formatter: str | None = None
    kind: Literal["approval_rejected"] = "approval_rejected"
    default_message: str
    context: RunContextData | None = None
    decision: DecisionRecord | None = None
    workflow_id: str = ""
    mcp_server: str | None = None


class RejectionTextOutput(WireModel):
    """Output of `rejection_text`: `None` keeps the default message."""

    message: str | None = None


class SessionInput(WireModel):
    """Input of the `AgentSession` workflow (and its state across continue-as-new)."""

    session_id: str
    items: list[dict[str, Any]] = Field(default_factory=list)
    applied: list[str] = Field(default_factory=list)
    """Runs whose turn was appended (so a retried append is applied once)."""


class SessionAppend(WireModel):
    """A run's turn, appended to a session when the run completes."""

    run_id: str
    items: list[dict[str, Any]]


class SessionItems(WireModel):
    """A session's transcript (answer of the `items` query and of `load_session`)."""

    items: list[dict[str, Any]]


class SessionRef(WireModel):
    """Input of `load_session` / `save_session`."""

    session_id: str
    task_queue: str
    append: SessionAppend | None = None


class HandleRunErrorInput(WireModel):
    """Input of `handle_run_error`."""

    handler: str
    kind: Literal["max_turns"] = "max_turns"
    message: str
    max_turns: int
    context: RunContextData | None = None
    input_items: list[dict[str, Any]] = Field(default_factory=list)
    new_items: list[RunItem] = Field(default_factory=list)


class HandleRunErrorOutput(WireModel):
    """Output of `handle_run_error`: `handled=False` means the error stands."""

    handled: bool = False
    final_output: Any = None
    include_in_history: bool = True


NotifyEvent = Literal["waiting", "reminder", "escalated", "decided", "expired", "uncertain"]
"""When a run tells people about a call: it starts waiting, is reminded, escalates, is decided,
expires, or became uncertain (its tool may or may not have had its effect)."""


class NotifyInput(WireModel):
    """Input of `notify`: one event about one call, for the worker's notifiers.

    Never carries the call's arguments (they may be personal data): only what a person needs to
    find the call and decide it.
    """

    _sparse: ClassVar[bool] = False  # webhook bodies are read by other programs: complete

    event: NotifyEvent
    workflow_id: str
    run_id: str
    call_id: str
    tool_name: str
    agent_name: str
    title: str | None = None
    approvers: list[str] = Field(default_factory=list)
    deadline: datetime | None = None
    at: datetime
    decision: DecisionRecord | None = None
    arguments_sha256: str | None = None
    """The digest of the call's arguments as they wait (what a decision names as `seen_sha256`):
    a chat note's buttons decide only those arguments."""
    namespace: str | None = None
    """The run's namespace (filled by the `notify` activity, not by the run)."""


class NotifierResult(WireModel):
    """How one notifier fared."""

    notifier: str
    delivered: bool
    attempts: int = 1
    error: str | None = None


class NotifyOutput(WireModel):
    """Output of `notify`: it never fails; each notifier's result is here (and in the log)."""

    results: list[NotifierResult] = Field(default_factory=list)


CallModelInput.model_rebuild()
ModelResponse.model_rebuild()
