"""Approval requests and programmatic approvers (the Scripting app's two-phase model).

Phase 1, *approval request*: before the run pauses, a tool's `approval_request` function renders
what the person sees: a title, a message saying what will happen and why approval is needed, an
optional preview (a unified diff, a summary of the data to export) and button labels. It runs in
an activity and must have no side effects.

Phase 2, *execute with approval*: the tool runs only after a decision. A tool that declares a
`UserAction` parameter receives the person's action; it must do its real work only when
`action.primary_confirmed` is true. For such a tool, a rejection calls it with
`primary_confirmed=False` (outside `execute_tool`), and what it returns becomes the text the model
sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ApprovalRequest:
    """What a person sees before deciding.

    Attributes:
        message: What will happen and why approval is needed (for people, not internals).
        title: A short headline (default: agent and tool name).
        preview: Text showing the expected result, e.g. a unified diff.
        preview_label: How to label the preview (e.g. "Diff").
        primary_label: The confirming button's label.
        secondary_label: The cancelling button's label.
    """

    message: str
    title: str | None = None
    preview: str | None = None
    preview_label: str | None = None
    primary_label: str = "Approve"
    secondary_label: str = "Reject"


@dataclass(frozen=True)
class UserAction:
    """The person's action on an approval request, as the tool receives it.

    `primary_confirmed` is true when the call was approved (by a person, a standing rule, a policy
    or auto-approval); `secondary_confirmed` when it was rejected; both false when nobody answered
    before the deadline.
    """

    primary_confirmed: bool
    secondary_confirmed: bool = False


@dataclass(frozen=True)
class ToolApproved:
    """An approver callback's decision: run the call."""

    reason: str | None = None


@dataclass(frozen=True)
class ToolDenied:
    """An approver callback's decision: do not run the call; `message` is what the model sees."""

    message: str | None = None
    reason: str | None = None


@dataclass
class ApprovalCall:
    """A call an approver callback is asked about.

    Attributes:
        tool_name: The tool.
        call_id: The model's call id.
        params: The validated arguments.
        arguments: The raw JSON arguments.
        agent_name: The agent whose tool it is.
        request: The rendered approval request.
    """

    tool_name: str
    call_id: str
    params: dict[str, Any]
    arguments: str
    agent_name: str
    request: ApprovalRequest | None = None
    extra: dict[str, Any] = field(default_factory=dict)
