"""The approval-policy language (hitl.policy): operators, decimals, precedence, shadow mode,
fail-closed conditions, limits, and malformed documents refused with the line and reason."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from hitl.policy import CallFacts, PolicyDocument, PolicyError, evaluate, parse_policy
from hitl.policy.cases import CaseLedger
from hitl.policy.document import to_decimal
from hitl.policy.regex import MAX_SUBJECT, UnsafePattern, check_pattern

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "policies"


def doc(*rules: str, mode: str = "enforce") -> PolicyDocument:
    body = "\n".join(rules)
    return parse_policy(f"policy: p\nversion: '1'\nmode: {mode}\nrules:\n{body}\n")


def rule(rid: str, effect: str, when: str = "", extra: str = "") -> str:
    text = f"  - id: {rid}\n    effect: {effect}\n"
    if effect == "deny":
        text += f"    message: no by {rid}\n"
    if when:
        text += f"    when: [{when}]\n"
    return text + extra


async def verdict(d: PolicyDocument, args: Any, tool: str = "refund", **kw: Any) -> Any:
    facts = CallFacts(agent="Desk", tool=tool, arguments=args, **kw)
    return await evaluate(d, "sha256:x", facts, kw.pop("ledger", None))


async def holds(cond: str, args: Any) -> bool:
    v = await verdict(doc(rule("r", "ask", cond)), args)
    return v.effect == "ask"


@pytest.mark.parametrize(
    ("cond", "args", "expected"),
    [
        ("{arg: amount, eq: 1000}", {"amount": Decimal("1000.00")}, True),
        ("{arg: amount, eq: 1000}", {"amount": "1000"}, False),  # a text is not the number
        ("{arg: country, eq: DE}", {"country": "DE"}, True),
        ("{arg: country, ne: DE}", {"country": "FR"}, True),
        ("{arg: country, ne: DE}", {}, True),
        ("{arg: amount, lt: 10}", {"amount": Decimal("9.99")}, True),
        ("{arg: amount, le: 10}", {"amount": Decimal("10.00")}, True),
        ("{arg: amount, gt: 0.3}", {"amount": Decimal("0.30000000000000004")}, True),
        ("{arg: amount, gt: 0.3}", {"amount": 0.1 + 0.2}, True),
        ("{arg: amount, ge: 1000}", {"amount": "1000.00"}, True),  # numeric text compares
        ("{arg: amount, gt: 1000}", {"amount": Decimal("1000")}, False),
        ("{arg: country, in: [DE, FR]}", {"country": "FR"}, True),
        ("{arg: country, not_in: [DE, FR]}", {"country": "IT"}, True),
        ("{arg: n, in: [1, 2]}", {"n": Decimal("2.0")}, True),
        ("{arg: to, regex: '@example\\.com$'}", {"to": "a@example.com"}, True),
        ("{arg: to, regex: '@example\\.com$'}", {"to": "a@example.org"}, False),
        ("{arg: note, exists: true}", {"note": "x"}, True),
        ("{arg: note, exists: true}", {"note": None}, False),
        ("{arg: note, exists: false}", {}, True),
        ("{arg: customer.tier, eq: gold}", {"customer": {"tier": "gold"}}, True),
        ("{arg: flag, eq: true}", {"flag": True}, True),
        ("{arg: flag, eq: true}", {"flag": 1}, False),
        ("{arg: country, eq: NO}", {"country": "NO"}, True),  # YAML 1.1 would say false
    ],
)
async def test_each_operator(cond: str, args: Any, expected: bool) -> None:
    assert await holds(cond, args) is expected


def test_numbers_are_decimals_never_floats() -> None:
    d = doc(rule("r", "ask", "{arg: amount, gt: 1000.10}"))
    assert d.rules[0].when[0].gt == Decimal("1000.10")
    assert isinstance(d.rules[0].when[0].gt, Decimal)
    assert to_decimal(0.1) == Decimal("0.1")  # a float argument is read from its repr
    assert to_decimal(float("nan")) is None and to_decimal("Infinity") is None


async def test_deny_wins_over_ask_and_allow_whatever_the_order() -> None:
    d = doc(
        rule("free", "allow"),
        rule("asked", "ask", extra="    approvers: [group:finance]\n"),
        rule("no", "deny", "{arg: amount, gt: 50000}"),
    )
    v = await verdict(d, {"amount": 60000})
    assert (v.effect, v.rule, v.message) == ("deny", "no", "no by no")
    assert v.matched == ["free", "asked", "no"]
    v = await verdict(d, {"amount": 10})
    assert (v.effect, v.rule, v.approvers) == ("ask", "asked", ["group:finance"])


async def test_ask_wins_over_allow_and_asks_merge_strictly() -> None:
    d = doc(
        rule("free", "allow"),
        rule("a", "ask", extra="    required_approvals: 2\n    approval_timeout: 1h\n"),
        rule("b", "ask", extra="    approvers: [ann]\n    approval_timeout: 10m\n"),
    )
    v = await verdict(d, {})
    assert (v.effect, v.rule) == ("ask", "a")
    assert (v.approvers, v.required_approvals, v.approval_timeout_seconds) == (["ann"], 2, 600)


async def test_no_rule_matching_leaves_the_call_to_its_code() -> None:
    d = doc(rule("r", "deny", "", "    tools: [refund]\n"))
    v = await verdict(d, {}, tool="lookup")
    assert v.effect is None and v.rule is None and v.matched == []
    assert "tool 'lookup' is not in ['refund']" in v.reports[0].why[0]


async def test_scope_by_agent_glob_and_category() -> None:
    d = doc(
        rule("cat", "ask", extra="    categories: [payments]\n"),
        rule("glob", "deny", extra="    tools: ['delete_*']\n    agents: ['Desk*']\n"),
    )
    assert (await verdict(d, {}, categories=["payments"])).rule == "cat"
    assert (await verdict(d, {}, categories=["reads"])).effect is None
    assert (await verdict(d, {}, tool="delete_user")).rule == "glob"


async def test_log_only_rule_decides_nothing_but_says_what_it_would_have() -> None:
    d = doc(rule("free", "allow"), rule("try", "deny", extra="    mode: log_only\n"))
    v = await verdict(d, {})
    assert (v.effect, v.rule) == ("allow", "free")
    assert (v.shadow_effect, v.shadow_rule) == ("deny", "try")


async def test_a_log_only_document_enforces_no_rule() -> None:
    d = doc(rule("no", "deny", extra="    mode: enforce\n"), mode="log_only")
    v = await verdict(d, {})
    assert v.effect is None and (v.shadow_effect, v.shadow_rule) == ("deny", "no")


async def test_conditions_that_cannot_be_evaluated_fail_closed() -> None:
    deny = doc(rule("no", "deny", "{arg: amount, gt: 100}"))
    allow = doc(rule("yes", "allow", "{arg: amount, lt: 100}"))
    assert (await verdict(deny, {"amount": "lots"})).effect == "deny"
    assert (await verdict(allow, {"amount": "lots"})).effect is None
    too_long = "a" * (MAX_SUBJECT + 1)
    pattern = doc(rule("no", "deny", "{arg: to, regex: 'b'}"))
    v = await verdict(pattern, {"to": too_long})
    assert v.effect == "deny" and "fails closed" in v.reports[0].why[0]
    # The model is not told what the rule would have found (its message), only that the rule
    # could not be checked; a rule that was checked keeps its message.
    assert v.message is not None and "could not be checked" in v.message
    assert "no by no" not in v.message
    checked = await verdict(deny, {"amount": 500})
    assert (checked.effect, checked.message) == ("deny", "no by no")
    # Told apart by what happened, not by the reasons' words: a condition whose own text reads
    # like failing closed, and holds, keeps the rule's message.
    lookalike = doc(rule("no", "deny", "{arg: note, eq: 'fails closed'}"))
    same = await verdict(lookalike, {"note": "fails closed"})
    assert (same.effect, same.message) == ("deny", "no by no"), same.reports[0].why
    # A deny that held on the facts decides before an earlier one that held only by failing
    # closed: the model reads what was found, and the audit names the rule that found it.
    both = doc(
        rule("cap", "deny", "{arg: amount, gt: 100}"), rule("no", "deny", "{arg: to, eq: x}")
    )
    found = await verdict(both, {"amount": "lots", "to": "x"})
    assert (found.effect, found.rule, found.message) == ("deny", "no", "no by no")
    assert found.matched == ["cap", "no"] and "fails closed" in found.reports[0].why[0]
    alone = await verdict(both, {"amount": "lots", "to": "y"})
    assert (alone.effect, alone.rule) == ("deny", "cap") and "could not be checked" in str(
        alone.message
    )


async def test_a_cap_the_ledger_could_not_check_is_not_reported_as_reached() -> None:
    """The ledger gives no answer (a timeout, a refusal): the deny rule fails closed, and the
    model is told the rule could not be checked, not the rule's "the cap is reached"."""
    from datetime import UTC, datetime

    from hitl.policy import LimitLedgerError

    class Silent(CaseLedger):
        async def check_and_reserve(self, check: Any) -> Any:
            raise LimitLedgerError("the ledger did not answer in time")

    limit = "    limit: {key: 'c:{customer}', window: 24h, measure: sum, of: amount, above: 50}\n"
    d = doc(rule("cap", "deny", extra=limit))
    args = {"customer": "C-1", "amount": Decimal("60")}
    at = datetime.now(UTC)
    facts = CallFacts(agent="Desk", tool="refund", arguments=args, at=at, call_id="c1")
    silent = await evaluate(d, "sha256:x", facts, Silent({}))
    assert silent.effect == "deny" and silent.message is not None
    assert "'cap': it could not be checked" in silent.message and "no by cap" not in silent.message
    assert any("did not answer" in w for w in silent.reports[0].why), silent.reports[0].why
    reached = await evaluate(d, "sha256:x", facts, CaseLedger({}))
    assert (reached.effect, reached.message) == ("deny", "no by cap")


