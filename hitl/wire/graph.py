"""The agent graph a run is pinned to, and a run's configuration, as data."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from hitl.limits import DEFAULT_TOOL_ARGUMENT_BYTES, DEFAULT_TOOL_OUTPUT_BYTES
from hitl.wire.base import WireModel, derived
from hitl.wire.names import ApprovalMode

__all__ = [
    "AgentGraph",
    "AgentSpec",
    "ApproverDirectory",
    "ApproverEntry",
    "HandoffSpec",
    "ModelSettings",
    "ModelSpec",
    "RunConfigSpec",
    "ToolSpec",
]


class ModelSettings(WireModel):
    """Sampling and tool-use settings for a model call. `None` means the provider's default."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    tool_choice: str | None = None
    """`auto`, `required`, `none`, a tool's name, or `mcp:<server_label>:<tool>` (a hosted MCP
    server's tool; the SDK's `MCPToolChoice(server_label, name)` is read as that)."""
    parallel_tool_calls: bool | None = None
    reasoning_effort: str | None = None
    extra_args: dict[str, Any] | None = None

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _mcp_choice(cls, value: Any) -> Any:
        label, name = getattr(value, "server_label", None), getattr(value, "name", None)
        if isinstance(label, str) and isinstance(name, str):
            return f"mcp:{label}:{name}"
        return value

    def merged_with(self, override: ModelSettings | None) -> ModelSettings:
        """Return these settings with every non-None field of `override` applied on top."""
        if override is None:
            return self
        data = self.model_dump()
        data.update({k: v for k, v in override.model_dump().items() if v is not None})
        return ModelSettings.model_validate(data)


class ModelSpec(WireModel):
    """Which model answers for an agent. Never carries credentials: keys live on workers."""

    provider: Literal["scripted", "openai"] = "openai"
    name: str
    api: Literal["responses", "chat"] | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    """Name of the worker environment variable that holds the key (never the key itself)."""
    local_activity: bool = False
    """Run the model call as a local activity (instant, deterministic models only)."""
    timeout_seconds: float | None = None
    """Seconds the client waits for one HTTP request to the model; `None`: the worker's default."""
    default_headers_env: dict[str, str] | None = None
    """Extra HTTP headers: header name -> worker environment variable holding its value (the
    value itself never travels through Temporal)."""
    default_query: dict[str, str] | None = None
    """Extra query parameters on every request (e.g. `api-version`); recorded, so never secrets."""


