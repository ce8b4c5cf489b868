"""Decision insights: figures over the decisions and pending calls of a window, pure.

What `hitl insights`, the console's `/insights` page and its `/metrics` endpoint show: how many
calls were approved, rejected, edited, expired and escalated, how long people took to decide
(p50 / p95 by tool and by approver), what waits now and for how long, and, once decision
records name the policy rule that decided them, rule hits and shadow disagreements. Reading
runs is the caller's (`hitl.cli.insights`); this module only counts, and writes the Prometheus
text exposition format (no client library needed).

Labels are bounded: a tool or approver becomes a label value only when the caller's list of
known names has it (the approver directory, the tools seen), else the `MAX_LABELS` most frequent
names are kept and the rest count as `other`; every value is cut to `MAX_LABEL_CHARS` and
escaped. Nothing that names a run, a call, arguments or free text from a payload is a label.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from hitl.wire import DecisionRecord

__all__ = [
    "MAX_LABELS",
    "OTHER",
    "Figures",
    "PendingCall",
    "PolicyHit",
    "aggregate",
    "bound",
    "exposition",
    "percentile",
    "policy_hit",
]

MAX_LABELS = 50
"""Distinct values one label takes at most (besides `other`) when no list of names bounds it."""
MAX_LABEL_CHARS = 64
OTHER = "other"
"""The label value of every name past the bound."""
OUTCOMES = {"approve": "approved", "reject": "rejected", "expired": "expired"}
QUANTILES = (0.5, 0.95)


class PolicyHit(NamedTuple):
    """What a decision record says of the policy rule behind it."""

    rule: str
    """The rule that decided the call (`""`: none did; only a shadow rule was recorded)."""
    effect: str
    """What the deciding rule's effect was (`allow`, `ask`, `deny`), or `""`."""
    shadow_rule: str
    """The `log_only` rule that would have decided it (`""`: none)."""
    disagrees: bool
    """The shadow rule's effect differs from what happened."""


def actual_effect(rec: DecisionRecord) -> str:
    """What happened to a call, in a policy's words.

    `ask` (a person or a deadline decided), else `allow` or `deny` (decided without a person).
    """
    if rec.source in ("person", "deadline"):
        return "ask"
    return "allow" if rec.kind == "approve" else "deny"


OUTCOME_EFFECTS = {"refused": "deny", "asked": "ask", "free": "allow"}
"""A policy verdict's `outcome` (what the call's plan became), in a policy's words."""


def policy_hit(rec: DecisionRecord | None, verdict: Any = None) -> PolicyHit | None:
    """The policy rule behind a call, from its policy verdict or else its decision record.

    The one place that knows the policy fields' names. A verdict (the policy work's
    `PolicyVerdict`: `rule`, `effect`, `shadow_rule`, `shadow_effect`, `outcome`) says most; a
    decision record names the deciding rule (`policy_rule`, or `rule_id` with `rule_effect`) and
    may carry a shadow verdict (`shadow_rule` / `shadow_rule_id`, `shadow_effect`). Neither
    (every record until policies name their rules) gives `None`: the rule series stay empty.
    """
    if verdict is not None:
        rule, effect = _field(verdict, "rule"), _field(verdict, "effect")
        shadow, shadow_effect = _field(verdict, "shadow_rule"), _field(verdict, "shadow_effect")
        happened = OUTCOME_EFFECTS.get(_field(verdict, "outcome"), "") or effect
        if not happened and rec is not None:
            happened = actual_effect(rec)
    elif rec is not None:
        rule, effect = _field(rec, "policy_rule", "rule_id"), _field(rec, "rule_effect")
        shadow = _field(rec, "shadow_rule", "shadow_rule_id")
        shadow_effect, happened = _field(rec, "shadow_effect"), actual_effect(rec)
    else:
        return None
    if not rule and not shadow:
        return None
    disagrees = bool(shadow) and bool(shadow_effect) and shadow_effect != happened
    return PolicyHit(rule, effect, shadow, disagrees)


def _field(obj: Any, *names: str) -> str:
    """The first of `names` that `obj` has as a non-empty string, else `""`.

    Models of other versions may lack any of them.
    """
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, str) and value:
            return value
    return ""


