"""Wire contracts: every payload that crosses Temporal (workflow, activities, updates, queries).

These models are stored in workflow histories, so they are contracts across deployments:
fields are only ever *added*, always with a default, names never change, and neither do
defaults (payloads are stored without the fields at their defaults, see `hitl.converter`;
`tests/unit/test_wire_defaults.py` keeps them). Each workflow, activity, update and query takes
exactly one of these models and returns one.

The module is imported by workflow code (passed through the sandbox), so it must stay free of
I/O and of anything non-deterministic.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from temporalio.contrib.workflow_streams import WorkflowStreamState

# Names that appear in histories, CLIs and docs. Changing one breaks stored runs.
WORKFLOW_TYPE = "AgentRun"
DEFAULT_TASK_QUEUE = "hitl"

# Activity names (explicit, so renaming Python code never breaks a stored history).
ACT_RESOLVE_AGENT = "resolve_agent"
ACT_CALL_MODEL = "call_model"
ACT_PLAN_TOOLS = "plan_tools"
ACT_EXECUTE_TOOL = "execute_tool"
ACT_REJECTION_TEXT = "rejection_text"
ACT_HANDLE_RUN_ERROR = "handle_run_error"
ACT_RUN_GUARDRAILS = "run_guardrails"
ACT_FILTER_HANDOFF = "filter_handoff"
ACT_LOAD_SESSION = "load_session"
ACT_SAVE_SESSION = "save_session"
ACT_READ_RUN = "read_run"
"""Reads another run of the same graph by query (a nested run's report, or its parent's mail)."""

# Handler names of `AgentRun` (what the `temporal` CLI and the UI call).
UPDATE_APPROVE = "approve"
UPDATE_REJECT = "reject"
UPDATE_DECIDE = "decide"
UPDATE_WAIT = "wait"
SIGNAL_APPROVE = "approve"
SIGNAL_REJECT = "reject"
QUERY_STATUS = "status"
QUERY_SNAPSHOT = "snapshot"
QUERY_TRANSCRIPT = "transcript"
SIGNAL_CHILD_REPORT = "__hitl_child_report"
"""Internal, nested run -> parent: "read me again" (its content is ignored)."""
SIGNAL_FROM_ROOT = "__hitl_from_root"
"""Internal, parent -> nested run: "read your mail" (its content is ignored)."""
QUERY_REPORT = "__hitl_report"
QUERY_MAIL = "__hitl_mail"

SESSION_WORKFLOW_TYPE = "AgentSession"
SESSION_APPEND = "append"
SESSION_ADD_ITEMS = "add_items"
SESSION_POP_ITEM = "pop_item"
SESSION_CLEAR = "clear"
SESSION_ITEMS = "items"
EVENTS_TOPIC = "events"
"""The topic of a run's workflow stream that carries its `RunEvent`s."""


MAX_WORKFLOW_ID = 255
"""Longest workflow id we create or accept: PostgreSQL-backed Temporal stores ids in
`VARCHAR(255)` (the dev server's SQLite would take longer ones, production would not)."""
MAX_ID_PREFIX = 160
"""Longest business workflow id or session id a client may give: nested runs append
`--<call id>` to their root's id (see `child_workflow_id`)."""


def child_workflow_id(parent_id: str, call_id: str) -> str:
    """Workflow id of the nested run answering agent-tool call `call_id` of `parent_id`.

    `<parent>--<call id>`, shortened with a digest when nesting would pass `MAX_WORKFLOW_ID`.
    """
    child = f"{parent_id}--{call_id}"
    if len(child) <= MAX_WORKFLOW_ID:
        return child
    digest = hashlib.sha256(child.encode("utf-8")).hexdigest()[:20]
    return f"{child[: MAX_WORKFLOW_ID - len(digest) - 2]}--{digest}"


def session_workflow_id(session_id: str) -> str:
    """Workflow id of the `AgentSession` that holds a conversation's transcript."""
    return f"hitl-session-{session_id}"


