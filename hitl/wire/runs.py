"""A run: its input, its state (what continue-as-new carries), its calls, decisions, result.

What people do to a call (decisions, approvals, edits, resolutions, answers) is in
`hitl.wire.decisions`.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, Literal

from pydantic import Field
from temporalio.contrib.workflow_streams import WorkflowStreamState

from hitl.wire.base import WireModel, derived

# Their home was this module: importable from here too.
from hitl.wire.decisions import Approval as Approval
from hitl.wire.decisions import ArgumentEdit as ArgumentEdit
from hitl.wire.decisions import CallAction as CallAction
from hitl.wire.decisions import DecisionRecord as DecisionRecord
from hitl.wire.decisions import Extension as Extension
from hitl.wire.decisions import InputAnswer as InputAnswer
from hitl.wire.decisions import InputRequest as InputRequest
from hitl.wire.decisions import Resolution as Resolution
from hitl.wire.decisions import UncertainCall as UncertainCall
from hitl.wire.decisions import canonical_arguments as canonical_arguments
from hitl.wire.decisions import expiry_text as expiry_text
from hitl.wire.decisions import text_digest as text_digest
from hitl.wire.graph import AgentGraph, ApproverDirectory, RunConfigSpec
from hitl.wire.names import DecisionKind
from hitl.wire.policy import PinnedPolicy, PolicyChange, PolicyVerdict

__all__ = [
    "ApprovalRequestData",
    "CallRecord",
    "CarriedState",
    "ParentLink",
    "PolicyDecision",
    "RefusedDecision",
    "RunContextData",
    "RunErrorInfo",
    "RunInput",
    "RunItem",
    "RunItemType",
    "RunOutput",
    "StandingRule",
    "TurnInfo",
    "Usage",
    "transcript_digest",
]


class Usage(WireModel):
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
    "mcp_list_tools_item",
    "mcp_call_item",
]
"""`mcp_list_tools_item` / `mcp_call_item`: what a hosted MCP server listed and ran (the
provider ran it; kept in the transcript, never executed by the run)."""


class RunItem(WireModel):
    """One item the run produced: an OpenAI Responses item plus who produced it."""

    type: RunItemType
    agent_id: str
    agent_name: str = derived("agent_name", "agent_id")
    raw_item: dict[str, Any]
    call_id: str | None = None
    """For a tool call or its output: the run's id of the call (`raw_item` names the model's)."""


def transcript_digest(input_items: list[dict[str, Any]], new_items: list[RunItem]) -> str:
    """The first 16 hex digits of a SHA-256 naming a transcript (`HeldTranscript.digest`).

    The caller's copy and the run's give the same digest when they hold the same items. It
    tells a stale copy from the run's (a handoff's input filter rewrote it), not an adversary
    from a friend: a caller naming the wrong items only gets a wrong transcript back itself,
    and the run's state is not touched. 64 bits keep it short in the history of every resume.
    """
    data = [input_items, [i.model_dump(mode="json") for i in new_items]]
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class RunContextData(WireModel):
    """The run context as activities receive it: its JSON value and the type to rebuild."""

    value: Any = None
    type: str | None = None
    deserializer: str | None = None
    """Import reference of a function rebuilding the context from `value`."""


class ApprovalRequestData(WireModel):
    """What a person sees before deciding (rendered in an activity, before the run pauses)."""

    title: str
    message: str
    preview: str | None = None
    preview_label: str | None = None
    primary_label: str = "Approve"
    secondary_label: str = "Reject"
    note: str | None = None


class PolicyDecision(WireModel):
    """A decision made by an approver callback instead of a person."""

    kind: DecisionKind
    message: str | None = None
    reason: str | None = None
    approver: str
    run_level: bool = False
    """Made by the run's approver (`RunConfig.approver`), not the tool's own: it may reject,
    but it approves only calls of tools that name no approvers of their own (a starter's
    configuration never widens who may decide)."""


class StandingRule(WireModel):
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


class RunErrorInfo(WireModel):
    """Why a run failed, in the typed form clients turn back into exceptions."""

    type: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class RefusedDecision(WireModel):
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
    """The call it named (when it could be read)."""
    approver: str | None = None
    """The approver it named (when it could be read): who was refused."""


class CallRecord(WireModel):
    """A tool call of the current turn and everything decided about it."""

    call_id: str
    tool_name: str
    agent_id: str
    agent_name: str = derived("agent_name", "agent_id")
    arguments: str
    turn: int
    state: Literal[
        "planning",
        "awaiting_approval",
        "approved",
        "running",
        "done",
        "rejected",
        "refused",
        "expired",
        "uncertain",
        "awaiting_input",
    ] = "planning"
    needs_approval: bool = False
    requested_at: datetime | None = None
    decision: DecisionRecord | None = None
    output: str | None = None
    is_error: bool = False
    request: ApprovalRequestData | None = None
    approvers: list[str] = Field(default_factory=list)
    deadline: datetime | None = None
    required_approvals: int = 1
    """Distinct people who must approve before the call runs (four eyes: 2)."""
    policy: PolicyVerdict | None = None
    """What the run's pinned approval policy said about the call (`None`: no policy, or no
    rule matched)."""
    approvals: list[Approval] = Field(default_factory=list)
    """Approvals so far, while more are needed."""
    extensions: list[Extension] = Field(default_factory=list)
    original_arguments: str | None = None
    """The model's arguments, when a person edited them (`arguments` are what runs)."""
    edits: list[ArgumentEdit] = Field(default_factory=list)
    """Who edited the arguments, when, from what to what."""
    reminded_at: datetime | None = None
    """When people were reminded of the call (`remind_after`)."""
    escalated_at: datetime | None = None
    """When the call escalated (`escalate_after`): `escalate_to` joined its approvers."""
    announced: bool = False
    """People were told the call waits (the `waiting` notification)."""
    uncertain: UncertainCall | None = None
    """The tool's attempt died midway: a person says what happened (`resolve`)."""
    resolutions: list[Resolution] = Field(default_factory=list)
    """Every resolution of the call's uncertain attempts, in order."""
    input_request: InputRequest | None = None
    """The question the tool's server asks a person now (MCP elicitation; `answer`)."""
    answers: list[InputAnswer] = Field(default_factory=list)
    """Answers given to the tool's questions, in the order it asked them."""
    model_call_id: str | None = None
    """The id the model gave the call; `call_id` is the run's own (`t<turn>.<n>`), so every
    call can be named in an update, a URL or a terminal whatever the model sent. `None`: the
    model's id is `call_id` (runs recorded before the run assigned its own)."""
    call_type: Literal["shell_call", "apply_patch_call", "mcp_approval_request"] | None = None
    """The model's item when it was not a `function_call`: the call is answered with a
    `shell_call_output` / `apply_patch_call_output` / `mcp_approval_response` item."""
    round: int = 0
    """Bumped on every question, answer, uncertain attempt, resolution and extension: an
    answer, resolution or extension names the round it was made in (`PendingApproval.round`),
    so one made for an earlier round (a copy from history) does not apply to a later one."""

    @property
    def model_id(self) -> str:
        """The call id the model used (what its output item names)."""
        return self.model_call_id or self.call_id


