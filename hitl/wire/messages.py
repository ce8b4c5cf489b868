"""What callers send to a run and what it answers: updates, signals, queries, events."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from hitl.wire.base import WireModel, derived
from hitl.wire.decisions import (
    Approval,
    CallAction,
    DecisionRecord,
    Extension,
    InputRequest,
    UncertainCall,
)
from hitl.wire.names import DecisionKind, Phase
from hitl.wire.policy import PinnedPolicy, PolicyChange, PolicyVerdict
from hitl.wire.runs import (
    ApprovalRequestData,
    RefusedDecision,
    RunContextData,
    RunErrorInfo,
    RunItem,
    StandingRule,
    Usage,
)

__all__ = [
    "AnswerInput",
    "ChildReport",
    "DecideInput",
    "DecisionInput",
    "DecisionRequest",
    "EditPreview",
    "EditPreviewInput",
    "ExtendInput",
    "FromRoot",
    "HeldTranscript",
    "InboxEntry",
    "InboxMemo",
    "PendingApproval",
    "ReadRunInput",
    "ReadRunOutput",
    "ResolveInput",
    "RunEvent",
    "RunEventType",
    "RunSnapshot",
    "RunStatus",
    "SettledStatus",
    "SignedFields",
    "TranscriptPage",
    "TranscriptQuery",
    "WaitInput",
]


class SignedFields(WireModel):
    """What every decision a person makes about a call may carry besides its content.

    `seen_sha256` binds the decision to the call's arguments as the person saw them (the call's
    `PendingApproval.arguments_sha256`): when given, a run refuses the decision if the
    arguments changed since (`ArgumentsChanged`). The signature fields make it a signed
    decision (see `hitl.signing`); a call whose rules require signed decisions takes none
    without them.
    """

    seen_sha256: str | None = None
    """SHA-256 (hex) of the call's arguments as the person saw them (`arguments_sha256`)."""
    key_id: str | None = None
    """Signed decisions: the approver's key (as the worker's approver directory names it)."""
    signature: str | None = None
    """Signed decisions: base64 Ed25519 signature over `hitl.signing.decision_message(...)`."""
    expires_at: datetime | None = None
    """Signed decisions: the signature is not accepted after this time (the run's clock)."""
    client: str | None = None
    """What sent it, as the sender says (`hitl`, `runner`, `console`; unset: the `temporal`
    CLI, the UI or another API client). For the audit: the signature, not this, proves who
    decided."""


class DecisionInput(SignedFields):
    """Payload of the `approve` and `reject` updates and signals. Only `call_id` is required.

    `temporal workflow update execute --workflow-id W --name approve
    --input '{"call_id": "t1.1"}'`
    """

    model_config = ConfigDict(extra="forbid")

    call_id: str
    always: bool = False
    message: str | None = None
    approver: str | None = None
    reason: str | None = None
    arguments: dict[str, Any] | None = None
    """Approve with these arguments instead of the model's (edit, then approve): checked
    against the tool's schema, and the call's approval requirement is evaluated on them."""


class EditPreviewInput(WireModel):
    """Payload of the `preview_edit` update: how a call would read with these arguments.

    Changes nothing and decides nothing, so it carries no signature (one could never be taken
    for an approval): the person then approves the edit with `approve` and `arguments`.

    `temporal workflow update execute --workflow-id W --name preview_edit
    --input '{"call_id": "t1.1", "arguments": {"path": "notes.txt"}, "approver": "you"}'`
    """

    model_config = ConfigDict(extra="forbid")

    call_id: str
    arguments: dict[str, Any]
    approver: str | None = None
    seen_sha256: str | None = None
    """The call's arguments as the person saw them before editing (`arguments_sha256`)."""