Phase = Literal["starting", "running", "awaiting_approval", "completed", "failed"]
"""Where a run is. `awaiting_approval` means: nothing can progress until a person decides."""

DecisionKind = Literal["approve", "reject"]
DecisionSource = Literal["person", "always_rule", "policy", "auto_approval", "deadline"]
DecisionVia = Literal["update", "signal", "workflow", "root"]
ApprovalMode = Literal["never", "always", "predicate"]

# Custom search attributes the workflow keeps current (never arguments or personal data).
SA_STATUS = "HitlStatus"
SA_PENDING_TOOLS = "HitlPendingTools"
SA_AGENT = "HitlAgent"
SA_PENDING_SINCE = "HitlPendingSince"
SA_DEADLINE = "HitlDeadline"
"""The earliest approval deadline among the pending calls (unset: none has one)."""
SEARCH_ATTRIBUTES = {
    SA_STATUS: "Keyword",
    SA_PENDING_TOOLS: "KeywordList",
    SA_AGENT: "Keyword",
    SA_PENDING_SINCE: "Datetime",
    SA_DEADLINE: "Datetime",
}


class _Model(BaseModel):
    # Unknown fields are ignored so that an older worker can read a newer payload.
    model_config = ConfigDict(extra="ignore")
    # Stored without the fields at their defaults (`hitl.converter`): defaults never change.
    _sparse: ClassVar[bool] = True


# --------------------------------------------------------------------------- agent graph


class ModelSettings(_Model):
    """Sampling and tool-use settings for a model call. `None` means the provider's default."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    tool_choice: str | None = None
    parallel_tool_calls: bool | None = None
    reasoning_effort: str | None = None
    extra_args: dict[str, Any] | None = None

    def merged_with(self, override: ModelSettings | None) -> ModelSettings:
        """Return these settings with every non-None field of `override` applied on top."""
        if override is None:
            return self
        data = self.model_dump()
        data.update({k: v for k, v in override.model_dump().items() if v is not None})
        return ModelSettings.model_validate(data)


class ModelSpec(_Model):
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


class ToolSpec(_Model):
    """A tool as recorded at run start: what the model sees and how approval is decided."""

    name: str
    kind: Literal["function", "agent"] = "function"
    """`agent`: an agent used as a tool (`agent.as_tool()`), run as a child workflow."""
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
    approval_request: bool = False
    """The tool renders its own approval request (title, message, preview)."""
    approver: bool = False
    """The tool has a programmatic approver callback."""
    user_action: bool = False
    """The tool receives the person's action (`UserAction`) when it executes."""
    input_guardrails: list[str] = Field(default_factory=list)
    """Names of the tool's input guardrails (they run in activities)."""
    timeout_behavior: Literal["error_as_result", "raise_exception"] = "error_as_result"
    """On timeout: tell the model, or fail the run with `ToolTimeoutError`."""


class HandoffSpec(_Model):
    """A handoff as the model sees it (a tool named `transfer_to_...`) and where it leads."""

    tool_name: str
    tool_description: str
    agent_id: str
    input_filter: bool = False
    """The handoff has its own input filter (run in an activity)."""
    nest_handoff_history: bool | None = None
    """Override of the run's `nest_handoff_history` for this handoff."""


class AgentSpec(_Model):
    """One agent of the graph, as data."""

    id: str
    """Stable identity inside the graph (the name, suffixed `~2`, `~3` when names repeat)."""
    name: str
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


class AgentGraph(_Model):
    """The whole agent graph of a run, captured when the run starts (pinned for its lifetime)."""

    root: str
    agents: dict[str, AgentSpec]
    fingerprint: str


# --------------------------------------------------------------------------- run config


