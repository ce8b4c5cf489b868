"""The decision records a run keeps: who decided what about which call, how, and when.

Pure constructors; the approval book applies them (`ApprovalBook._apply`).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Literal

from hitl.wire import (
    CallAction,
    CallRecord,
    DecisionInput,
    DecisionKind,
    DecisionRecord,
    DecisionSource,
    DecisionVia,
    Extension,
    InputAnswer,
    PendingApproval,
    PolicyDecision,
    PolicyVerdict,
    Resolution,
    StandingRule,
    text_digest,
)

KINDS: dict[str, Literal["approval", "uncertain", "input"]] = {
    "uncertain": "uncertain",
    "awaiting_input": "input",
}
"""What a waiting call asks of a person, by its state (an approval, otherwise)."""

AUTO_APPROVED = "auto-approved: the run's preset and the tool both allow it"


def policy_names(verdict: PolicyVerdict | None) -> tuple[str | None, str | None]:
    """The policy rule behind a call's decision, and the policy's version.

    `None`s: no policy, or no enforced rule decided how the call was asked.
    """
    if verdict is None or verdict.rule is None:
        return None, None
    return verdict.rule, policy_version(verdict)


def policy_version(verdict: PolicyVerdict) -> str:
    """`<policy>@<version> sha256:<first 12 hex>`: which document, readable and exact."""
    return f"{verdict.policy}@{verdict.version} {verdict.digest[:19]}"


def by_person(
    call_id: str,
    tool_name: str,
    kind: DecisionKind,
    d: DecisionInput,
    now: datetime,
    source: DecisionSource = "person",
    via: DecisionVia = "update",
) -> DecisionRecord:
    """A decision someone sent (an update or a signal)."""
    return DecisionRecord(
        call_id=call_id,
        tool_name=tool_name,
        kind=kind,
        always=d.always,
        message=d.message if kind == "reject" else None,
        approver=d.approver,
        reason=d.reason,
        source=source,
        via=via,
        decided_at=now,
        client=d.client[:40] if d.client else None,
    )


def by_rule(call: CallRecord, rule: StandingRule, now: datetime) -> DecisionRecord:
    """A decision made by a standing `always_approve` / `always_reject` rule."""
    return DecisionRecord(
        call_id=call.call_id,
        tool_name=call.tool_name,
        kind=rule.kind,
        always=True,
        approver=rule.approver,
        reason=f"standing rule from call {rule.call_id}" if rule.call_id else None,
        source="always_rule",
        via="workflow",
        decided_at=now,
    )


def by_policy(call: CallRecord, policy: PolicyDecision, now: datetime) -> DecisionRecord:
    """An approver callback's decision (source `policy`)."""
    return DecisionRecord(
        call_id=call.call_id,
        tool_name=call.tool_name,
        kind=policy.kind,
        message=policy.message if policy.kind == "reject" else None,
        approver=policy.approver,
        reason=policy.reason,
        source="policy",
        via="workflow",
        decided_at=now,
    )


def auto_approval(call: CallRecord, now: datetime) -> DecisionRecord:
    """A two-key auto-approval (the run's preset and the tool both allow it)."""
    return DecisionRecord(
        call_id=call.call_id,
        tool_name=call.tool_name,
        kind="approve",
        reason=AUTO_APPROVED,
        source="auto_approval",
        via="workflow",
        decided_at=now,
    )


def expiry(call: CallRecord, now: datetime, message: str) -> DecisionRecord:
    """A call whose deadline passed: its own outcome, kind `expired` (source `deadline`)."""
    return DecisionRecord(
        call_id=call.call_id,
        tool_name=call.tool_name,
        kind="expired",
        message=message,
        source="deadline",
        via="workflow",
        decided_at=now,
        expired=True,
        approvals=list(call.approvals),
    )


ACTION_TEXT_CHARS = 1000
ACTION_CONTENT_BYTES = 1024


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= ACTION_TEXT_CHARS:
        return text
    return text[:ACTION_TEXT_CHARS] + f"... [{len(text) - ACTION_TEXT_CHARS} more]"


def resolved(call: CallRecord, res: Resolution) -> CallAction:
    """The audit's record of a resolution of an uncertain call."""
    return CallAction(
        kind="resolve",
        call_id=call.call_id,
        tool_name=call.tool_name,
        at=res.resolved_at,
        approver=res.approver,
        reason=res.reason,
        verified=res.verified,
        outcome=res.outcome,
        text=_cut(res.output if res.outcome == "happened" else res.message),
    )


def extended(call: CallRecord, ext: Extension) -> CallAction:
    """The audit's record of a deadline moved later."""
    return CallAction(
        kind="extend",
        call_id=call.call_id,
        tool_name=call.tool_name,
        at=ext.extended_at,
        approver=ext.approver,
        reason=ext.reason,
        verified=ext.verified,
        previous=ext.previous,
        deadline=ext.deadline,
    )


def answered(call: CallRecord, given: InputAnswer) -> CallAction:
    """The audit's record of an answer to a tool's question (large content left out)."""
    content = given.content
    if content is not None and len(json.dumps(content)) > ACTION_CONTENT_BYTES:
        content = None
    return CallAction(
        kind="answer",
        call_id=call.call_id,
        tool_name=call.tool_name,
        at=given.answered_at,
        approver=given.approver,
        reason=given.reason,
        verified=given.verified,
        outcome=given.action,
        text=_cut(given.question),
        content=content,
    )


def pending(
    c: CallRecord, path: list[str] | None, workflow_id: str | None, signed: bool
) -> PendingApproval:
    """A call waiting for a person, as `status` shows it (and interruptions are made of)."""
    return PendingApproval(
        call_id=c.call_id,
        tool_name=c.tool_name,
        agent_id=c.agent_id,
        agent_name=c.agent_name,
        arguments=c.arguments,
        turn=c.turn,
        requested_at=c.requested_at,
        request=c.request,
        path=[*(path or []), c.agent_name],
        workflow_id=workflow_id,
        approvers=c.approvers,
        deadline=c.deadline,
        required_approvals=c.required_approvals,
        approvals=c.approvals,
        extensions=c.extensions,
        kind=KINDS.get(c.state, "approval"),
        uncertain=c.uncertain,
        input_request=c.input_request,
        reminded_at=c.reminded_at,
        escalated_at=c.escalated_at,
        original_arguments=c.original_arguments,
        arguments_sha256=text_digest(c.arguments),
        round=c.round,
        signed_decisions=signed,
        model_call_id=c.model_call_id,
    )
