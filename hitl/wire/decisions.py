"""What people do to a call: decide, approve, edit, resolve, extend and answer it.

Also the digests that bind a decision to the arguments it was made on. A run's `CallRecord` and
`CarriedState` (`hitl.wire.runs`) hold these; every name is also in `hitl.wire`, whose package
resolves the models' references to each other.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from hitl.wire.base import WireModel
from hitl.wire.names import DecisionKind, DecisionOutcome, DecisionSource, DecisionVia

if TYPE_CHECKING:
    from hitl.wire.messages import DecisionInput

__all__ = [
    "Approval",
    "ArgumentEdit",
    "CallAction",
    "DecisionRecord",
    "Extension",
    "InputAnswer",
    "InputRequest",
    "Resolution",
    "UncertainCall",
    "canonical_arguments",
    "expiry_text",
    "text_digest",
]


def expiry_text(call_id: str, at: datetime) -> str:
    """The refusal of a decision that comes after a call's deadline: what happened, when.

    One text for every door (update, signal, CLI, client): the call ran nothing.
    """
    return f"call '{call_id}' expired at {at.isoformat()}; nothing ran"


def canonical_arguments(arguments: dict[str, Any]) -> str:
    """Edited arguments as the JSON text a tool receives (compact, keys in the given order)."""
    return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)


def text_digest(text: str) -> str:
    """Hex SHA-256 of `text`'s UTF-8 bytes: how a call's arguments are named in a decision.

    A call's `PendingApproval.arguments_sha256` is this over the exact arguments text the run
    holds; a decision's `seen_sha256` repeats it, binding the decision to what was seen.
    """
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class ArgumentEdit(WireModel):
    """A person's replacement of a pending call's arguments (edit, then approve)."""

    _sparse: ClassVar[bool] = False  # read by operators as JSON: complete

    approver: str | None = None
    edited_at: datetime
    before: str
    after: str


class UncertainCall(WireModel):
    """A call whose tool may or may not have had its effect; a person resolves it."""

    _sparse: ClassVar[bool] = False  # read by operators as JSON: complete

    since: datetime
    error: str
    attempts: int = 1
    resolution: Resolution | None = None


class InputRequest(WireModel):
    """A tool's server asks a person for input in the middle of a call (MCP elicitation)."""

    _sparse: ClassVar[bool] = False  # read by operators as JSON: complete

    server: str
    message: str
    requested_schema: dict[str, Any]
    """The form's JSON schema: an object of flat string, number, integer, boolean or enum
    properties (a client tool's: its result's type)."""
    since: datetime
    timeout_seconds: float | None = None
    """Seconds from `since` the run waits; then the tool is called with a `cancel` answer (a
    client tool's `answer_timeout`; `None`: no limit)."""


class InputAnswer(WireModel):
    """A person's answer to a tool's question: `accept` (with `content`), `decline`, `cancel`."""

    _sparse: ClassVar[bool] = False  # read by operators as JSON: complete

    question: str
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None
    approver: str | None = None
    reason: str | None = None
    answered_at: datetime
    verified: bool = False
    """Signed with a key the worker's approver directory gives `approver`."""


class Resolution(WireModel):
    """How a person resolved an uncertain call."""

    _sparse: ClassVar[bool] = False  # read by operators as JSON: complete

    outcome: Literal["happened", "retry", "give_up"]
    output: str | None = None
    message: str | None = None
    approver: str | None = None
    reason: str | None = None
    resolved_at: datetime
    verified: bool = False
    """Signed with a key the worker's approver directory gives `approver`."""


class Extension(WireModel):
    """A person moved a pending call's approval deadline later (`extend`)."""

    _sparse: ClassVar[bool] = False  # read by operators as JSON: complete

    approver: str | None = None
    reason: str | None = None
    extended_at: datetime
    previous: datetime
    deadline: datetime
    verified: bool = False
    """Signed with a key the worker's approver directory gives `approver`."""


class CallAction(WireModel):
    """What a person did to a call besides deciding it: a `resolve`, `extend` or `answer`.

    The run keeps every one (the latest `MAX_ACTIONS_KEPT`) after the call's turn and the run
    end, for the audit (`RunStatus.actions`, `RunOutput.actions`): who, when, what.
    """

    _sparse: ClassVar[bool] = False  # read by operators as JSON: complete

    kind: Literal["resolve", "extend", "answer"]
    call_id: str
    tool_name: str
    at: datetime
    approver: str | None = None
    reason: str | None = None
    verified: bool = False
    """Signed with a key the worker's approver directory gives `approver`."""
    outcome: str | None = None
    """`resolve`: `happened`, `retry` or `give_up`; `answer`: `accept`, `decline` or `cancel`."""
    text: str | None = None
    """`resolve`: the output given (`happened`) or the message (`give_up`); `answer`: the
    question it answered. Cut to 1,000 characters (the transcript has the whole output)."""
    content: dict[str, Any] | None = None
    """`answer`: the content given, when its JSON is at most 1 KB (else left out: the run's
    history holds the update)."""
    previous: datetime | None = None
    """`extend`: the deadline before."""
    deadline: datetime | None = None
    """`extend`: the deadline after."""