class RunConfigSpec(_Model):
    """Per-run options. Callables travel as import references (`module:qualname`)."""

    model: str | ModelSpec | None = None
    model_settings: ModelSettings | None = None
    max_turns: int | None = None
    tool_error_formatter: str | None = None
    error_handlers: dict[str, str] = Field(default_factory=dict)
    workflow_name: str | None = None
    group_id: str | None = None
    trace_metadata: dict[str, Any] = Field(default_factory=dict)
    max_tool_argument_bytes: int = 64 * 1024
    max_tool_output_bytes: int = 128 * 1024
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
    inside a private network (`python -m worker --activities-only`)."""


# --------------------------------------------------------------------------- transcript


class Usage(_Model):
    """Model usage accumulated over a run."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0

    def add(self, other: Usage) -> Usage:
        """Return the sum of two usages."""
        return Usage(
            requests=self.requests + other.requests,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )


RunItemType = Literal[
    "message_output_item",
    "tool_call_item",
    "tool_call_output_item",
    "handoff_call_item",
    "handoff_output_item",
    "reasoning_item",
]


class RunItem(_Model):
    """One item the run produced: an OpenAI Responses item plus who produced it."""

    type: RunItemType
    agent_id: str
    agent_name: str
    raw_item: dict[str, Any]


# --------------------------------------------------------------------------- workflow I/O


class ParentLink(_Model):
    """Set on a nested run (an agent used as a tool): where it reports and who decides."""

    workflow_id: str
    call_id: str
    """The parent's call id of the agent tool this run answers."""
    root_workflow_id: str
    """Approvals of every nested run are decided on the root run only."""
    path: list[str] = Field(default_factory=list)
    """Agents and agent tools from the root down to this run's agent."""
    call_path: list[str] = Field(default_factory=list)
    """Agent-tool call ids from the root down to this run (its calls' prefix at the root)."""
    tracing: bool = False
    token: str = ""
    """Unused since nested runs read each other by query (kept so older payloads parse)."""


class RunInput(_Model):
    """Input of the `AgentRun` workflow. Only `agent` and `input` are needed from the CLI.

    `temporal workflow start --type AgentRun --task-queue hitl
    --input '{"agent": "Refund desk", "input": "Refund order 1001"}'`
    """

    agent: str
    input: str | list[dict[str, Any]] = ""
    context: Any = None
    max_turns: int | None = None
    run_config: RunConfigSpec = Field(default_factory=RunConfigSpec)
    carried: CarriedState | None = None
    """Set only by continue-as-new: the whole state of the previous run."""
    parent: ParentLink | None = None
    """Set only for nested runs started by an agent tool."""
    graph: AgentGraph | None = None
    """Nested runs reuse the root's pinned graph instead of resolving it again."""
    start_agent: str | None = None
    """Nested runs start at this agent id of `graph`."""
    always_rules: dict[str, DecisionKind] = Field(default_factory=dict)
    """Older form of `rules` (per tool name, any agent); read, never written."""
    session: str | None = None
    """A conversation that spans runs: its transcript is read at start and this run's turn is
    appended when it completes (see `AgentSession`)."""
    rules: list[StandingRule] = Field(default_factory=list)
    """Nested runs: the standing rules of their root when they start."""


class ApprovalRequestData(_Model):
    """What a person sees before deciding (rendered in an activity, before the run pauses)."""

    title: str
    message: str
    preview: str | None = None
    preview_label: str | None = None
    primary_label: str = "Approve"
    secondary_label: str = "Reject"
    note: str | None = None


class PolicyDecision(_Model):
    """A decision made by an approver callback instead of a person."""

    kind: DecisionKind
    message: str | None = None
    reason: str | None = None
    approver: str


class StandingRule(_Model):
    """`always_approve` / `always_reject`: decides later calls of one agent's tool in the run.

    A rule never grants more than the person who made it could decide: it applies to a call
    only if `approver` may decide that call (the call's approver list), so a rule made on one
    agent's tool never reaches another agent's tool of the same name, nor a call reserved for
    someone else.
    """

    agent_id: str
    """The agent whose tool it is (`*`: any agent; only rules read from older runs)."""
    tool_name: str
    kind: DecisionKind
    approver: str | None = None
    """Who made it (the decision's approver)."""
    call_id: str = ""
    """The call whose decision made it."""

    def covers(self, agent_id: str, tool_name: str) -> bool:
        """Whether the rule is about this agent's tool."""
        return self.tool_name == tool_name and self.agent_id in (agent_id, "*")


