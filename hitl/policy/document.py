"""The policy document: rules that allow, ask or deny a tool call, as validated data.

Pure pydantic (no Temporal): the worker loads a document (`hitl.policy.loading`), a run pins
it (its `digest`), and planning evaluates it (`hitl.policy.evaluate`). Every bound is checked
here, so a document that loads is one the evaluator can run in bounded time.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hitl.policy.regex import check_pattern

MAX_RULES = 500
MAX_CONDITIONS = 20
MAX_LIST = 200
MAX_TEXT = 1000
MAX_NAME = 200
MAX_DECIMAL_DIGITS = 40
MAX_WINDOW_SECONDS = 366 * 86400
ID = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$"
_DURATION = re.compile(r"^\s*(\d{1,9})\s*([smhd]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}

Effect = Literal["allow", "ask", "deny"]
Mode = Literal["enforce", "log_only"]
OPERATORS = ("eq", "ne", "lt", "le", "gt", "ge", "in", "not_in", "regex", "exists")
Scalar = Decimal | bool | str | None


def duration_seconds(value: Any) -> int:
    """Seconds of a duration: an integer of seconds or `90s`, `15m`, `24h`, `7d`."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a text like 15m, 24h, 7d")
    if isinstance(value, int | Decimal) and value == int(value):
        seconds = int(value)
    else:
        m = _DURATION.match(str(value)) if isinstance(value, str) else None
        if m is None:
            raise ValueError(f"{value!r} is not a duration (use seconds or 15m, 24h, 7d)")
        seconds = int(m.group(1)) * _UNIT[m.group(2)]
    if not 0 < seconds <= MAX_WINDOW_SECONDS:
        raise ValueError(f"a duration must be between 1 second and 366 days, not {value!r}")
    return seconds


def to_decimal(value: Any) -> Decimal | None:
    """A number as a Decimal (a numeric text too); `None` when it is not a finite number.

    Never through float: a float reaching here (a tool's parsed argument) is read from its
    shortest repr, so 0.1 is 0.1, not 0.1000000000000000055...
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        value = repr(value)
    if isinstance(value, str):
        if len(value) > MAX_DECIMAL_DIGITS + 2:
            return None
        value = value.strip()
    try:
        number = Decimal(value)
    except (InvalidOperation, TypeError, ValueError):
        return None
    return number if number.is_finite() else None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _scalar(value: Any) -> Scalar:
    if value is None or isinstance(value, bool | str):
        if isinstance(value, str) and len(value) > MAX_TEXT:
            raise ValueError(f"a value is {len(value)} characters; the limit is {MAX_TEXT}")
        return value
    number = to_decimal(value)
    if number is None or len(number.as_tuple().digits) > MAX_DECIMAL_DIGITS:
        raise ValueError(f"{value!r} is not a value a condition can compare")
    return number


class Condition(_Strict):
    """One test of an argument: `arg` and exactly one operator.

    `arg` is a dotted path into the call's arguments (`amount`, `customer.id`). Comparisons
    (`lt`, `le`, `gt`, `ge`) are between decimals: a number or a numeric text on either side,
    never a float. `eq` / `ne` / `in` / `not_in` compare numbers as decimals (`1000 == 1000.00`)
    and other values as they are. `regex` searches a string with a restricted pattern
    (`hitl.policy.regex`). `exists: true` holds when the argument is present (and not null).
    """

    arg: str = Field(min_length=1, max_length=MAX_NAME)
    eq: Scalar = None
    ne: Scalar = None
    lt: Decimal | None = None
    le: Decimal | None = None
    gt: Decimal | None = None
    ge: Decimal | None = None
    in_: list[Scalar] | None = Field(default=None, alias="in", max_length=MAX_LIST)
    not_in: list[Scalar] | None = Field(default=None, max_length=MAX_LIST)
    regex: str | None = Field(default=None, max_length=200)
    exists: bool | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _one_operator(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValueError("a condition is a mapping: {arg: amount, gt: 1000}")
        ops = [k for k in data if k != "arg"]
        unknown = [k for k in ops if k not in OPERATORS]
        if unknown:
            raise ValueError(f"unknown operator {unknown[0]!r} (operators: {', '.join(OPERATORS)})")
        if len(ops) != 1:
            raise ValueError(f"a condition has exactly one operator, this one has {len(ops)}")
        op = ops[0]
        value = data[op]
        if op in ("eq", "ne"):
            data = {**data, op: _scalar(value)}
        elif op in ("in", "not_in"):
            if not isinstance(value, list):
                raise ValueError(f"{op} takes a list")
            data = {**data, op: [_scalar(v) for v in value]}
        elif op in ("lt", "le", "gt", "ge"):
            number = to_decimal(value)
            if number is None:
                raise ValueError(f"{op} takes a number, not {value!r}")
            data = {**data, op: number}
        return data

    @field_validator("regex")
    @classmethod
    def _safe_regex(cls, value: str | None) -> str | None:
        if value is not None:
            check_pattern(value)
        return value

    @property
    def operator(self) -> str:
        """The condition's one operator."""
        field = next(f for f in self.model_fields_set if f != "arg")
        return "in" if field == "in_" else field

    @property
    def operand(self) -> Any:
        """The value the argument is compared with."""
        return getattr(self, "in_" if self.operator == "in" else self.operator)


