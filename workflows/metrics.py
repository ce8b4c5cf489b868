"""Decision metrics a worker exports (`python -m hitl.worker --metrics-port`), as they happen.

Counters and a histogram on the SDK's workflow metric meter: it records nothing while a run
replays, so a fact counts when a worker processes it live (a workflow task that fails and is
retried may count it again: these are operational figures, the audit is the record). Without
`--metrics-port` the meter is the SDK's no-op. Recording is not I/O: the SDK's core buffers it
and its Prometheus endpoint serves it. Label values are bounded: the tool (from the run's pinned
graph), what decided (five values), and for a person's decision the approver only when the run's
approver directory or the call's approver list names them (else `other`).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from hitl.insights import MAX_LABEL_CHARS, OTHER, OUTCOMES, policy_hit
    from hitl.wire import ApproverDirectory, CallRecord, DecisionRecord

REQUESTS = "hitl_approval_requests_total"
DECISIONS = "hitl_decisions_total"
EDITS = "hitl_edits_total"
ESCALATIONS = "hitl_escalations_total"
DECISION_SECONDS = "hitl_decision_seconds"
RULE_HITS = "hitl_rule_hits_total"
SHADOW_DISAGREEMENTS = "hitl_shadow_disagreements_total"
DECISION_BUCKETS = (1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0, 3 * 86400.0)
"""Seconds: a minute, five, a quarter, an hour, a morning, a day, a long weekend."""


def approver_label(
    approver: str | None, call: CallRecord | None, directory: ApproverDirectory | None
) -> str:
    """A person's name as a label: only a name the directory or the call's list has."""
    if not approver:
        return "unnamed"
    if directory is not None and approver in directory.approvers:
        return approver[:MAX_LABEL_CHARS]
    if call is not None and approver in call.approvers:
        return approver[:MAX_LABEL_CHARS]
    return OTHER


class DecisionMetrics:
    """The instruments of one run (made on first use: a run that decides nothing makes none)."""

    def __init__(self) -> None:
        self._made: dict[str, Any] = {}

    def _counter(self, name: str, text: str) -> Any:
        if name not in self._made:
            self._made[name] = workflow.metric_meter().create_counter(name, text)
        return self._made[name]

    def requested(self, tool: str) -> None:
        """A call started waiting for a person."""
        self._counter(REQUESTS, "Calls that waited for a person.").add(1, {"tool": _cut(tool)})

    def escalated(self, tool: str) -> None:
        """A waiting call escalated."""
        self._counter(ESCALATIONS, "Waiting calls that escalated.").add(1, {"tool": _cut(tool)})

    def decided(
        self, rec: DecisionRecord, call: CallRecord | None, directory: ApproverDirectory | None
    ) -> None:
        """A call's decision: its outcome and source, an edit, the time a person took."""
        tool = _cut(rec.tool_name)
        self._counter(DECISIONS, "Decided calls, by outcome and what decided.").add(
            1, {"tool": tool, "outcome": OUTCOMES[rec.kind], "source": rec.source}
        )
        if rec.arguments is not None:
            self._counter(EDITS, "Approvals with edited arguments.").add(1, {"tool": tool})
        if rec.source == "person" and rec.requested_at is not None:
            if DECISION_SECONDS not in self._made:
                self._made[DECISION_SECONDS] = workflow.metric_meter().create_histogram_float(
                    DECISION_SECONDS, "Seconds from request to a person's decision.", "s"
                )
            took = max(0.0, (rec.decided_at - rec.requested_at).total_seconds())
            who = approver_label(rec.approver, call, directory)
            self._made[DECISION_SECONDS].record(took, {"tool": tool, "approver": who})
        hit = policy_hit(rec, getattr(call, "policy", None))  # the call's policy verdict
        if hit is not None and hit.rule:
            self._counter(RULE_HITS, "Decisions by the policy rule that decided.").add(
                1, {"rule": _cut(hit.rule), "effect": _cut(hit.effect)}
            )
        if hit is not None and hit.disagrees:
            self._counter(SHADOW_DISAGREEMENTS, "Shadow rules that would have decided else.").add(
                1, {"rule": _cut(hit.shadow_rule)}
            )


def _cut(text: str) -> str:
    return text[:MAX_LABEL_CHARS]