class CallRecord(_Model):
    """A tool call of the current turn and everything decided about it."""

    call_id: str
    tool_name: str
    agent_id: str
    agent_name: str
    arguments: str
    turn: int
    state: Literal[
        "planning", "awaiting_approval", "approved", "running", "done", "rejected", "refused"
    ] = "planning"
    needs_approval: bool = False
    requested_at: datetime | None = None
    decision: DecisionRecord | None = None
    output: str | None = None
    is_error: bool = False
    request: ApprovalRequestData | None = None
    approvers: list[str] = Field(default_factory=list)
    deadline: datetime | None = None


class DecisionRecord(_Model):
    """A recorded decision: who decided what about which call, when, and how."""

    _sparse: ClassVar[bool] = False  # read by operators as JSON: complete

    call_id: str
    tool_name: str
    kind: DecisionKind
    always: bool = False
    message: str | None = None
    approver: str | None = None
    reason: str | None = None
    source: DecisionSource = "person"
    via: DecisionVia = "update"
    decided_at: datetime

    def answers(self, kind: DecisionKind, d: DecisionInput) -> bool:
        """Whether this record is the outcome of decision `d` of `kind` (so a repeat is a retry).

        A rule, policy or deadline that decided the same way counts; a person's decision only
        when nothing differs (a repeat that adds `always` or changes the message is another
        decision).
        """
        if self.kind != kind:
            return False
        if self.source != "person":
            return True
        message = d.message if kind == "reject" else None
        return (self.always, self.message, self.approver, self.reason) == (
            d.always,
            message,
            d.approver,
            d.reason,
        )


class TurnInfo(_Model):
    """The turn in progress when a run continued as new while waiting for people."""

    start: int
    """Index in `new_items` where the turn's items begin."""
    handoff_target: str | None = None
    handoff_call: str | None = None


class CarriedState(_Model):
    """A run's whole state: what `AgentRun` works on, and what continue-as-new carries over.

    `calls` and `turn` hold a turn that is still waiting for people when the run continues as
    new (so a parked run compacts its history too); between turns they are empty.
    """

    graph: AgentGraph | None = None
    current_agent: str = ""
    input_items: list[dict[str, Any]] = Field(default_factory=list)
    new_items: list[RunItem] = Field(default_factory=list)
    turn: int = 0
    bad_turns: int = 0
    usage: Usage = Field(default_factory=Usage)
    always_rules: dict[str, DecisionKind] = Field(default_factory=dict)
    """Older form of `rules` (per tool name, any agent); read, never written."""
    rules: list[StandingRule] = Field(default_factory=list)
    decisions: list[DecisionRecord] = Field(default_factory=list)
    refused: list[RefusedDecision] = Field(default_factory=list)
    continued_runs: int = 0
    search_attributes: bool = False
    session_base: int = 0
    """How many input items came from the session (the rest is this run's own turn)."""
    own_input: list[dict[str, Any]] = Field(default_factory=list)
    """This run's own input items (what it appends to its session, with what it produced)."""
    context: RunContextData | None = None
    """The run context as it is now (tools and resumes may have changed it)."""
    tracing: bool = False
    stream: WorkflowStreamState | None = None
    """The run's event stream, carried so subscribers lose nothing across continue-as-new."""
    seen_from_root: int = 0
    """A nested run: the last `FromRoot.seq` it applied."""
    calls: list[CallRecord] = Field(default_factory=list)
    """The calls of the turn in progress (see the class docstring)."""
    open_turn: TurnInfo | None = None
    """The turn in progress, when there is one."""
    turns_here: int = 0
    """Model turns taken since this run (of the chain) started: continue-as-new waits for one,
    so no threshold can make a run continue as new forever without progress."""