async def test_limits_ask_the_ledger_and_fail_closed_without_one() -> None:
    limit = "    limit: {key: 'c:{customer}', window: 24h, measure: sum, of: amount, above: 5000}\n"
    d = doc(rule("daily", "ask", extra=limit))
    assert d.rules[0].limit is not None and d.rules[0].limit.window == 86400
    from datetime import UTC, datetime

    at = datetime.now(UTC)
    ledger = CaseLedger({"c:C-1": 4500})
    args = {"customer": "C-1", "amount": Decimal("600")}
    facts = CallFacts(agent="Desk", tool="refund", arguments=args, at=at, call_id="c1")
    v = await evaluate(d, "sha256:x", facts, ledger)
    assert v.effect == "ask" and v.limits[0].total_after == "5100"
    small = CallFacts(agent="Desk", tool="refund", arguments={**args, "amount": 400}, at=at)
    assert (await evaluate(d, "sha256:x", small, ledger)).effect is None
    seen: list[Any] = []

    class Recording(CaseLedger):
        async def check_and_reserve(self, check: Any) -> Any:
            seen.append(check)
            return await super().check_and_reserve(check)

    exp = CallFacts(
        agent="Desk", tool="refund", arguments={**args, "amount": Decimal("1E+3")}, at=at
    )
    await evaluate(d, "sha256:x", exp, Recording({}))
    assert (seen[0].amount, seen[0].threshold, seen[0].key) == ("1000", "5000", "c:C-1")
    blind = await evaluate(d, "sha256:x", facts, None)
    assert blind.effect == "ask" and "no limit ledger" in blind.reports[0].why[0]


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        (
            "policy: p\nversion: '1'\nrules:\n  - id: r\n    effect: ask\n"
            "    when:\n      - {arg: amount, greater: 5}\n",
            7,
            "unknown operator 'greater'",
        ),
        (
            "policy: p\nversion: '1'\nrules:\n  - id: r\n    effect: deny\n",
            4,
            "a deny rule has a `message`",
        ),
        ("policy: p\nversion: '1'\nversion: '2'\nrules: []\n", 3, "'version' appears twice"),
        (
            "policy: p\nversion: '1'\nrules:\n  - &a {id: r, effect: allow}\n  - *a\n",
            4,
            "anchors and aliases are not allowed",
        ),
        (
            "policy: p\nversion: '1'\nrules:\n  - id: r\n    effect: ask\n"
            "    when: [{arg: x, regex: '(a+)+$'}]\n",
            6,
            "a repeat inside a repeat",
        ),
        (
            "policy: p\nversion: '1'\nrules:\n  - id: r\n    effect: ask\n"
            "    when: [{arg: x, gt: .nan}]\n",
            6,
            "not a finite number",
        ),
        (
            "policy: p\nversion: '1'\nrules:\n  - id: r\n    effect: allow\n"
            "  - id: r\n    effect: ask\n",
            3,
            "two rules have the id 'r'",
        ),
        ("policy: p\nversion: '1'\nrules:\n  - id: r\n    effect: maybe\n", 5, "effect"),
        (
            "policy: p\nversion: '1'\nrules:\n  - id: r\n    effect: ask\n    window: 2h\n",
            6,
            "Extra inputs are not permitted",
        ),
        ("policy: p\nversion: '1'\nrules: [\n", 4, "not YAML"),
        ("policy: p\nversion: '1'\nrules: !!python/object:os.system {}\n", 3, "tag"),
        ('{"policy": "p",\n "version": "1",\n "rules": [}\n', 3, "not JSON"),
    ],
)
def test_malformed_documents_are_refused_with_the_line_and_reason(
    text: str, line: int, reason: str
) -> None:
    with pytest.raises(PolicyError) as exc:
        parse_policy(text)
    assert exc.value.line == line, str(exc.value)
    assert reason in str(exc.value)