class ToolSpec(WireModel):
    """A tool as recorded at run start: what the model sees and how approval is decided."""

    name: str
    kind: Literal["function", "agent", "mcp"] = "function"
    """`agent`: an agent used as a tool (`agent.as_tool()`), run as a child workflow; `mcp`: a
    tool of an MCP server (listed when the run started)."""
    mcp_server: str | None = None
    """For MCP tools: the name of the server (configured on the worker) that serves it."""
    agent_id: str | None = None
    """For agent tools: the nested agent's id in the graph."""
    on_failure: Literal["error_message", "raise"] = "error_message"
    """For agent tools: a failed nested run becomes a tool error the model sees, or fails this
    run too."""
    run_timeout_seconds: float | None = None
    """For agent tools: a wall-clock limit on the nested run, approval waits included (`None`:
    none; its model calls and tools keep their own timeouts)."""
    description: str = ""
    params_json_schema: dict[str, Any] = Field(default_factory=dict)
    strict_json_schema: bool = True
    approval: ApprovalMode = "never"
    timeout_seconds: float = 300.0
    heartbeat_timeout_seconds: float | None = 30.0
    max_attempts: int = 3
    approval_timeout_seconds: float | None = None
    """How long a call may wait for a decision; `None` waits forever."""
    auto_approve: bool = False
    """The tool's key of two-key auto-approval (the run's preset is the other key)."""
    approvers: list[str] = Field(default_factory=list)
    """Who may decide this tool's calls (empty: anyone; overrides the run's list)."""
    approvers_by_call: bool = False
    """A callable decides each call's approvers (evaluated in an activity)."""
    required_approvals: int = 1
    """Distinct approvers a call needs (four eyes: 2); the least, when a callable decides."""
    approval_request: bool = False
    """The tool renders its own approval request (title, message, preview)."""
    approver: bool = False
    """The tool has a programmatic approver callback."""
    user_action: bool = False
    """The tool receives the person's action (`UserAction`) when it executes."""
    called_on_rejection: bool = False
    """A `UserAction` tool that is also called (not confirmed) when its call is rejected or
    expires, to word the answer the model sees."""
    input_guardrails: list[str] = Field(default_factory=list)
    """Names of the tool's input guardrails (they run in activities)."""
    timeout_behavior: Literal["error_as_result", "raise_exception"] = "error_as_result"
    """On timeout: tell the model, or fail the run with `ToolTimeoutError`."""
    allow_edits: bool = True
    """A person may approve a call with edited arguments."""
    signed_decisions: bool = False
    """Decisions on this tool's calls must be signed (see `hitl.signing`)."""
    remind_after_seconds: float | None = None
    """Seconds a call waits before a `reminder` notification (`None`: the run's setting)."""
    escalate_after_seconds: float | None = None
    """Seconds a call waits before it escalates (`None`: the run's setting)."""
    escalate_to: list[str] = Field(default_factory=list)
    """Approvers or `group:<name>`s added to a call's approvers when it escalates."""
    categories: list[str] = Field(default_factory=list)
    """What the tool declares it is (`payments`): approval policies match on it."""
    defers_to_policy: bool = False
    """`needs_approval="policy"`: the run's approval policy decides whether a call asks."""
    retry_safe: bool = True
    """`False`: one attempt; an attempt that dies midway makes the call uncertain."""
    local_activity: bool = False
    """Run calls as local activities, on the run's worker, inside the workflow task that
    decided them (quick, retry-safe function tools only)."""
    builtin: Literal["shell", "apply_patch", "hosted_mcp"] | None = None
    """A Responses built-in tool (`ShellTool`, `ApplyPatchTool`): offered to OpenAI models as
    `{"type": "shell"}` / `{"type": "apply_patch"}`, called with `shell_call` /
    `apply_patch_call` items and answered with their output items (a function tool with
    the same name and arguments on Chat Completions). `hosted_mcp` (`HostedMCPTool`): a
    hosted MCP server the provider calls itself; its `mcp_approval_request` items are the
    calls, answered with `mcp_approval_response` items (Responses only)."""
    builtin_config: dict[str, Any] | None = None
    """A `hosted_mcp` tool's `tool_config` as the model is sent it, without its secrets
    (`authorization`, `headers`: the worker adds them from its own tool when it calls the
    model, so they never reach history)."""


class HandoffSpec(WireModel):
    """A handoff as the model sees it (a tool named `transfer_to_...`) and where it leads."""

    tool_name: str
    tool_description: str
    agent_id: str
    input_filter: bool = False
    """The handoff has its own input filter (run in an activity)."""
    nest_handoff_history: bool | None = None
    """Override of the run's `nest_handoff_history` for this handoff."""


class AgentSpec(WireModel):
    """One agent of the graph, as data."""

    id: str
    """Stable identity inside the graph (the name, suffixed `~2`, `~3` when names repeat)."""
    name: str = derived("name", "id")
    instructions: str | None = None
    dynamic_instructions: bool = False
    handoff_description: str | None = None
    model: ModelSpec
    model_settings: ModelSettings = Field(default_factory=ModelSettings)
    tools: list[ToolSpec] = Field(default_factory=list)
    handoffs: list[HandoffSpec] = Field(default_factory=list)
    output_schema: dict[str, Any] | None = None
    output_type_name: str | None = None
    input_guardrails: list[str] = Field(default_factory=list)
    output_guardrails: list[str] = Field(default_factory=list)

    def tool(self, name: str) -> ToolSpec | None:
        """The tool called `name`, if this agent has one."""
        return next((t for t in self.tools if t.name == name), None)

    def handoff(self, tool_name: str) -> HandoffSpec | None:
        """The handoff whose tool is called `tool_name`, if any."""
        return next((h for h in self.handoffs if h.tool_name == tool_name), None)