class EditPreview(WireModel):
    """Answer of `preview_edit`: the edited call as its tool plans it, before anyone approves.

    `refusal` says why the tool would refuse these arguments (then approving them is refused
    too); otherwise `request` is the approval request the tool writes for them (title, message,
    preview such as a diff), and `arguments_sha256` names the edited arguments.
    """

    _sparse: ClassVar[bool] = False  # read by operators as JSON: complete

    call_id: str
    arguments: str
    arguments_sha256: str
    request: ApprovalRequestData | None = None
    refusal: str | None = None
    needs_approval: bool = True
    required_approvals: int = 1


class ResolveInput(SignedFields):
    """Payload of the `resolve` update: what happened to an uncertain call's effect.

    `happened` (with the tool's `output`, as the model should read it), `retry` (run the tool
    again, with the same idempotency key), or `give_up` (the model reads `message` as the
    tool's error).

    `temporal workflow update execute --workflow-id W --name resolve
    --input '{"call_id": "t1.1", "outcome": "happened", "output": "refund R-7 issued"}'`
    """

    model_config = ConfigDict(extra="forbid")

    call_id: str
    outcome: Literal["happened", "retry", "give_up"]
    output: str | None = None
    message: str | None = None
    approver: str | None = None
    reason: str | None = None
    round: int | None = None
    """The call's `PendingApproval.round` the person saw (required when signed)."""


class AnswerInput(SignedFields):
    """Payload of the `answer` update: a person answers the question a tool asks.

    MCP elicitation: `accept` with `content` fitting the requested schema, `decline` or `cancel`.

    `temporal workflow update execute --workflow-id W --name answer
    --input '{"call_id": "t1.1", "content": {"confirm": true}, "approver": "you"}'`
    """

    model_config = ConfigDict(extra="forbid")

    call_id: str
    action: Literal["accept", "decline", "cancel"] = "accept"
    content: dict[str, Any] | None = None
    approver: str | None = None
    reason: str | None = None
    round: int | None = None
    """The call's `PendingApproval.round` the person saw (required when signed)."""


class ExtendInput(SignedFields):
    """Payload of the `extend` update: move a pending call's deadline `seconds` later.

    `temporal workflow update execute --workflow-id W --name extend
    --input '{"call_id": "t1.1", "seconds": 172800, "approver": "you"}'`
    """

    model_config = ConfigDict(extra="forbid")

    call_id: str
    seconds: float
    approver: str | None = None
    reason: str | None = None
    round: int | None = None
    """The call's `PendingApproval.round` the person saw (required when signed)."""


class DecisionRequest(DecisionInput):
    """One decision inside a `decide` batch."""

    kind: DecisionKind


class DecideInput(WireModel):
    """Payload of the `decide` update: decisions applied atomically, then optionally wait."""

    decisions: list[DecisionRequest]
    wait: bool = True
    context: RunContextData | None = None
    """A new run context for the rest of the run (`RunState.from_string_with_context`)."""
    brief: bool = False
    """`True`: when the run has completed by the time it answers, the answer says only that
    (the caller reads the run's result, as `Runner.run` does): its output, decisions and usage
    are not stored a second time in history."""
    items: bool = False
    """Also return the transcript when the run pauses or completes and it is small, as
    `WaitInput.items` does (what `Runner.run` needs: a run's result leaves it out)."""
    held: HeldTranscript | None = None
    """With `items`: what of the transcript the caller holds already (the answer leaves it out)."""


class InboxEntry(WireModel):
    """A pending call as a paused run's memo lists it (no arguments; the title cut)."""

    call_id: str
    tool_name: str
    agent_id: str
    agent_name: str = derived("agent_name", "agent_id")
    title: str
    path: list[str] = Field(default_factory=list)
    requested_at: datetime | None = None
    """Since when the call waits for what it waits for now (`PendingApproval.waiting_since`:
    written so by runs of this version; older runs wrote the approval request's time)."""
    deadline: datetime | None = None
    kind: Literal["approval", "uncertain", "input"] = "approval"
    required_approvals: int = 1
    approved_by: list[str] = Field(default_factory=list)
    approvers: list[str] = Field(default_factory=list)
    workflow_id: str | None = None
    """The run that owns the call, when it is a nested run (calls inside agent tools); `None`:
    the run whose memo this is (which runs of earlier releases named as well)."""


