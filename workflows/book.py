"""The approval book: tool calls of the current turn, decisions, and standing rules.

Pure and deterministic (no Temporal calls besides raising `ApplicationError`), so it can be
unit-tested without a server and used both by update validators (read-only `check`) and by
handlers (`record`, which mutates synchronously, before any `await`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio.exceptions import ApplicationError

from hitl.wire import (
    CallRecord,
    DecisionInput,
    DecisionKind,
    DecisionRecord,
    DecisionSource,
    DecisionVia,
    PendingApproval,
    PolicyDecision,
)

M = TypeVar("M", bound=BaseModel)


def refusal(type_name: str, message: str) -> ApplicationError:
    """A decision refusal as the caller sees it (short, operator-worded, non-retryable)."""
    return ApplicationError(message, type=type_name, non_retryable=True)


def parse_payload(model: type[M], value: Any) -> M:
    """Validate a decision payload; refuse it with a one-line, typed reason when malformed."""
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'payload'}: {err['msg']}"
            for err in exc.errors()[:5]
        )
        raise refusal("InvalidDecision", f"invalid decision: {problems}") from None


class ApprovalBook:
    """Calls of the current turn plus every decision and standing rule of the run."""

    def __init__(
        self,
        *,
        always_rules: dict[str, DecisionKind] | None = None,
        decisions: list[DecisionRecord] | None = None,
    ) -> None:
        self.calls: dict[str, CallRecord] = {}
        self.always_rules: dict[str, DecisionKind] = dict(always_rules or {})
        self.decisions: dict[str, DecisionRecord] = {d.call_id: d for d in decisions or []}
        self.past_calls: set[str] = set(self.decisions)

    # ----------------------------------------------------------------- turn lifecycle

    def begin_turn(self, records: list[CallRecord]) -> None:
        """Start a turn with these calls (previous turn's calls become past calls)."""
        self.past_calls.update(self.calls)
        self.calls = {r.call_id: r for r in records}

    def end_turn(self) -> None:
        """Close the turn: its calls become past calls."""
        self.past_calls.update(self.calls)
        self.calls = {}

    def known(self, call_id: str) -> bool:
        """True when the run has seen this call id."""
        return call_id in self.calls or call_id in self.past_calls

    # ----------------------------------------------------------------- views

    def awaiting(self) -> list[CallRecord]:
        """Calls waiting for a person, in call order."""
        return [c for c in self.calls.values() if c.state == "awaiting_approval"]

    def active(self) -> bool:
        """True while a call of this turn can still progress without a person."""
        return any(c.output is None and c.state != "awaiting_approval" for c in self.calls.values())

    def pending(self) -> list[PendingApproval]:
        """The interruptions: calls waiting for a person."""
        return [
            PendingApproval(
                call_id=c.call_id,
                tool_name=c.tool_name,
                agent_id=c.agent_id,
                agent_name=c.agent_name,
                arguments=c.arguments,
                turn=c.turn,
                requested_at=c.requested_at,
                request=c.request,
            )
            for c in self.awaiting()
        ]

    # ----------------------------------------------------------------- decisions

    def check(self, kind: DecisionKind, d: DecisionInput) -> DecisionRecord | None:
        """Validate a decision without changing anything.

        Returns the existing record when the same decision was already made (so repeating it is
        idempotent), `None` when the decision is new and acceptable. Raises a typed
        `ApplicationError` when it must be refused.
        """
        if not d.call_id:
            raise refusal("InvalidDecision", "call_id must not be empty")
        prior = self.decisions.get(d.call_id)
        if prior is not None:
            if prior.kind == kind:
                return prior
            who = prior.approver or prior.source.replace("_", " ")
            raise refusal(
                "AlreadyDecided", f"call '{d.call_id}' already decided: {prior.kind} by {who}"
            )
        call = self.calls.get(d.call_id)
        if call is None:
            if d.call_id in self.past_calls:
                raise refusal("NotPending", f"call '{d.call_id}' did not need approval")
            raise refusal("UnknownCall", f"unknown call id '{d.call_id}'")
        if call.state != "awaiting_approval":
            raise refusal(
                "NotPending", f"call '{d.call_id}' is not awaiting approval (it is {call.state})"
            )
        return None

    def record(
        self,
        kind: DecisionKind,
        d: DecisionInput,
        *,
        now: datetime,
        source: DecisionSource = "person",
        via: DecisionVia = "update",
    ) -> DecisionRecord:
        """Apply a decision that `check` accepted (synchronously; call before any `await`)."""
        existing = self.check(kind, d)
        if existing is not None:
            return existing
        call = self.calls[d.call_id]
        rec = DecisionRecord(
            call_id=d.call_id,
            tool_name=call.tool_name,
            kind=kind,
            always=d.always,
            message=d.message if kind == "reject" else None,
            approver=d.approver,
            reason=d.reason,
            source=source,
            via=via,
            decided_at=now,
        )
        self._apply(call, rec)
        if d.always:
            self.always_rules[call.tool_name] = kind
            # The standing rule also decides this turn's other waiting calls of the same tool.
            for other in self.awaiting():
                if other.tool_name == call.tool_name:
                    self._apply(other, self._rule_record(other, kind, now))
        return rec

    def apply_rule(self, call: CallRecord, now: datetime) -> bool:
        """Decide `call` by a standing always-approve/always-reject rule, if one exists."""
        kind = self.always_rules.get(call.tool_name)
        if kind is None:
            return False
        self._apply(call, self._rule_record(call, kind, now))
        return True

    def decide_by(self, call: CallRecord, policy: PolicyDecision, now: datetime) -> DecisionRecord:
        """Record an approver callback's decision (source `policy`)."""
        rec = DecisionRecord(
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
        self._apply(call, rec)
        return rec

    def auto_approve(self, call: CallRecord, now: datetime) -> DecisionRecord:
        """Record a two-key auto-approval (the run's preset and the tool both allow it)."""
        rec = DecisionRecord(
            call_id=call.call_id,
            tool_name=call.tool_name,
            kind="approve",
            reason="auto-approved: the run's preset and the tool both allow it",
            source="auto_approval",
            via="workflow",
            decided_at=now,
        )
        self._apply(call, rec)
        return rec

    def expire(self, call: CallRecord, now: datetime, message: str) -> DecisionRecord:
        """Reject a call whose approval deadline passed (recorded as `deadline`)."""
        rec = DecisionRecord(
            call_id=call.call_id,
            tool_name=call.tool_name,
            kind="reject",
            message=message,
            source="deadline",
            via="workflow",
            decided_at=now,
        )
        self._apply(call, rec)
        return rec

    def _rule_record(self, call: CallRecord, kind: DecisionKind, now: datetime) -> DecisionRecord:
        return DecisionRecord(
            call_id=call.call_id,
            tool_name=call.tool_name,
            kind=kind,
            always=True,
            source="always_rule",
            via="workflow",
            decided_at=now,
        )

    def _apply(self, call: CallRecord, rec: DecisionRecord) -> None:
        call.decision = rec
        call.state = "approved" if rec.kind == "approve" else "rejected"
        self.decisions[call.call_id] = rec

    def all_decisions(self) -> list[DecisionRecord]:
        """Every decision of the run, in the order they were made."""
        return list(self.decisions.values())