@dataclass(frozen=True)
class PendingCall:
    """A call that waits now: its tool, what it waits for, since when (no ids, no arguments)."""

    tool: str
    since: datetime | None
    kind: str = "approval"


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank `q` quantile of `values` (0 < q <= 1); `nan` when there are none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Figures:
    """The insights of one window."""

    since: datetime
    until: datetime
    decisions: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(tool, outcome) -> count; outcome `approved`, `rejected` or `expired`."""
    sources: Counter[str] = field(default_factory=Counter)
    """Who or what decided: `person`, `policy`, `always_rule`, `auto_approval`, `deadline`."""
    edits: Counter[str] = field(default_factory=Counter)
    escalations: Counter[str] = field(default_factory=Counter)
    by_tool: dict[str, list[float]] = field(default_factory=dict)
    """Seconds from request to a person's decision, by tool."""
    by_approver: dict[str, list[float]] = field(default_factory=dict)
    pending: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(tool, kind) -> calls waiting now."""
    oldest: dict[tuple[str, str], float] = field(default_factory=dict)
    """(tool, kind) -> seconds the longest-waiting call has waited."""
    rule_hits: Counter[tuple[str, str]] = field(default_factory=Counter)
    shadow_disagreements: Counter[str] = field(default_factory=Counter)
    policy_fields: bool = False
    """Some decision record named a policy rule (else the rule series are empty)."""
    runs_listed: int = 0
    runs_matched: int = 0
    """Runs the window has (more than `runs_listed` when the limit stopped the listing)."""
    runs_read: int = 0
    limit: int = 0
    unread: list[str] = field(default_factory=list)
    """Why runs could not be read (no ids: counted reasons only)."""

    def totals(self) -> dict[str, int]:
        """Approved, rejected, expired, edited and escalated calls of the window."""
        out = dict.fromkeys((*OUTCOMES.values(), "edited", "escalated"), 0)
        for (_, outcome), n in self.decisions.items():
            out[outcome] += n
        out["edited"] = sum(self.edits.values())
        out["escalated"] = sum(self.escalations.values())
        return out


def aggregate(
    decisions: Iterable[DecisionRecord],
    pending: Iterable[PendingCall],
    since: datetime,
    until: datetime,
    *,
    verdicts: Mapping[int, Any] | None = None,
    undecided: Iterable[Any] = (),
) -> Figures:
    """Count the decisions made in `[since, until]` and the calls pending at `until`.

    Time to decision is counted for decisions by a person whose record says when the call
    started waiting (`requested_at`); an approval of several people counts at the last one.
    Rule hits: `verdicts` maps a decision (`id(record)`) to its call's policy verdict, when the
    run said; `undecided` are the verdicts of calls that got no decision record (denied, or let
    through by an `allow`), counted with their run's window.
    """
    fig = Figures(since=since, until=until)
    for verdict in undecided:
        _count_policy(fig, policy_hit(None, verdict))
    for rec in decisions:
        if rec.still_needed or not since <= rec.decided_at <= until:
            continue
        tool = rec.tool_name
        fig.decisions[(tool, OUTCOMES[rec.kind])] += 1
        fig.sources[rec.source] += 1
        if rec.arguments is not None:
            fig.edits[tool] += 1
        if rec.escalated_at is not None:
            fig.escalations[tool] += 1
        if rec.source == "person" and rec.requested_at is not None:
            took = max(0.0, (rec.decided_at - rec.requested_at).total_seconds())
            fig.by_tool.setdefault(tool, []).append(took)
            fig.by_approver.setdefault(rec.approver or "", []).append(took)
        _count_policy(fig, policy_hit(rec, (verdicts or {}).get(id(rec))))
    for p in pending:
        key = (p.tool, p.kind)
        fig.pending[key] += 1
        age = max(0.0, (until - p.since).total_seconds()) if p.since is not None else 0.0
        fig.oldest[key] = max(fig.oldest.get(key, 0.0), age)
    return fig


def _count_policy(fig: Figures, hit: PolicyHit | None) -> None:
    if hit is None:
        return
    fig.policy_fields = True
    if hit.rule:
        fig.rule_hits[(hit.rule, hit.effect)] += 1
    if hit.disagrees:
        fig.shadow_disagreements[hit.shadow_rule] += 1


def bound(counts: Counter[str], known: Iterable[str] | None = None) -> dict[str, str]:
    """Each name's label value: itself, or `other` past the bound; cut to `MAX_LABEL_CHARS`.

    A name is itself if `known` has it (without `known`: if it is among the `MAX_LABELS` most
    frequent).
    """
    allowed = (
        set(known) if known is not None else {name for name, _ in counts.most_common(MAX_LABELS)}
    )
    return {name: name[:MAX_LABEL_CHARS] if name in allowed else OTHER for name in counts}


def escape_label(value: str) -> str:
    """A label value as the text exposition format writes it (backslash, quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


class _Series:
    """One metric family: its `# HELP` / `# TYPE` lines and samples (summed by label set)."""

    def __init__(self, name: str, kind: str, text: str) -> None:
        self.name, self.kind, self.text = name, kind, text
        self.samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def add(self, value: float, suffix: str = "", keep: str = "sum", **labels: str) -> None:
        key = (suffix, tuple(sorted(labels.items())))
        old = self.samples.get(key)
        if old is None:
            self.samples[key] = value
        else:
            self.samples[key] = max(old, value) if keep == "max" else old + value

    def lines(self) -> list[str]:
        out = [f"# HELP {self.name} {_help(self.text)}", f"# TYPE {self.name} {self.kind}"]
        for (suffix, labels), value in self.samples.items():
            inner = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels)
            out.append(f"{self.name}{suffix}{{{inner}}} {_number(value)}")
        return out


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return str(int(value)) if float(value).is_integer() else repr(value)