class InboxMemo(WireModel):
    """The memo field `hitl_inbox`: what a paused run waits on, readable from visibility."""

    calls: list[InboxEntry] = Field(default_factory=list)
    total: int = 0
    run: str = ""
    """The first run id of the run's chain (`workflow.info().first_execution_run_id`): the
    server assigns it when the run starts, so a memo a starter wrote cannot carry it, and an
    inbox lists a memo only when it matches the run's visibility record (`first_run_id`)."""


class HeldTranscript(WireModel):
    """What of a run's transcript a caller holds already: its input items and `new_items`.

    An answer with items (`WaitInput.items`) then carries only what came after, if `digest`
    is `transcript_digest` of exactly what the run has in those places; else (the run rewrote
    them, as a handoff's input filter does, or the caller's copy differs) it carries it all.
    """

    new_items: int = Field(default=0, ge=0)
    """How many of the run's first new items the caller holds."""
    digest: str = Field(default="", max_length=64)
    """`transcript_digest` of the input items and those new items, as the caller holds them."""


class WaitInput(WireModel):
    """Payload of the `wait` update: returns once the run pauses for a person or finishes."""

    items: bool = False
    """Also return the transcript so far when the run pauses (with the whole status) or
    completes, and it is small (`TRANSCRIPT_INLINE_BYTES`): what `Runner.run` needs, without a
    `snapshot` query (a round trip through the server to a worker)."""
    held: HeldTranscript | None = None
    """With `items`: what of the transcript the caller holds already (the answer leaves it out)."""


class PendingApproval(WireModel):
    """A tool call waiting for a person, as shown by `status` and `RunResult.interruptions`."""

    call_id: str
    tool_name: str
    agent_id: str
    agent_name: str = derived("agent_name", "agent_id")
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
    required_approvals: int = 1
    """Distinct people who must approve it (four eyes: 2); one rejection rejects it."""
    approvals: list[Approval] = Field(default_factory=list)
    """Who has approved it so far, while more approvals are needed."""
    extensions: list[Extension] = Field(default_factory=list)
    """Who moved its deadline, and when."""
    kind: Literal["approval", "uncertain", "input"] = "approval"
    """`uncertain`: its tool's attempt died midway; a person says what happened (`resolve`).
    `input`: its tool asks a person a question (MCP elicitation; `answer`)."""
    uncertain: UncertainCall | None = None
    """For an uncertain call: since when, and the error its attempt ended with."""
    input_request: InputRequest | None = None
    """For a call asking for input: the question and the form's schema."""
    reminded_at: datetime | None = None
    escalated_at: datetime | None = None
    original_arguments: str | None = None
    """The model's arguments, when a person edited them (the approval is still to come)."""
    arguments_sha256: str | None = None
    """SHA-256 (hex) of `arguments` (UTF-8): what a decision names as `seen_sha256`."""
    round: int = 0
    """Changes with every question, answer, uncertain attempt, resolution and extension of
    the call: what an answer, resolution or extension names as `round`."""
    signed_decisions: bool = False
    """Decisions on this call must be signed (`hitl.signing`)."""
    model_call_id: str | None = None
    """The id the model gave the call (the run assigns `call_id` itself), as data."""

    @property
    def waiting_since(self) -> datetime | None:
        """Since when the call waits for what it waits for now.

        A question (`input`) waits since it was asked, an `uncertain` call since its attempt
        died; an approval since it was requested (`requested_at`, which a call that needed no
        approval never has).
        """
        if self.kind == "input" and self.input_request is not None:
            return self.input_request.since
        if self.kind == "uncertain" and self.uncertain is not None:
            return self.uncertain.since
        return self.requested_at


class ChildReport(WireModel):
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


