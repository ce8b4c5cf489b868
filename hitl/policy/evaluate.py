"""Evaluating a policy for one call: which rules match, why, and the verdict they make.

Precedence (docs/policies.md): every rule is tested, in document order; among the enforced
rules that match, `deny` wins over everything, then `ask`, then `allow`. The first matching
rule of the winning effect is the deciding rule (of the `deny` rules, the first that held on
the call's facts, before any that held only by failing closed). `log_only` rules decide
nothing: the verdict records what they would have made it (`shadow_effect`). A condition that
cannot be evaluated (a text compared as a number, a subject too long for a pattern, a ledger
that does not answer) fails closed: it holds for a `deny` or `ask` rule and not for an `allow`
rule.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fnmatch import fnmatchcase
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr

from hitl.policy.document import Condition, Effect, Limit, Mode, PolicyDocument, Rule, to_decimal
from hitl.policy.limits import LimitCheck, LimitLedger, LimitLedgerError
from hitl.policy.regex import search

_ORDER: dict[Effect, int] = {"allow": 0, "ask": 1, "deny": 2}
_KEY_PART = re.compile(r"\{([A-Za-z0-9_.]{1,100})\}")
_MISSING = object()


class Unknown(Exception):
    """A test that cannot be evaluated (it fails closed)."""


@dataclass(frozen=True)
class CallFacts:
    """What a policy can see of a call."""

    agent: str
    tool: str
    arguments: Any
    """The call's arguments as the model sent them (JSON, numbers as Decimal)."""
    categories: Sequence[str] = ()
    workflow_id: str = ""
    call_id: str = ""
    at: datetime | None = None


class LimitHit(BaseModel):
    """What the ledger said for one limit rule."""

    rule: str
    key: str
    total_after: str | None = None
    above: str
    exceeded: bool
    reservation_id: str | None = None
    reserved: bool = False
    check: LimitCheck | None = None
    """What the ledger was asked (with `reserved`: what releases or commits the hold)."""


class RuleReport(BaseModel):
    """One rule tested against a call: whether it matched, and why (or why not)."""

    rule: str
    effect: Effect
    mode: Mode
    matched: bool
    why: list[str] = Field(default_factory=list)
    _held_closed: bool = PrivateAttr(default=False)

    def fail_closed(self, holds: bool, reason: str) -> None:
        """Note a part that could not be evaluated (`reason`), and whether it holds anyway."""
        self.why.append(f"{reason}; fails closed: {'holds' if holds else 'does not hold'}")
        self._held_closed = self._held_closed or holds

    @property
    def held_closed(self) -> bool:
        """Whether a part of the rule held only by failing closed (`why` says which)."""
        return self._held_closed


class Verdict(BaseModel):
    """A policy's answer for one call."""

    policy: str
    version: str
    digest: str
    effect: Effect | None = None
    """The enforced verdict (`None`: no enforced rule matched; the tool's code decides)."""
    rule: str | None = None
    """The deciding rule (the first matching enforced rule of the winning effect)."""
    message: str | None = None
    approvers: list[str] = Field(default_factory=list)
    required_approvals: int | None = None
    approval_timeout_seconds: int | None = None
    escalate_after_seconds: int | None = None
    escalate_to: list[str] = Field(default_factory=list)
    shadow_effect: Effect | None = None
    """With `log_only` rules matching: the verdict had they been enforced."""
    shadow_rule: str | None = None
    matched: list[str] = Field(default_factory=list)
    limits: list[LimitHit] = Field(default_factory=list)
    reports: list[RuleReport] = Field(default_factory=list)