class TurnInfo(WireModel):
    """The turn in progress when a run continued as new while waiting for people."""

    start: int
    """Index in `new_items` where the turn's items begin."""
    handoff_target: str | None = None
    handoff_call: str | None = None


class ParentLink(WireModel):
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
    notify: bool = False
    """The root's worker has notifiers: the nested run notifies about its calls too."""
    token: str = ""
    """Unused since nested runs read each other by query (kept so older payloads parse)."""
    run_call_ids: bool = False
    """The root names its calls itself; so does the nested run (`CarriedState.run_call_ids`)."""


class CarriedState(WireModel):
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
    actions: list[CallAction] = Field(default_factory=list)
    """Every `resolve`, `extend` and `answer` of the run (the latest `MAX_ACTIONS_KEPT`)."""
    search_attributes: bool = False
    own_input: list[dict[str, Any]] = Field(default_factory=list)
    """This run's own input items (what it appends to its session, with what it produced)."""
    context: RunContextData | None = None
    """The run context as it is now (tools and resumes may have changed it)."""
    tracing: bool = False
    stream: WorkflowStreamState | None = None
    """The run's event stream, carried so subscribers lose nothing across continue-as-new."""
    seen_from_root: int = 0
    """A nested run: the last `FromRoot.seq` it applied."""
    directory: ApproverDirectory | None = None
    """The worker's approver directory (groups, keys) when the run started: pinned."""
    policy: PinnedPolicy | None = None
    """The worker's approval policy when the run started (docs/policies.md): pinned."""
    verdicts: list[PolicyVerdict] = Field(default_factory=list)
    """What the pinned policy said about each call it matched (enforced or `log_only`)."""
    policy_changes: list[PolicyChange] = Field(default_factory=list)
    """Admins' `apply_policy` updates: who changed `policy`, when, why (the latest 50)."""
    notify: bool = False
    """The worker that started the run has notifiers: tell them about waits and decisions."""
    outcomes_attribute: bool = False
    """The run keeps `HitlOutcomes` (registered when it started; older runs never do)."""
    response_id: str | None = None
    """The last model response, when the provider keeps the conversation."""
    response_items: int = 0
    """Transcript items the provider holds through `response_id`."""
    response_agent: str | None = None
    """The agent whose call made `response_id` (a handoff starts a new conversation)."""
    conversation_id: str | None = None
    """The provider's conversation (OpenAI Conversations API) every model call reads and
    writes (`Runner.run(conversation_id=...)`); `response_items` counts what it holds."""
    provider_history: bool = False
    """The provider holds turns from before this run (it started from a `previous_response_id`
    or in a `conversation_id`): the run's transcript alone is not the conversation, so model
    calls continue the provider's state across handoffs, and a lost response fails the call
    (`ConversationLost`) instead of sending the transcript again."""
    last_response_id: str | None = None
    """The id of the run's latest Responses API response (`RunResult.last_response_id`)."""
    chains_restarted: int = 0
    """Model calls whose previous response the provider had lost, answered by sending the whole
    transcript (a new response chain)."""
    inbox_memo: bool = False
    """The run keeps its pending calls in its memo (`INBOX_MEMO`; runs started before never)."""
    inbox_shown: list[str] = Field(default_factory=list)
    """What the memo lists now (call id and approvals so far), so a continued run does not
    write it again."""
    inbox_rounds: bool = False
    """The memo's key also holds each call's kind and round (`ResolvedRun.inbox_rounds`; runs
    started before never): a call that turns uncertain or asks a new question is listed anew."""
    calls: list[CallRecord] = Field(default_factory=list)
    """The calls of the turn in progress (see the class docstring)."""
    open_turn: TurnInfo | None = None
    """The turn in progress, when there is one."""
    turns_here: int = 0
    """Model turns taken since this run (of the chain) started: continue-as-new waits for one,
    so no threshold can make a run continue as new forever without progress."""
    run_call_ids: bool = False
    """The run names its calls itself (`ResolvedRun.run_call_ids`; nested runs: their root's)."""
    attributes: list[str] | None = None
    """The search attributes the run keeps (`ResolvedRun.attributes`; `None`: every one, or
    none, as `search_attributes` says)."""


