"""`hitl policy test`: table-driven expectations a compliance reviewer can read.

A cases file (YAML or JSON) lists calls and what the policy must say about each:

```yaml
defaults: {agent: Refund desk, tool: refund, categories: [payments]}
cases:
  - name: a refund above $50,000 is refused
    arguments: {customer_id: C-1, amount: 60000}
    expect: {effect: deny, rule: deny-above-50k}
  - name: a customer past $5,000 today needs a manager
    arguments: {customer_id: C-2, amount: 900}
    ledger: {"refunds:customer:C-2": 4500}
    expect: {effect: ask, rule: daily-total-per-customer, approvers: [group:managers]}
```

`ledger` gives the totals already in each key's window (a limit is then judged against them,
in memory: nothing is reserved); `effect: none` expects no rule to decide. Expectations name
any of `effect`, `rule`, `approvers`, `required_approvals`, `approval_timeout_seconds`,
`message`, `shadow_effect`, `shadow_rule`, `matched`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hitl.policy.document import PolicyDocument, to_decimal
from hitl.policy.evaluate import CallFacts, Verdict, evaluate
from hitl.policy.limits import LimitAnswer, LimitCheck
from hitl.policy.loading import MAX_DOCUMENT_BYTES, PolicyError, _parse, digest_of

EXPECTABLE = (
    "effect",
    "rule",
    "approvers",
    "required_approvals",
    "approval_timeout_seconds",
    "message",
    "shadow_effect",
    "shadow_rule",
    "matched",
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CallDefaults(_Strict):
    """What every case's call is unless it says otherwise."""

    agent: str = "agent"
    tool: str | None = None
    categories: list[str] = Field(default_factory=list)


class Case(_Strict):
    """One call and what the policy must say about it."""

    name: str = Field(min_length=1, max_length=300)
    agent: str | None = None
    tool: str | None = None
    categories: list[str] | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    ledger: dict[str, Decimal | int | str] = Field(default_factory=dict)
    expect: dict[str, Any]


class CasesFile(_Strict):
    """A cases file: defaults and the cases."""

    defaults: CallDefaults = Field(default_factory=CallDefaults)
    cases: list[Case] = Field(min_length=1, max_length=5000)


class CaseLedger:
    """Totals given by a case, judged in memory (reserves nothing; for `hitl policy test`)."""

    def __init__(self, totals: dict[str, Any]) -> None:
        self.totals = {k: to_decimal(v) or Decimal(0) for k, v in totals.items()}

    async def check_and_reserve(self, check: LimitCheck) -> LimitAnswer:
        """The case's total for the key plus this call, against the threshold."""
        before = self.totals.get(check.key, Decimal(0))
        after = before + Decimal(check.amount)
        return LimitAnswer(
            total_before=str(before),
            total_after=str(after),
            exceeded=after > Decimal(check.threshold),
        )

    async def release(self, check: LimitCheck, reason: str) -> None:
        """Nothing is reserved."""

    async def commit(self, check: LimitCheck) -> None:
        """Nothing is reserved."""


class CaseResult(BaseModel):
    """One case's outcome: the differences (none: it passed) and the verdict."""

    name: str
    diffs: list[str]
    verdict: Verdict


def load_cases(path: str | Path) -> CasesFile:
    """A cases file, validated (`PolicyError` with the line when it is not usable)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise PolicyError(f"cannot read it ({exc.strerror})", source=str(p)) from None
    if len(raw) > MAX_DOCUMENT_BYTES * 8:
        raise PolicyError("too large", source=str(p))
    value, lines = _parse(raw.decode("utf-8", errors="replace"), str(p), p.suffix == ".json")
    try:
        cases = CasesFile.model_validate(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        where = ".".join(str(x) for x in loc)
        raise PolicyError(
            f"{where}: {err['msg']}", lines.get(loc[:3]) or lines.get(loc[:2]), str(p)
        ) from None
    for case in cases.cases:
        unknown = [k for k in case.expect if k not in EXPECTABLE]
        if unknown:
            raise PolicyError(
                f"case {case.name!r} expects {unknown[0]!r} (one of {', '.join(EXPECTABLE)})",
                source=str(p),
            )
    return cases


async def run_cases(doc: PolicyDocument, cases: CasesFile) -> list[CaseResult]:
    """Every case's verdict and its differences from what the case expects."""
    digest = digest_of(doc)
    results = []
    for case in cases.cases:
        d = cases.defaults
        facts = CallFacts(
            agent=case.agent or d.agent,
            tool=case.tool or d.tool or "",
            categories=case.categories if case.categories is not None else d.categories,
            arguments=case.arguments,
            workflow_id="policy-test",
            call_id=case.name,
            at=datetime.now(UTC),
        )
        verdict = await evaluate(doc, digest, facts, CaseLedger(case.ledger))
        results.append(
            CaseResult(name=case.name, diffs=diffs(case.expect, verdict), verdict=verdict)
        )
    return results


def diffs(expect: dict[str, Any], verdict: Verdict) -> list[str]:
    """`expected X, got Y` for each expectation the verdict does not meet."""
    out = []
    for key, want in expect.items():
        got = getattr(verdict, key)
        if want == "none":
            want = None
        if _norm(got) != _norm(want):
            out.append(f"{key}: expected {_show(want)}, got {_show(got)}")
    return out


def _norm(value: Any) -> Any:
    if isinstance(value, list):
        return [_norm(v) for v in value]
    number = (
        to_decimal(value)
        if isinstance(value, int | Decimal) and not isinstance(value, bool)
        else None
    )
    return number if number is not None else value


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)