def exposition(
    fig: Figures,
    tools: Iterable[str] | None = None,
    approvers: Iterable[str] | None = None,
) -> str:
    """The figures in the Prometheus text exposition format (version 0.0.4).

    `tools` / `approvers`: the names that may be label values (the rest count as `other`;
    `None`: the most frequent ones). Every family is written, with no samples when empty.
    """
    tool_counts: Counter[str] = Counter()
    for (t, _), n in [*fig.decisions.items(), *fig.pending.items()]:
        tool_counts[t] += n
    for counted in (
        fig.edits,
        fig.escalations,
        Counter({t: len(v) for t, v in fig.by_tool.items()}),
    ):
        tool_counts.update(counted)
    tool = bound(tool_counts, tools)
    who = bound(Counter({a: len(v) for a, v in fig.by_approver.items()}), approvers)
    rule_counts = Counter(r for r, _ in fig.rule_hits)
    rule_counts.update(fig.shadow_disagreements)
    rules = bound(rule_counts, None)
    out = _families(fig, tool, who, rules)
    return "\n".join(line for s in out for line in s.lines()) + "\n"


def _families(
    fig: Figures, tool: dict[str, str], who: dict[str, str], rules: dict[str, str]
) -> list[_Series]:
    window = _Series("hitl_insights_window_seconds", "gauge", "Length of the window counted.")
    window.add((fig.until - fig.since).total_seconds())
    runs = _Series(
        "hitl_insights_runs", "gauge", "Runs of the window: in it, listed, read, unread."
    )
    runs.add(fig.runs_matched, state="in_window")
    runs.add(fig.runs_listed, state="listed")
    runs.add(fig.runs_read, state="read")
    runs.add(len(fig.unread), state="unread")
    decided = _Series(
        "hitl_decisions_window", "gauge", "Calls decided in the window, by tool and outcome."
    )
    for (t, outcome), n in fig.decisions.items():
        decided.add(n, tool=tool[t], outcome=outcome)
    sources = _Series("hitl_decision_sources_window", "gauge", "Decisions by what decided them.")
    for source, n in fig.sources.items():
        sources.add(n, source=source if source in SOURCES else OTHER)
    edits = _Series("hitl_edits_window", "gauge", "Approvals with edited arguments, by tool.")
    for t, n in fig.edits.items():
        edits.add(n, tool=tool[t])
    escalated = _Series("hitl_escalations_window", "gauge", "Decided calls that had escalated.")
    for t, n in fig.escalations.items():
        escalated.add(n, tool=tool[t])
    by_tool = _summary(
        "hitl_time_to_decision_seconds", "Seconds from request to a person's decision, by tool.",
        {t: tool[t] for t in fig.by_tool}, fig.by_tool, "tool",
    )  # fmt: skip
    by_who = _summary(
        "hitl_time_to_decision_by_approver_seconds",
        "Seconds from request to a person's decision, by approver.",
        {a: who[a] for a in fig.by_approver}, fig.by_approver, "approver",
    )  # fmt: skip
    pending = _Series("hitl_pending_calls", "gauge", "Calls waiting for a person now.")
    oldest = _Series("hitl_pending_oldest_seconds", "gauge", "Age of the longest-waiting call.")
    for (t, kind), n in fig.pending.items():
        pending.add(n, tool=tool[t], kind=kind)
        oldest.add(fig.oldest[(t, kind)], keep="max", tool=tool[t], kind=kind)
    hits = _Series("hitl_rule_hits_window", "gauge", "Decisions by the policy rule that decided.")
    for (rule, effect), n in fig.rule_hits.items():
        hits.add(n, rule=rules[rule], effect=effect if effect in EFFECTS else OTHER)
    shadow = _Series(
        "hitl_shadow_disagreements_window", "gauge", "Shadow rules that would have decided else."
    )
    for rule, n in fig.shadow_disagreements.items():
        shadow.add(n, rule=rules[rule])
    return [window, runs, decided, sources, edits, escalated, by_tool, by_who, pending, oldest,
            hits, shadow]  # fmt: skip


SOURCES = {"person", "policy", "always_rule", "auto_approval", "deadline"}
EFFECTS = {"allow", "ask", "deny", ""}


def _summary(
    name: str, text: str, labels: dict[str, str], samples: dict[str, list[float]], key: str
) -> _Series:
    """A summary over the window: p50 and p95, sum and count, per label value."""
    merged: dict[str, list[float]] = {}
    for raw, values in samples.items():
        merged.setdefault(labels[raw], []).extend(values)
    series = _Series(name, "summary", text)
    for value, got in merged.items():
        for q in QUANTILES:
            series.add(percentile(got, q), **{key: value, "quantile": f"{q:g}"})
        series.add(sum(got), "_sum", **{key: value})
        series.add(len(got), "_count", **{key: value})
    return series