def test_a_huge_document_is_refused_before_parsing() -> None:
    with pytest.raises(PolicyError, match="bytes; the limit is"):
        parse_policy("#" * (300 * 1024))


def test_json_documents_load_with_decimals() -> None:
    d = parse_policy(
        '{"policy": "p", "version": "1", "rules": [{"id": "r", "effect": "ask",'
        ' "when": [{"arg": "amount", "gt": 1000.10}]}]}'
    )
    assert d.rules[0].when[0].gt == Decimal("1000.10")


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("(x)\\1", "backreferences"),
        ("(?=a)b", "lookarounds"),
        ("(a*)*", "repeat inside a repeat"),
        ("(ab|cd)+", "alternation"),
        ("a.*b.*c.*", "open-ended repeats"),
        ("x" * 201, "at most 200"),
        ("(", "not a regular expression"),
    ],
)
def test_unsafe_patterns_are_refused(pattern: str, problem: str) -> None:
    with pytest.raises(UnsafePattern, match=problem):
        check_pattern(pattern)


@pytest.mark.timeout(60)
def test_an_allowed_pattern_on_the_longest_subject_ends() -> None:
    """The worst allowed shape (two open-ended repeats over the same letters, no match) on the
    longest subject searched: cubic, about a second on a loaded 2-core machine. One more repeat
    would make it about 10^11 steps, so the timeout is the bound (no wall-clock assertion,
    which failed under load)."""
    compiled = check_pattern("a*a*b")
    assert compiled.search("a" * MAX_SUBJECT) is None
    assert compiled.search("a" * (MAX_SUBJECT - 1) + "b") is not None


def test_the_example_policy_loads() -> None:
    from hitl.policy import load_policy

    d = load_policy(EXAMPLES / "refund_desk.yaml")
    assert d.policy == "refund-desk" and d.has_limits