class AgentGraph(WireModel):
    """The whole agent graph of a run, captured when the run starts (pinned for its lifetime)."""

    root: str
    agents: dict[str, AgentSpec]
    fingerprint: str


class ApproverEntry(WireModel):
    """One approver of the worker's approver directory."""

    groups: list[str] = Field(default_factory=list)
    """Groups (roles) the approver belongs to; a tool's approver list names them `group:<name>`."""
    keys: dict[str, str] = Field(default_factory=dict)
    """Key id -> the approver's Ed25519 public key (raw 32 bytes, base64)."""
    gateway: bool = False
    """An approval gateway (the `hitl console`): it authenticates people itself and its keys
    sign their decisions, naming each person as the approver. Its own name and groups decide
    nothing."""


class ApproverDirectory(WireModel):
    """Who the worker knows as approvers: their groups and public keys.

    Configured on the worker (`HITL_APPROVERS`: a JSON file), never taken from a payload, and
    pinned into a run when it starts, like its agent graph: a parked run checks decisions
    against the directory it started with.
    """

    approvers: dict[str, ApproverEntry] = Field(default_factory=dict)


class RunConfigSpec(WireModel):
    """Per-run options. Callables travel as import references (`module:qualname`)."""

    model: str | ModelSpec | None = None
    model_settings: ModelSettings | None = None
    max_turns: int | None = None
    tool_error_formatter: str | None = None
    error_handlers: dict[str, str] = Field(default_factory=dict)
    workflow_name: str | None = None
    group_id: str | None = None
    trace_metadata: dict[str, Any] = Field(default_factory=dict)
    max_tool_argument_bytes: int = DEFAULT_TOOL_ARGUMENT_BYTES
    max_tool_output_bytes: int = DEFAULT_TOOL_OUTPUT_BYTES
    max_consecutive_bad_turns: int = 3
    continue_as_new_after_events: int | None = None
    """Force continue-as-new once history reaches this many events (tests, tuning)."""
    context_type: str | None = None
    """Import reference of the context's type; workers rebuild the context object with it."""
    auto_approve: bool = False
    """The run's key of two-key auto-approval: tools with `auto_approve=True` need no person."""
    approver: str | None = None
    """Import reference of a programmatic approver consulted for every call needing approval."""
    approvers: list[str] = Field(default_factory=list)
    """Who may decide this run's calls (empty: anyone), unless a tool names its own."""
    signed_decisions: bool = False
    """Every decision of this run must be signed (see `hitl.signing`)."""
    approval_timeout_seconds: float | None = None
    """Default for tools without their own: seconds a call waits before it expires."""
    remind_after_seconds: float | None = None
    """Default for tools without their own: seconds before a waiting call is reminded."""
    escalate_after_seconds: float | None = None
    """Default for tools without their own: seconds before a waiting call escalates."""
    escalate_to: list[str] = Field(default_factory=list)
    """Default for tools without their own: who is added when a call escalates."""
    auto_previous_response_id: bool = False
    """The provider keeps the conversation: model calls send what is new since the previous
    response (`previous_response_id`, the OpenAI Responses API)."""
    stream_text_deltas: bool = False
    """Models that can stream publish text deltas as `model_text_delta` events (costs a
    signal per batch of deltas; `Runner.run_streamed` turns it on)."""
    input_guardrails: list[str] = Field(default_factory=list)
    output_guardrails: list[str] = Field(default_factory=list)
    pre_approval_tool_input_guardrails: bool = False
    """Also run tool input guardrails before an approval is requested."""
    handoff_input_filter: str | None = None
    nest_handoff_history: bool = False
    handoff_history_mapper: str | None = None
    call_model_input_filter: str | None = None
    context_deserializer: str | None = None
    trace_include_sensitive_data: bool = False
    model_task_queue: str | None = None
    """Task queue of remote `call_model` activities (`None`: the run's own queue)."""
    tool_task_queue: str | None = None
    """Task queue of `execute_tool` activities (`None`: the run's own queue), e.g. tool workers
    inside a private network (`python -m hitl.worker --activities-only`)."""