class RunOutput(_Model):
    """Result of a completed `AgentRun`."""

    _sparse: ClassVar[bool] = False  # read by operators as JSON: complete

    final_output: Any = None
    last_agent: str
    last_agent_name: str
    input_items: list[dict[str, Any]]
    new_items: list[RunItem]
    usage: Usage
    decisions: list[DecisionRecord]
    turns: int
    run_id: str = ""
    transcript_omitted: bool = False
    """The transcript was left out: with it the result would pass Temporal's payload limit
    (`input_items` and `new_items` are then empty)."""


# --------------------------------------------------------------------------- updates, queries


class DecisionInput(_Model):
    """Payload of the `approve` and `reject` updates and signals. Only `call_id` is required.

    `temporal workflow update execute --workflow-id W --name approve
    --input '{"call_id": "call_123"}'`
    """

    model_config = ConfigDict(extra="forbid")

    call_id: str
    always: bool = False
    message: str | None = None
    approver: str | None = None
    reason: str | None = None


class DecisionRequest(DecisionInput):
    """One decision inside a `decide` batch."""

    kind: DecisionKind


class DecideInput(_Model):
    """Payload of the `decide` update: decisions applied atomically, then optionally wait."""

    decisions: list[DecisionRequest]
    wait: bool = True
    context: RunContextData | None = None
    """A new run context for the rest of the run (`RunState.from_string_with_context`)."""


class WaitInput(_Model):
    """Payload of the `wait` update: returns once the run pauses for a person or finishes."""


class PendingApproval(_Model):
    """A tool call waiting for a person, as shown by `status` and `RunResult.interruptions`."""

    call_id: str
    tool_name: str
    agent_id: str
    agent_name: str
    arguments: str
    turn: int
    requested_at: datetime | None = None
    request: ApprovalRequestData | None = None
    path: list[str] = Field(default_factory=list)
    """Agents and agent tools from the root down to the agent whose tool this is."""
    workflow_id: str | None = None
    """The run that owns the call (a nested run's id for calls inside agent tools)."""
    approvers: list[str] = Field(default_factory=list)
    """Who may decide it (empty: anyone)."""
    deadline: datetime | None = None
    """When it stops waiting (the tool's `approval_timeout`)."""


class ChildReport(_Model):
    """A nested run's pending approvals and phase, as its parent reads them (`__hitl_report`).

    Parent and nested run signal each other only to say "read me again"; what either acts on
    is read by query from the other run itself (`read_run`), so nobody can put words in
    their mouths by signalling them.
    """

    call_id: str
    phase: Phase
    pending: list[PendingApproval] = Field(default_factory=list)
    seen: int = 0
    """The last `FromRoot.seq` this run applied (so stale reports are recognized)."""
    token: str = ""
    """Unused (kept so older payloads parse)."""


class FromRoot(_Model):
    """Decisions and standing rules a parent has for a nested run (`__hitl_mail`)."""

    seq: int
    decisions: list[DecisionRecord] = Field(default_factory=list)
    rules: dict[str, DecisionKind] = Field(default_factory=dict)
    """Older form of `standing`; read, never written."""
    token: str = ""
    """Unused (kept so older payloads parse)."""
    standing: list[StandingRule] = Field(default_factory=list)


class ReadRunInput(_Model):
    """Input of `read_run`: query another run of the graph (`__hitl_report` / `__hitl_mail`)."""

    workflow_id: str
    run_id: str | None = None
    query: str
    """`QUERY_REPORT` or `QUERY_MAIL`."""
    call_id: str
    """The nested run's call id at its parent (the mail's address)."""


class ReadRunOutput(_Model):
    """Output of `read_run`: the answer, or `None` when the run is gone."""

    report: ChildReport | None = None
    mail: FromRoot | None = None


RunEventType = Literal[
    "agent_updated",
    "message",
    "model_text_delta",
    "tool_called",
    "approval_requested",
    "approval_decided",
    "tool_started",
    "tool_finished",
    "handoff",
    "paused",
    "resumed",
    "final_output",
    "run_failed",
]


