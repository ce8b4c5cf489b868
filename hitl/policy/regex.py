"""Regular expressions a policy may use, restricted so a match takes bounded time.

Python's engine backtracks, so a pattern like `(a+)+$` can take exponential time on a hostile
string. A policy pattern is refused unless it keeps to a subset whose matches stay polynomial
and small: no backreferences, no lookarounds, no repeat inside a repeat or over an
alternation, at most `MAX_REPEATS` open-ended repeats; and a subject longer than
`MAX_SUBJECT` characters is never searched (the condition cannot be evaluated: see
`hitl.policy.evaluate`, which fails closed).
"""

from __future__ import annotations

import re

# The standard library's own parser of patterns (Python 3.11+; `sre_parse` is its deprecated
# alias): it tells the pattern's structure without compiling or running it.
from re import _parser as _sre  # type: ignore[attr-defined]
from typing import Any

MAX_PATTERN = 200
MAX_SUBJECT = 1024
MAX_REPEATS = 2
_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}
_REFUSED = {
    "GROUPREF": "backreferences",
    "GROUPREF_EXISTS": "conditional groups",
    "ASSERT": "lookarounds",
    "ASSERT_NOT": "lookarounds",
}


class UnsafePattern(ValueError):
    """A pattern outside the subset a policy may use."""


def check_pattern(pattern: str) -> re.Pattern[str]:
    """The compiled pattern, or `UnsafePattern` saying what is not allowed."""
    if len(pattern) > MAX_PATTERN:
        raise UnsafePattern(f"a pattern is at most {MAX_PATTERN} characters")
    try:
        parsed = _sre.parse(pattern)
    except re.error as exc:
        raise UnsafePattern(f"not a regular expression: {exc}") from None
    repeats = _walk(list(parsed), inside_repeat=False)
    if repeats > MAX_REPEATS:
        raise UnsafePattern(
            f"a pattern has at most {MAX_REPEATS} open-ended repeats (*, +, {{n,}}), "
            f"this one has {repeats}"
        )
    return re.compile(pattern)


def _walk(items: list[Any], inside_repeat: bool) -> int:
    """Open-ended repeats in `items`; raises on what the subset refuses."""
    count = 0
    for op, arg in items:
        name = str(op)
        if name in _REFUSED:
            raise UnsafePattern(f"{_REFUSED[name]} are not allowed in a policy pattern")
        if name in _REPEATS:
            _low, high, sub = arg
            if inside_repeat:
                raise UnsafePattern("a repeat inside a repeat is not allowed ((a+)+ and the like)")
            if _has_branch(list(sub)):
                raise UnsafePattern("a repeat over an alternation is not allowed ((a|b)*)")
            if high == _sre.MAXREPEAT or high > 100:
                count += 1
            count += _walk(list(sub), inside_repeat=True)
        elif name == "SUBPATTERN":
            count += _walk(list(arg[-1]), inside_repeat)
        elif name == "BRANCH":
            count += sum(_walk(list(b), inside_repeat) for b in arg[1])
        elif name == "ATOMIC_GROUP":
            count += _walk(list(arg), inside_repeat)
    return count


def _has_branch(items: list[Any]) -> bool:
    for op, arg in items:
        name = str(op)
        if name == "BRANCH":
            return True
        if name == "SUBPATTERN" and _has_branch(list(arg[-1])):
            return True
    return False


def search(pattern: str, subject: str) -> bool | None:
    """Whether `pattern` occurs in `subject`; `None` when the subject is too long to search."""
    if len(subject) > MAX_SUBJECT:
        return None
    return check_pattern(pattern).search(subject) is not None