async def evaluate(
    doc: PolicyDocument,
    digest: str,
    facts: CallFacts,
    ledger: LimitLedger | None = None,
) -> Verdict:
    """The verdict of `doc` for one call, asking `ledger` about limits of matching rules."""
    verdict = Verdict(policy=doc.policy, version=doc.version, digest=digest)
    hits: list[tuple[Rule, Mode]] = []
    for rule in doc.rules:
        mode = doc.mode_of(rule)
        report = RuleReport(rule=rule.id, effect=rule.effect, mode=mode, matched=False)
        verdict.reports.append(report)
        if not _in_scope(rule, facts, report.why):
            continue
        if not _conditions(rule, facts.arguments, report):
            continue
        if rule.limit is not None and not await _limit(
            rule, rule.limit, mode, facts, ledger, verdict, report
        ):
            continue
        report.matched = True
        hits.append((rule, mode))
    verdict.matched = [r.id for r, _ in hits]
    enforced = [r for r, m in hits if m == "enforce"]
    _decide(verdict, enforced)
    if any(m == "log_only" for _, m in hits):
        every = [r for r, _ in hits]
        winner = _winner(every)
        verdict.shadow_effect = winner.effect if winner else None
        verdict.shadow_rule = winner.id if winner else None
    return verdict


def _winner(rules: list[Rule]) -> Rule | None:
    if not rules:
        return None
    top = max(_ORDER[r.effect] for r in rules)
    return next(r for r in rules if _ORDER[r.effect] == top)


def _decide(verdict: Verdict, rules: list[Rule]) -> None:
    """The enforced verdict from the matching enforced rules (asks merged strictly)."""
    winner = _winner(rules)
    if winner is None:
        return
    closed = {r.rule for r in verdict.reports if r.held_closed}
    if winner.effect == "deny":
        # A deny that held on the call's facts decides before one that held only by failing
        # closed: the model then reads what was found, not that a rule could not be checked.
        winner = next((r for r in rules if r.effect == "deny" and r.id not in closed), winner)
    verdict.effect, verdict.rule = winner.effect, winner.id
    if winner.effect == "deny":
        checked = winner.id not in closed
        verdict.message = winner.message if checked else UNCHECKED.format(rule=winner.id)
        return
    if winner.effect != "ask":
        return
    asks = [r for r in rules if r.effect == "ask"]
    named = next((r for r in asks if r.approvers), None)
    verdict.approvers = list(named.approvers) if named else []
    counts = [r.required_approvals for r in asks if r.required_approvals]
    verdict.required_approvals = max(counts) if counts else None
    timeouts = [r.approval_timeout for r in asks if r.approval_timeout]
    verdict.approval_timeout_seconds = min(timeouts) if timeouts else None
    escalating = next((r for r in asks if r.escalate_after), None)
    if escalating is not None:
        verdict.escalate_after_seconds = escalating.escalate_after
        verdict.escalate_to = list(escalating.escalate_to)


def _in_scope(rule: Rule, facts: CallFacts, why: list[str]) -> bool:
    if rule.agents and not any(fnmatchcase(facts.agent, p) for p in rule.agents):
        why.append(f"agent {facts.agent!r} is not in {rule.agents}")
        return False
    if rule.tools and not any(fnmatchcase(facts.tool, p) for p in rule.tools):
        why.append(f"tool {facts.tool!r} is not in {rule.tools}")
        return False
    if rule.categories and not set(rule.categories) & set(facts.categories):
        why.append(f"tool categories {list(facts.categories)} share none of {rule.categories}")
        return False
    return True


def _conditions(rule: Rule, arguments: Any, report: RuleReport) -> bool:
    for cond in rule.when:
        try:
            held = holds(cond, arguments)
        except Unknown as exc:
            closed = rule.effect != "allow"
            report.fail_closed(closed, f"{_text(cond)}: cannot be evaluated ({exc})")
            if not closed:
                return False
            continue
        report.why.append(f"{_text(cond)}: {'holds' if held else 'does not hold'}")
        if not held:
            return False
    return True


UNCHECKED = (
    "Refused by policy rule {rule!r}: it could not be checked for this call, so the call was "
    "not made."
)
"""What a deny that holds only by failing closed tells the model, instead of the rule's own
message: that message states what the rule found (a cap reached, a limit passed), which was not
found. The reason (a ledger that did not answer, an argument that is not a number) is in the
verdict's reports, for the audit."""


def _text(cond: Condition) -> str:
    value = cond.operand
    shown = [str(v) for v in value] if isinstance(value, list) else value
    return f"{cond.arg} {cond.operator} {shown}"