class RunEvent(_Model):
    """One thing that happened in a run, published on its event stream (topic `events`).

    Offsets on the stream order events and let a subscriber resume after a disconnect without
    loss or duplicates.
    """

    type: RunEventType
    turn: int = 0
    agent: str | None = None
    call_id: str | None = None
    tool: str | None = None
    text: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    offset: int | None = None
    """Position on the stream (set by subscribers; resume from `offset + 1`)."""


class RefusedDecision(_Model):
    """A message the run refused and kept a record of.

    Signals cannot return errors, so every refused signal is recorded; an update refused by its
    validator leaves no trace in history (its caller gets the error), except a decision that
    arrived after its call's deadline: that one is recorded, so the person can see afterwards
    why it did not apply.
    """

    received_at: datetime
    name: str
    payload: str
    error_type: str
    message: str
    via: Literal["signal", "update"] = "signal"
    call_id: str | None = None


class RunStatus(_Model):
    """Answer of the `status` query and of the `wait` / `decide` updates."""

    _sparse: ClassVar[bool] = False  # read by operators as JSON: complete

    workflow_id: str
    run_id: str
    phase: Phase
    agent: str
    current_agent: str | None = None
    current_agent_name: str | None = None
    turn: int = 0
    pending: list[PendingApproval] = Field(default_factory=list)
    decisions: list[DecisionRecord] = Field(default_factory=list)
    refused: list[RefusedDecision] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    items: int = 0
    final_output: Any = None
    error: RunErrorInfo | None = None
    continued_as_new: bool = False


class RunErrorInfo(_Model):
    """Why a run failed, in the typed form clients turn back into exceptions."""

    type: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class TranscriptQuery(_Model):
    """Argument of the `transcript` query: a slice of the model input items."""

    start: int = 0
    end: int | None = None


class SettledStatus(RunStatus):
    """What the `wait` and `decide` updates return: a `RunStatus`, stored sparse in history.

    It is recorded in history with every such update, so it stays small whatever the run holds:
    at most 50 pending calls, their long texts cut to 1,000 characters; no refused messages; the
    final output only when it is under 16 KB; and only the decisions the `decide` itself made.
    The `status` and `snapshot` queries and the run's result have everything.
    """

    _sparse: ClassVar[bool] = True


class TranscriptPage(_Model):
    """Answer of the `transcript` query."""

    items: list[dict[str, Any]]
    total: int


class RunSnapshot(_Model):
    """Answer of the `snapshot` query: status plus the items produced so far."""

    _sparse: ClassVar[bool] = False  # read by operators as JSON: complete

    status: RunStatus
    input_items: list[dict[str, Any]]
    new_items: list[RunItem]


# --------------------------------------------------------------------------- activities


class RunContextData(_Model):
    """The run context as activities receive it: its JSON value and the type to rebuild."""

    value: Any = None
    type: str | None = None
    deserializer: str | None = None
    """Import reference of a function rebuilding the context from `value`."""


class ResolveAgentInput(_Model):
    """Input of `resolve_agent`: which registered agent, plus references to check."""

    agent: str
    run_config: RunConfigSpec = Field(default_factory=RunConfigSpec)


class TranscriptRef(_Model):
    """Where a model activity fetches its transcript (the `transcript` query of this run)."""

    workflow_id: str
    run_id: str
    end: int


class ModelTool(_Model):
    """A tool as offered to the model."""

    name: str
    description: str
    params_json_schema: dict[str, Any]
    strict: bool = True


class CallModelInput(_Model):
    """Input of `call_model`. The transcript is inline for local activities, else by reference."""

    root_agent: str
    agent_id: str
    agent_name: str
    model: ModelSpec
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


class InputFilterRecord(_Model):
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


class ModelResponse(_Model):
    """Output of `call_model`: Responses output items, usage and a validated final output."""

    output: list[dict[str, Any]]
    usage: Usage = Field(default_factory=Usage)
    final_output: Any = None
    has_final_output: bool = False
    response_id: str | None = None
    input_filter: InputFilterRecord | None = None
    """What the run's `call_model_input_filter` did to this call (`None`: no filter ran)."""