class FromRoot(WireModel):
    """Decisions and standing rules a parent has for a nested run (`__hitl_mail`)."""

    seq: int
    decisions: list[DecisionRecord] = Field(default_factory=list)
    rules: dict[str, DecisionKind] = Field(default_factory=dict)
    """Older form of `standing`; read, never written."""
    token: str = ""
    """Unused (kept so older payloads parse)."""
    standing: list[StandingRule] = Field(default_factory=list)


class ReadRunInput(WireModel):
    """Input of `read_run`: query another run of the graph (`__hitl_report` / `__hitl_mail`)."""

    workflow_id: str
    run_id: str | None = None
    query: str
    """`QUERY_REPORT` or `QUERY_MAIL`."""
    call_id: str
    """The nested run's call id at its parent (the mail's address)."""


class ReadRunOutput(WireModel):
    """Output of `read_run`: the answer, or `None` when the run is gone."""

    report: ChildReport | None = None
    mail: FromRoot | None = None


RunEventType = Literal[
    "agent_updated",
    "message",
    "reasoning",
    "model_text_delta",
    "tool_called",
    "approval_requested",
    "approval_decided",
    "deadline_extended",
    "arguments_edited",
    "approval_reminder",
    "approval_escalated",
    "call_uncertain",
    "call_asks",
    "call_resolved",
    "tool_started",
    "tool_finished",
    "handoff",
    "paused",
    "resumed",
    "final_output",
    "run_failed",
]


class RunEvent(WireModel):
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


class RunStatus(WireModel):
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
    actions: list[CallAction] = Field(default_factory=list)
    policy: PinnedPolicy | None = None
    """The approval policy the run pinned (its document too: `hitl policy explain` reads it)."""
    verdicts: list[PolicyVerdict] = Field(default_factory=list)
    """What that policy said about each call it matched."""
    policy_changes: list[PolicyChange] = Field(default_factory=list)
    """Admins' `apply_policy` updates: who changed the pinned policy, when, why, and what each
    did to the pending calls."""
    """Every `resolve`, `extend` and `answer` of the run, also of calls whose turn is over."""
    last_response_id: str | None = None
    """The id of the run's latest Responses API response (for `previous_response_id`)."""


class TranscriptQuery(WireModel):
    """Argument of the `transcript` query: a slice of the model input items."""

    start: int = 0
    end: int | None = None


class SettledStatus(RunStatus):
    """What the `wait` and `decide` updates return: a `RunStatus`, stored sparse in history.

    It is recorded in history with every such update, so it stays small whatever the run holds:
    at most 50 pending calls, their long texts cut to 1,000 characters; no refused messages and
    no actions; the final output only when it is under 16 KB; and only the decisions the
    `decide` itself made.
    The `status` and `snapshot` queries and the run's result have everything.
    """

    _sparse: ClassVar[bool] = True

    input_items: list[dict[str, Any]] | None = None
    """With `WaitInput(items=True)` on a paused run: its input items (then the status is whole:
    every pending call and decision, texts uncut), or on a completed run. `None` with
    `new_items` set: the caller holds them (`HeldTranscript`)."""
    new_items: list[RunItem] | None = None
    """With `WaitInput(items=True)` on a paused or completed run: the items it produced so far,
    from `items_from` on."""
    items_from: int = 0
    """`new_items` start at this index of the run's new items: the caller holds those before
    (`HeldTranscript.new_items`), and the input items."""


class TranscriptPage(WireModel):
    """Answer of the `transcript` query."""

    items: list[dict[str, Any]]
    total: int


class RunSnapshot(WireModel):
    """Answer of the `snapshot` query: status plus the items produced so far."""

    _sparse: ClassVar[bool] = False  # read by operators as JSON: complete

    status: RunStatus
    input_items: list[dict[str, Any]]
    new_items: list[RunItem]
    call_states: dict[str, str] = Field(default_factory=dict)
    """The state of each call of the current turn (`done`: it ran; its output joins the
    transcript once every call of the turn has one)."""
    schemas: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """The JSON schema of each pending call's tool, by call id, for tools that allow edits (the
    console's edit form)."""
