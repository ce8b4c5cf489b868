"""The approval book: tool calls of the current turn, decisions, and standing rules.

Pure and deterministic (no Temporal calls besides raising `ApplicationError`), so it can be
unit-tested without a server and used both by update validators (read-only `check`) and by
handlers (`record`, which mutates synchronously, before any `await`).

Nested runs (agents used as tools) report their pending approvals to their parent, which shows
them under qualified call ids (`<agent tool call id>/<nested call id>`, recursively) and
forwards decisions down. Every decision of the run graph is therefore made, validated and
recorded at the root.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio.exceptions import ApplicationError

from hitl.wire import (
    CallRecord,
    ChildReport,
    DecisionInput,
    DecisionKind,
    DecisionRecord,
    DecisionSource,
    DecisionVia,
    PendingApproval,
    PolicyDecision,
)

M = TypeVar("M", bound=BaseModel)
SEP = "/"
"""Separates the levels of a qualified call id (`agent tool call / nested call`)."""


def refusal(type_name: str, message: str) -> ApplicationError:
    """A decision refusal as the caller sees it (short, operator-worded, non-retryable)."""
    return ApplicationError(message, type=type_name, non_retryable=True)


def parse_payload(model: type[M], value: Any, what: str = "decision") -> M:
    """Validate a payload; refuse it with a one-line, typed reason when malformed."""
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'payload'}: {err['msg']}"
            for err in exc.errors()[:5]
        )
        raise refusal("InvalidDecision", f"invalid {what}: {problems}") from None


def _check_approver(d: DecisionInput, tool: str, allowed: list[str]) -> None:
    # The list stops mistakes, not forgery: Temporal does not authenticate who sends an update,
    # so production puts an approval gateway (holding the write credentials) in front.
    if allowed and d.approver not in allowed:
        who = f"approver '{d.approver}'" if d.approver else "a decision without an approver"
        raise refusal(
            "NotAuthorized",
            f"{who} may not decide {tool} calls (allowed: {', '.join(allowed)})",
        )


def _check_deadline(d: DecisionInput, deadline: datetime | None, now: datetime | None) -> None:
    # Same-task rule: a decision that arrives after the deadline loses to the deadline.
    if deadline is not None and now is not None and now > deadline:
        raise refusal(
            "DeadlinePassed",
            f"call '{d.call_id}' stopped waiting for a decision at {deadline.isoformat()}",
        )


@dataclass
class ChildView:
    """What a run knows about one nested run it started (an agent-tool call in flight)."""

    call_id: str
    workflow_id: str
    token: str = ""
    """The secret shared with the nested run (`ParentLink.token`)."""
    report: ChildReport | None = None
    seq: int = 0
    """The last `FromRoot.seq` sent to the nested run."""
    outbox: list[DecisionRecord] = field(default_factory=list)
    rules_dirty: bool = False
    decided: dict[str, DecisionRecord] = field(default_factory=dict)
    """Decisions forwarded to the nested run, by its (relative) call id."""
    done: bool = False

    def pending(self) -> list[PendingApproval]:
        """The nested run's reported pending calls not yet decided here."""
        if self.done or self.report is None:
            return []
        return [p for p in self.report.pending if p.call_id not in self.decided]

    def waiting_for_person(self) -> bool:
        """True when the nested run is blocked on a person and knows every decision sent."""
        return (
            not self.done
            and self.report is not None
            and self.report.phase == "awaiting_approval"
            and self.report.seen == self.seq
            and not self.outbox
            and not self.rules_dirty
            and bool(self.pending())
        )

    def has_mail(self) -> bool:
        """True when decisions or rules wait to be forwarded."""
        return not self.done and (bool(self.outbox) or self.rules_dirty)


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
        self.past_calls: set[str] = {d.call_id for d in decisions or [] if SEP not in d.call_id}
        self.children: dict[str, ChildView] = {}

    # ----------------------------------------------------------------- turn lifecycle

    def begin_turn(self, records: list[CallRecord]) -> None:
        """Start a turn with these calls (previous turn's calls become past calls)."""
        self.past_calls.update(self.calls)
        self.calls = {r.call_id: r for r in records}

    def end_turn(self) -> None:
        """Close the turn: its calls become past calls, its nested runs are over."""
        self.past_calls.update(self.calls)
        self.calls = {}
        self.children = {}

    def known(self, call_id: str) -> bool:
        """True when the run has seen this call id."""
        return call_id in self.calls or call_id in self.past_calls

    def add_child(self, call_id: str, workflow_id: str, token: str = "") -> ChildView:
        """Track the nested run started for agent-tool call `call_id`."""
        view = ChildView(call_id=call_id, workflow_id=workflow_id, token=token)
        self.children[call_id] = view
        return view

    # ----------------------------------------------------------------- views

    def awaiting(self) -> list[CallRecord]:
        """This run's own calls waiting for a person, in call order."""
        return [c for c in self.calls.values() if c.state == "awaiting_approval"]

    def nested_pending(self) -> list[PendingApproval]:
        """Pending calls of nested runs, under qualified call ids."""
        out = []
        for view in self.children.values():
            for p in view.pending():
                out.append(p.model_copy(update={"call_id": f"{view.call_id}{SEP}{p.call_id}"}))
        return out

    def has_pending(self) -> bool:
        """True when any call of this run or a nested run waits for a person."""
        return bool(self.awaiting()) or any(v.pending() for v in self.children.values())

    def active(self) -> bool:
        """True while some call can progress without a person."""
        for c in self.calls.values():
            if c.output is not None or c.state == "awaiting_approval":
                continue
            view = self.children.get(c.call_id)
            if view is not None and c.state == "running" and view.waiting_for_person():
                continue
            return True
        return False

    def pending(
        self, path: list[str] | None = None, workflow_id: str | None = None
    ) -> list[PendingApproval]:
        """The interruptions: own calls waiting for a person, then nested ones."""
        own = [
            PendingApproval(
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
            )
            for c in self.awaiting()
        ]
        return own + self.nested_pending()

    def owner(self, call_id: str) -> str | None:
        """Name of the agent whose tool a call (own or nested, by qualified id) belongs to."""
        call = self.calls.get(call_id)
        if call is not None:
            return call.agent_name
        if SEP in call_id:
            head, rest = call_id.split(SEP, 1)
            view = self.children.get(head)
            if view is not None and view.report is not None:
                for p in view.report.pending:
                    if p.call_id == rest:
                        return p.agent_name
        return None

    # ----------------------------------------------------------------- decisions

    def check(
        self, kind: DecisionKind, d: DecisionInput, now: datetime | None = None
    ) -> DecisionRecord | None:
        """Validate a decision without changing anything.

        Returns the existing record when the same decision was already made (so repeating it is
        idempotent), `None` when the decision is new and acceptable. Raises a typed
        `ApplicationError` when it must be refused: unknown call, conflicting decision, a call
        that needs no decision, an approver not on the call's list, a passed deadline.
        """
        if not d.call_id:
            raise refusal("InvalidDecision", "call_id must not be empty")
        prior = self.decisions.get(d.call_id)
        if prior is not None:
            if prior.answers(kind, d):
                return prior  # a retry: idempotent, answered with what was recorded
            who = prior.approver or prior.source.replace("_", " ")
            what = prior.kind + (" (always)" if prior.always else "")
            raise refusal("AlreadyDecided", f"call '{d.call_id}' already decided: {what} by {who}")
        if SEP in d.call_id:
            view, rest = self._nested_target(d.call_id)
            pending = next(p for p in view.pending() if p.call_id == rest)
            _check_approver(d, pending.tool_name, pending.approvers)
            _check_deadline(d, pending.deadline, now)
            return None
        call = self.calls.get(d.call_id)
        if call is None:
            if d.call_id in self.past_calls:
                raise refusal("NotPending", f"call '{d.call_id}' did not need approval")
            raise refusal("UnknownCall", f"unknown call id '{d.call_id}'")
        if call.state != "awaiting_approval":
            raise refusal(
                "NotPending", f"call '{d.call_id}' is not awaiting approval (it is {call.state})"
            )
        _check_approver(d, call.tool_name, call.approvers)
        _check_deadline(d, call.deadline, now)
        return None

    def _nested_target(self, call_id: str) -> tuple[ChildView, str]:
        head, rest = call_id.split(SEP, 1)
        view = self.children.get(head)
        if view is None or not any(p.call_id == rest for p in view.pending()):
            raise refusal("UnknownCall", f"unknown call id '{call_id}'")
        return view, rest

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
        existing = self.check(kind, d, now)
        if existing is not None:
            return existing
        if SEP in d.call_id:
            view, rest = self._nested_target(d.call_id)
            tool = next(p.tool_name for p in view.pending() if p.call_id == rest)
            rec = self._new_record(d.call_id, tool, kind, d, now, source, via)
            self.decisions[d.call_id] = rec
            forwarded = rec.model_copy(update={"call_id": rest})
            view.decided[rest] = forwarded
            view.outbox.append(forwarded)
        else:
            call = self.calls[d.call_id]
            rec = self._new_record(d.call_id, call.tool_name, kind, d, now, source, via)
            self._apply(call, rec)
        if d.always:
            self.add_rule(rec.tool_name, kind, now)
        return rec

    def add_rule(self, tool_name: str, kind: DecisionKind, now: datetime) -> None:
        """A standing always-approve / always-reject rule for a tool, everywhere in the run."""
        self.always_rules[tool_name] = kind
        # The rule also decides this turn's other waiting calls of the same tool...
        for other in self.awaiting():
            if other.tool_name == tool_name:
                self._apply(other, self._rule_record(other, kind, now))
        # ...and travels to every nested run in flight.
        for view in self.children.values():
            view.rules_dirty = True

    def _new_record(
        self,
        call_id: str,
        tool_name: str,
        kind: DecisionKind,
        d: DecisionInput,
        now: datetime,
        source: DecisionSource,
        via: DecisionVia,
    ) -> DecisionRecord:
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
        )

    def apply_forwarded(self, rec: DecisionRecord) -> str | None:
        """Apply a decision made at the root (in a nested run); the reason if it cannot."""
        if SEP in rec.call_id:
            try:
                view, rest = self._nested_target(rec.call_id)
            except ApplicationError as err:
                return err.message
            if rec.call_id in self.decisions:
                return None
            self.decisions[rec.call_id] = rec
            forwarded = rec.model_copy(update={"call_id": rest})
            view.decided[rest] = forwarded
            view.outbox.append(forwarded)
            return None
        call = self.calls.get(rec.call_id)
        prior = self.decisions.get(rec.call_id)
        if prior is not None:
            return None if prior.kind == rec.kind else f"already decided: {prior.kind}"
        if call is None or call.state != "awaiting_approval":
            return f"call '{rec.call_id}' is not awaiting approval"
        self._apply(call, rec.model_copy(update={"via": "root"}))
        return None

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
