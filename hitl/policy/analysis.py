"""`hitl policy check`: what a document says that its author may not mean.

Errors (the document should not ship): a rule whose conditions contradict each other (it can
never match), a rule that can never decide anything because an unconditional enforced rule of a
stronger effect covers every call it matches. Warnings (worth a look, often intended): rules
with different effects that can match the same call (the stronger wins), a deny placed after an
allow it overlaps (readers going top-down expect the allow to win; deny does), a rule repeating
an earlier one's effect on calls it already covers.

The analysis is conservative: it reports overlaps it cannot rule out, and proves conditions
disjoint only for comparisons, equality and membership on the same argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fnmatch import fnmatchcase
from typing import Literal

from hitl.policy.document import Condition, PolicyDocument, Rule

_ORDER = {"allow": 0, "ask": 1, "deny": 2}


@dataclass(frozen=True)
class Finding:
    """One thing `check` found."""

    level: Literal["error", "warning"]
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.level}: rule {self.rule}: {self.message}"


def check(doc: PolicyDocument) -> list[Finding]:
    """Everything `hitl policy check` reports about a valid document, errors first."""
    found: list[Finding] = []
    for rule in doc.rules:
        why = contradiction(list(rule.when))
        if why is not None:
            found.append(Finding("error", rule.id, f"can never match: {why}"))
    for i, rule in enumerate(doc.rules):
        for j, other in enumerate(doc.rules):
            if i != j:
                found += _pair(doc, i, rule, j, other)
    return sorted(found, key=lambda f: f.level != "error")


def _pair(doc: PolicyDocument, i: int, rule: Rule, j: int, other: Rule) -> list[Finding]:
    """What `other` does to `rule` (each pair is seen both ways)."""
    enforced = doc.mode_of(other) == "enforce" and doc.mode_of(rule) == "enforce"
    if not overlap(rule, other):
        return []
    stronger = _ORDER[other.effect] > _ORDER[rule.effect]
    if enforced and _unconditional(other) and covers(other, rule):
        if stronger:
            why = f"every call it matches is matched by {other.id} ({other.effect}), which wins"
            return [Finding("error", rule.id, f"is unreachable: {why}")]
        if other.effect == rule.effect and j < i:
            return [
                Finding(
                    "warning",
                    rule.id,
                    f"repeats {other.id}: it covers every call this rule matches",
                )
            ]
    if i > j or rule.effect == other.effect:
        return []  # each pair once, from its earlier rule
    if rule.effect == "allow" and other.effect == "deny":
        why = (
            f"comes after allow rule {rule.id}, which can match the same calls; deny wins "
            "wherever both match (move the deny above the allow so the document reads the way "
            "it decides)"
        )
        return [Finding("warning", other.id, why)]
    winner = rule if _ORDER[rule.effect] > _ORDER[other.effect] else other
    why = (
        f"overlaps {other.id} ({rule.effect} vs {other.effect}): where both match, "
        f"{winner.id} ({winner.effect}) decides"
    )
    return [Finding("warning", rule.id, why)]


def _unconditional(rule: Rule) -> bool:
    return not rule.when and rule.limit is None


def _names_cover(outer: list[str], inner: list[str]) -> bool:
    if not outer:
        return True
    return bool(inner) and all(any(fnmatchcase(n, p) for p in outer) for n in inner)


def _names_meet(a: list[str], b: list[str]) -> bool:
    if not a or not b:
        return True
    return any(fnmatchcase(x, y) or fnmatchcase(y, x) or _globbed(x, y) for x in a for y in b)


def _globbed(x: str, y: str) -> bool:
    return any(c in x + y for c in "*?[")


def covers(outer: Rule, inner: Rule) -> bool:
    """Whether every call `inner`'s scope can match is in `outer`'s scope."""
    if outer.categories and not (
        inner.categories and set(inner.categories) <= set(outer.categories)
    ):
        return False
    return _names_cover(outer.agents, inner.agents) and _names_cover(outer.tools, inner.tools)


def overlap(a: Rule, b: Rule) -> bool:
    """Whether some call could match both rules (not provably disjoint)."""
    if not (_names_meet(a.agents, b.agents) and _names_meet(a.tools, b.tools)):
        return False
    # (Categories are never disjoint: one tool may declare several.)
    return contradiction([*a.when, *b.when]) is None


def contradiction(conds: list[Condition]) -> str | None:
    """Why `conds` can never all hold together (`None`: they may)."""
    by_arg: dict[str, list[Condition]] = {}
    for c in conds:
        by_arg.setdefault(c.arg, []).append(c)
    for arg, group in by_arg.items():
        why = _range_empty(group) or _values_clash(group)
        if why is not None:
            return f"{arg}: {why}"
    return None


def _range_empty(group: list[Condition]) -> str | None:
    low: tuple[Decimal, bool] | None = None  # (bound, inclusive)
    high: tuple[Decimal, bool] | None = None
    for c in group:
        op, v = c.operator, c.operand
        if op == "eq" and isinstance(v, Decimal):
            low = _tighter(low, (v, True), lower=True)
            high = _tighter(high, (v, True), lower=False)
            continue
        if op in ("gt", "ge"):
            low = _tighter(low, (v, op == "ge"), lower=True)
        elif op in ("lt", "le"):
            high = _tighter(high, (v, op == "le"), lower=False)
    if low is None or high is None:
        return None
    if low[0] > high[0] or (low[0] == high[0] and not (low[1] and high[1])):
        return f"no number is above {low[0]} and below {high[0]} as written"
    return None


def _tighter(
    cur: tuple[Decimal, bool] | None, new: tuple[Decimal, bool], lower: bool
) -> tuple[Decimal, bool]:
    if cur is None or (new[0] > cur[0] if lower else new[0] < cur[0]):
        return new
    if new[0] == cur[0]:
        return (cur[0], cur[1] and new[1])
    return cur


def _values_clash(group: list[Condition]) -> str | None:
    eqs = [c.operand for c in group if c.operator == "eq"]
    if len({repr(v) for v in eqs}) > 1:
        return f"it cannot equal both {eqs[0]} and {eqs[1]}"
    if not eqs:
        return None
    v = eqs[0]
    for c in group:
        if c.operator == "ne" and c.operand == v:
            return f"it cannot equal and not equal {v}"
        if c.operator == "in" and v not in c.operand:
            return f"{v} is not in {[str(x) for x in c.operand]}"
        if c.operator == "not_in" and v in c.operand:
            return f"{v} is excluded by not_in"
        if c.operator == "exists" and c.operand is False:
            return "it cannot be absent and equal a value"
    return None