class RunInput(WireModel):
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
    directory: ApproverDirectory | None = None
    """Nested runs: the approver directory their root pinned (groups and keys)."""
    policy: PinnedPolicy | None = None
    """Nested runs: the approval policy their root pinned (internal, like `directory`)."""
    previous_response_id: str | None = None
    """Continue the provider's conversation from this response (OpenAI Responses API): model
    calls send only what is new. Exclusive with `conversation_id` and `session`."""
    conversation_id: str | None = None
    """Read and write this provider conversation (OpenAI Conversations API): model calls send
    only what it does not hold yet. Exclusive with `previous_response_id` and `session`."""


class RunOutput(WireModel):
    """Result of a completed `AgentRun`.

    It leaves the transcript out (`transcript_omitted`): every item of it is in history
    already, as a model reply or a tool output. Read it with the `snapshot` query, or ask the
    `wait` / `decide` that sees the run complete for it (`WaitInput.items`), as `Runner.run`
    does. Runs of older versions kept it here while the result stayed small.
    """

    final_output: Any = None
    last_agent: str
    last_agent_name: str = derived("last_agent_name", "last_agent")
    input_items: list[dict[str, Any]]
    new_items: list[RunItem]
    usage: Usage
    decisions: list[DecisionRecord]
    turns: int
    run_id: str = ""
    actions: list[CallAction] = Field(default_factory=list)
    """Every `resolve`, `extend` and `answer` of the run, for the audit."""
    last_response_id: str | None = None
    """The id of the run's latest Responses API response (for `previous_response_id`)."""
    transcript_omitted: bool = False
    """The transcript was left out (`input_items` and `new_items` are empty): read it with the
    `snapshot` query. Always so since issue 31; older versions left it out only when the
    result with it would pass `TRANSCRIPT_INLINE_BYTES` (16 KB; before that, Temporal's payload
    limit)."""