def lookup(arguments: Any, path: str) -> Any:
    """The argument at a dotted path (`_MISSING` when absent)."""
    value = arguments
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def holds(cond: Condition, arguments: Any) -> bool:
    """Whether one condition holds; `Unknown` when it cannot be evaluated."""
    value = lookup(arguments, cond.arg)
    op, operand = cond.operator, cond.operand
    if op == "exists":
        return (value is not _MISSING and value is not None) == bool(operand)
    if value is _MISSING:
        return op in ("ne", "not_in")
    if op in ("eq", "ne"):
        return _equal(value, operand) == (op == "eq")
    if op in ("in", "not_in"):
        found = any(_equal(value, v) for v in operand)
        return found == (op == "in")
    if op == "regex":
        if not isinstance(value, str):
            raise Unknown(f"{cond.arg} is not a string")
        searched = search(operand, value)
        if searched is None:
            raise Unknown(f"{cond.arg} is too long to search")
        return searched
    number = to_decimal(value)
    if number is None:
        raise Unknown(f"{cond.arg} is not a number")
    return bool(
        {
            "lt": number < operand,
            "le": number <= operand,
            "gt": number > operand,
            "ge": number >= operand,
        }[op]
    )


def _equal(value: Any, operand: Any) -> bool:
    if isinstance(operand, Decimal):
        number = to_decimal(value) if not isinstance(value, str) else None
        return number is not None and number == operand
    if isinstance(operand, bool) or operand is None:
        return value is operand
    return isinstance(value, str) and value == operand


def render_key(template: str, facts: CallFacts) -> str:
    """A limit's key for a call; `Unknown` when an argument it names is missing or not a scalar."""

    def part(m: re.Match[str]) -> str:
        name = m.group(1)
        if name == "agent":
            return facts.agent
        if name == "tool":
            return facts.tool
        value = lookup(facts.arguments, name)
        if value is _MISSING or value is None or isinstance(value, dict | list):
            raise Unknown(f"the key's {name} is missing or not a single value")
        number = to_decimal(value) if not isinstance(value, str | bool) else None
        return str(number.normalize()) if number is not None else str(value)

    key = _KEY_PART.sub(part, template)
    if len(key) > 200 or not key.isprintable():
        raise Unknown("the key is longer than 200 characters or not printable")
    return key


async def _limit(
    rule: Rule,
    limit: Limit,
    mode: Mode,
    facts: CallFacts,
    ledger: LimitLedger | None,
    verdict: Verdict,
    report: RuleReport,
) -> bool:
    """Whether the rule's limit is passed; asks the ledger (reserving, when enforced)."""
    closed = rule.effect != "allow"
    try:
        key = render_key(limit.key, facts)
        amount = (
            Decimal(1)
            if limit.measure == "count"
            else to_decimal(lookup(facts.arguments, limit.of or ""))
        )
        if amount is None or amount < 0:
            raise Unknown(f"{limit.of} is not a number of 0 or more")
        if ledger is None or facts.at is None:
            raise Unknown("no limit ledger")
        check = LimitCheck(
            key=key,
            window_seconds=limit.window,
            measure=limit.measure,
            amount=format(amount, "f"),  # plain digits: 1E+3 is 1000 to a ledger
            threshold=format(limit.above, "f"),
            reservation_id=f"{facts.workflow_id}:{facts.call_id}:{key}",
            reserve=mode == "enforce",
            at=facts.at,
        )
        try:
            answer = await ledger.check_and_reserve(check)
        except LimitLedgerError as exc:
            raise Unknown(f"the ledger did not answer: {exc}") from None
    except Unknown as exc:
        report.fail_closed(closed, f"limit: cannot be evaluated ({exc})")
        verdict.limits.append(
            LimitHit(rule=rule.id, key=limit.key, above=str(limit.above), exceeded=closed)
        )
        return closed
    hit = LimitHit(
        rule=rule.id,
        key=key,
        total_after=answer.total_after,
        above=check.threshold,
        exceeded=answer.exceeded,
        reservation_id=check.reservation_id if answer.reserved else None,
        reserved=answer.reserved,
        check=check,
    )
    verdict.limits.append(hit)
    compared = ">" if answer.exceeded else "<="
    report.why.append(f"limit {key}: {limit.measure} {answer.total_after} {compared} {limit.above}")
    return answer.exceeded