class Approval(WireModel):
    """One person's approval of a call that needs several (four eyes)."""

    approver: str
    reason: str | None = None
    via: DecisionVia = "update"
    approved_at: datetime
    arguments: str | None = None
    """The arguments this approver edited the call to (`None`: approved them as they were)."""
    verified: bool = False
    """Signed with a key the worker's approver directory gives `approver`."""
    arguments_sha256: str | None = None
    """SHA-256 (hex) of the call's arguments this approval is for: it counts only while the
    call still has them (`None`: recorded before approvals named their arguments)."""
    key_id: str | None = None
    """The key a verified approval was signed with."""

    def answers(self, d: DecisionInput) -> bool:
        """Whether approval `d` repeats this one (a retry)."""
        if d.arguments is not None and canonical_arguments(d.arguments) != self.arguments:
            return False
        return (d.approver, d.reason, d.always) == (self.approver, self.reason, False)


class DecisionRecord(WireModel):
    """A recorded decision: who decided what about which call, when, and how."""

    call_id: str
    tool_name: str
    kind: DecisionOutcome
    """`approve` or `reject`, or `expired`: the call's deadline passed without a decision (its
    own outcome, not a rejection; `source` is `deadline`)."""
    always: bool = False
    message: str | None = None
    approver: str | None = None
    reason: str | None = None
    source: DecisionSource = "person"
    via: DecisionVia = "update"
    decided_at: datetime
    approvals: list[Approval] = Field(default_factory=list)
    """For a call that needed several approvers: every approval, in order (a rejection lists
    the approvals it overruled)."""
    still_needed: int = 0
    """More than 0 only in the answer to an approval that was not the last one needed: the
    call still waits for that many more approvers (nothing is recorded as decided yet)."""
    arguments: str | None = None
    """An approval with edited arguments: what ran (JSON), instead of the model's."""
    original_arguments: str | None = None
    """An approval with edited arguments: the model's arguments."""
    expired: bool = False
    """Set with kind `expired`, for readers that know only this flag: versions before `expired`
    was a kind recorded an expiry as kind `reject` with this flag (read as kind `expired`)."""
    verified: bool = False
    """The decision was signed with a key the worker's approver directory gives `approver`."""
    key_id: str | None = None
    """The key a verified decision was signed with."""
    client: str | None = None
    """What sent the decision, as the sender said (`hitl`, `runner`; unset: another client)."""
    policy_rule: str | None = None
    """The approval-policy rule that decided how the call was asked (docs/policies.md)."""
    policy_version: str | None = None
    """That policy's `<name>@<version> <digest>`."""
    arguments_sha256: str | None = None
    """SHA-256 (hex) of the call's arguments the decision is about (for an approval: what
    runs; `None`: recorded before decisions named their arguments)."""
    requested_at: datetime | None = None
    """When the call began to wait for this decision (`decided_at - requested_at` is its time to
    decision; `None`: recorded before decisions kept it, or decided without waiting)."""
    escalated_at: datetime | None = None
    """When the call was escalated while it waited (`None`: it was not)."""

    @model_validator(mode="after")
    def _expiry_is_a_kind(self) -> Self:
        # An expiry recorded by an older version (`reject` + `expired`) reads as kind `expired`;
        # the flag stays set on every expiry, for readers that know only the flag.
        if self.expired and self.kind == "reject":
            self.kind = "expired"
        self.expired = self.kind == "expired"
        return self

    def expiry_text(self) -> str:
        """What a decision that arrives after this expiry is told (`DeadlinePassed`)."""
        return expiry_text(self.call_id, self.decided_at)

    @classmethod
    def partial(cls, call_id: str, tool: str, approvals: list[Approval], required: int) -> Self:
        """The answer to an approval that was not the last one needed (nothing is decided)."""
        last = approvals[-1]
        return cls(
            call_id=call_id,
            tool_name=tool,
            kind="approve",
            approver=last.approver,
            reason=last.reason,
            via=last.via,
            decided_at=last.approved_at,
            approvals=list(approvals),
            still_needed=required - len(approvals),
        )

    def answers(self, kind: DecisionKind, d: DecisionInput) -> bool:
        """Whether this record is the outcome of decision `d` of `kind` (so a repeat is a retry).

        A rule, policy or deadline that decided the same way counts; a person's decision only
        when nothing differs (a repeat that adds `always` or changes the message is another
        decision). One of several approvals counts when it is repeated as it was given.
        """
        if self.kind != kind:
            return False
        if self.source != "person":
            return True
        if kind == "approve" and any(a.answers(d) for a in self.approvals):
            return True
        if d.arguments is not None and self.arguments != canonical_arguments(d.arguments):
            return False
        message = d.message if kind == "reject" else None
        return (self.always, self.message, self.approver, self.reason) == (
            d.always,
            message,
            d.approver,
            d.reason,
        )