class Limit(_Strict):
    """A condition over many runs: a count or sum per key in a sliding window.

    It holds when the key's total in the window, this call included, is above `above`. A
    worker evaluates it through its limit ledger (`hitl.policy.limits.LimitLedger`).
    """

    key: str = Field(min_length=1, max_length=MAX_NAME)
    """A template: `customer:{customer_id}`; `{agent}` and `{tool}` name the call's agent and
    tool, any other `{path}` an argument."""
    window: int
    """Seconds (written as 3600, 60m, 24h or 7d)."""
    measure: Literal["count", "sum"] = "count"
    of: str | None = Field(default=None, max_length=MAX_NAME)
    """The argument summed (with `measure: sum`)."""
    above: Decimal

    @field_validator("window", mode="before")
    @classmethod
    def _window(cls, value: Any) -> int:
        return duration_seconds(value)

    @model_validator(mode="after")
    def _sum_of(self) -> Limit:
        if self.measure == "sum" and not self.of:
            raise ValueError("a limit with measure: sum names the argument it sums (of: amount)")
        if self.measure == "count" and self.of:
            raise ValueError("`of` is for measure: sum")
        if not self.above.is_finite() or self.above < 0:
            raise ValueError("`above` is a number of 0 or more")
        return self


Names = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=MAX_NAME)]], Field(max_length=MAX_LIST)
]


class Rule(_Strict):
    """One rule: which calls it matches, and its effect on them.

    A call matches when its agent, tool and categories match (each omitted list matches all),
    every `when` condition holds, and its `limit` (if any) is above its threshold.
    """

    id: str = Field(pattern=ID)
    description: str | None = Field(default=None, max_length=MAX_TEXT)
    agents: Names = Field(default_factory=list)
    """Agent names or globs (`Refund*`)."""
    tools: Names = Field(default_factory=list)
    """Tool names or globs (`refund_*`)."""
    categories: Names = Field(default_factory=list)
    """Categories a tool declares (`function_tool(categories=[...])`): any of them matches."""
    when: list[Condition] = Field(default_factory=list, max_length=MAX_CONDITIONS)
    limit: Limit | None = None
    effect: Effect
    mode: Mode | None = None
    """`log_only`: the rule decides nothing; its verdict is recorded (`None`: the document's)."""
    message: str | None = Field(default=None, max_length=MAX_TEXT)
    """`deny`: what the model sees."""
    approvers: Names = Field(default_factory=list)
    """`ask`: who may decide (names or `group:<name>`); narrows the tool's, never widens it."""
    required_approvals: int | None = Field(default=None, ge=1, le=10)
    approval_timeout: int | None = None
    """`ask`: seconds a call may wait (60m, 24h); the shorter of this and the tool's applies."""
    escalate_after: int | None = None
    escalate_to: Names = Field(default_factory=list)

    @field_validator("approval_timeout", "escalate_after", mode="before")
    @classmethod
    def _durations(cls, value: Any) -> int | None:
        return None if value is None else duration_seconds(value)

    @model_validator(mode="after")
    def _effect_fields(self) -> Rule:
        asks: tuple[Any, ...] = (self.approvers, self.required_approvals)
        asks += (self.approval_timeout, self.escalate_after, self.escalate_to)
        if self.effect != "ask" and any(a not in (None, []) for a in asks):
            raise ValueError(
                f"approvers, deadlines and escalation are for effect ask, not {self.effect}"
            )
        if self.effect == "deny" and not self.message:
            raise ValueError("a deny rule has a `message`: what the model is told")
        if self.effect != "deny" and self.message:
            raise ValueError("`message` is for effect deny")
        if bool(self.escalate_after) != bool(self.escalate_to):
            raise ValueError("escalate_after and escalate_to go together")
        return self


class PolicyDocument(_Strict):
    """A versioned policy: its rules, in order, and the mode of those that name none."""

    policy: str = Field(pattern=ID)
    """The policy's name (`refund-desk`)."""
    version: str = Field(min_length=1, max_length=100)
    """The author's version (`2026-11-26.1`); the digest of the document tells versions apart."""
    description: str | None = Field(default=None, max_length=MAX_TEXT * 4)
    mode: Mode = "enforce"
    rules: list[Rule] = Field(max_length=MAX_RULES)

    @field_validator("rules")
    @classmethod
    def _unique_ids(cls, rules: list[Rule]) -> list[Rule]:
        seen: set[str] = set()
        for rule in rules:
            if rule.id in seen:
                raise ValueError(f"two rules have the id {rule.id!r}")
            seen.add(rule.id)
        return rules

    def mode_of(self, rule: Rule) -> Mode:
        """A rule's mode: its own, else the document's (a `log_only` document enforces none)."""
        if self.mode == "log_only":
            return "log_only"
        return rule.mode or self.mode

    @property
    def has_limits(self) -> bool:
        """Whether a rule counts across runs (a worker needs a limit ledger)."""
        return any(r.limit is not None for r in self.rules)