class PlanCall(_Model):
    """A call to plan: evaluate approval, validate arguments."""

    call_id: str
    tool_name: str
    arguments: str


class GuardrailVerdict(_Model):
    """One guardrail's result."""

    name: str
    tripwire_triggered: bool = False
    output_info: Any = None


class GuardrailsInput(_Model):
    """Input of `run_guardrails`."""

    kind: Literal["input", "output"]
    root_agent: str
    agent_id: str
    run_guardrails: list[str] = Field(default_factory=list)
    input: str | list[dict[str, Any]] = ""
    final_output: Any = None
    context: RunContextData | None = None
    workflow_id: str = ""


class GuardrailsOutput(_Model):
    """Output of `run_guardrails`."""

    verdicts: list[GuardrailVerdict]


class HandoffFilterInput(_Model):
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


class HandoffFilterOutput(_Model):
    """Output of `filter_handoff`: what the next agent starts from."""

    input_history: list[dict[str, Any]]
    pre_handoff_items: list[RunItem]
    new_items: list[RunItem]


class PlanToolsInput(_Model):
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


class CallPlan(_Model):
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


class PlanToolsOutput(_Model):
    """Output of `plan_tools`, one plan per call, same order."""

    plans: list[CallPlan]


class ExecuteToolInput(_Model):
    """Input of `execute_tool`."""

    root_agent: str
    agent_id: str
    tool_name: str
    call_id: str
    arguments: str
    idempotency_key: str
    workflow_id: str
    context: RunContextData | None = None
    decision: DecisionRecord | None = None
    max_output_bytes: int = 128 * 1024


class ToolOutput(_Model):
    """Output of `execute_tool`: the text the model sees."""

    output: str
    is_error: bool = False
    truncated: bool = False
    guardrail: str | None = None
    """The tool input guardrail that rejected the call (it did not run)."""
    context: RunContextData | None = None
    """The run context after the tool, when the tool changed it."""


class RejectionTextInput(_Model):
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


class RejectionTextOutput(_Model):
    """Output of `rejection_text`: `None` keeps the default message."""

    message: str | None = None


class SessionInput(_Model):
    """Input of the `AgentSession` workflow (and its state across continue-as-new)."""

    session_id: str
    items: list[dict[str, Any]] = Field(default_factory=list)
    applied: list[str] = Field(default_factory=list)
    """Runs whose turn was appended (so a retried append is applied once)."""


class SessionAppend(_Model):
    """A run's turn, appended to a session when the run completes."""

    run_id: str
    items: list[dict[str, Any]]


class SessionItems(_Model):
    """A session's transcript (answer of the `items` query and of `load_session`)."""

    items: list[dict[str, Any]]


class SessionRef(_Model):
    """Input of `load_session` / `save_session`."""

    session_id: str
    task_queue: str
    append: SessionAppend | None = None


class ResolvedRun(_Model):
    """Output of `resolve_agent`: the pinned graph plus what the worker's cluster supports."""

    graph: AgentGraph
    search_attributes: bool = False
    """The custom search attributes are registered, so the run keeps them current."""
    tracing: bool = False
    """The worker traces with OpenTelemetry (the run records its own spans)."""


class HandleRunErrorInput(_Model):
    """Input of `handle_run_error`."""

    handler: str
    kind: Literal["max_turns"] = "max_turns"
    message: str
    max_turns: int
    context: RunContextData | None = None
    input_items: list[dict[str, Any]] = Field(default_factory=list)
    new_items: list[RunItem] = Field(default_factory=list)


class HandleRunErrorOutput(_Model):
    """Output of `handle_run_error`: `handled=False` means the error stands."""

    handled: bool = False
    final_output: Any = None
    include_in_history: bool = True


for _m in list(globals().values()):
    if isinstance(_m, type) and issubclass(_m, BaseModel) and _m is not BaseModel:
        _m.model_rebuild()
