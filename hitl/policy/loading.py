"""Reading a policy document (YAML or JSON), refused with the line and the reason.

A document is hostile input like any other: bounded in size, parsed without building objects
(YAML is composed into nodes and read by hand: no tags, no anchors or aliases, no duplicate
keys), numbers read as decimals (never float), then validated by `PolicyDocument`.
"""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hitl.errors import UserError
from hitl.policy.document import PolicyDocument

MAX_DOCUMENT_BYTES = 256 * 1024
Lines = dict[tuple[str | int, ...], int]


class PolicyError(UserError):
    """A policy document that cannot be used: where (`line`, 1-based, when known) and why."""

    def __init__(self, reason: str, line: int | None = None, source: str = "policy") -> None:
        where = f"{source}, line {line}" if line is not None else source
        super().__init__(f"{where}: {reason}", details={"line": line, "reason": reason})
        self.line = line
        self.reason = reason


def digest_of(doc: PolicyDocument) -> str:
    """`sha256:<hex>` of the document's canonical JSON: what a run pins and the audit names."""
    data = json.dumps(canonical(doc), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(data.encode()).hexdigest()


def canonical(doc: PolicyDocument) -> dict[str, Any]:
    """The document as JSON data (decimals as text), as a run pins it."""
    return doc.model_dump(mode="json", by_alias=True, exclude_unset=True)


def load_policy(path: str | Path) -> PolicyDocument:
    """A policy file (`.json`, else YAML), validated."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise PolicyError(f"cannot read it ({exc.strerror})", source=str(p)) from None
    return parse_policy(raw, source=str(p), json_only=p.suffix.lower() == ".json")


def parse_policy(
    raw: bytes | str, source: str = "policy", json_only: bool = False
) -> PolicyDocument:
    """A policy from its text, validated; `PolicyError` (with the line) when it is not usable."""
    data = raw.encode() if isinstance(raw, str) else raw
    if len(data) > MAX_DOCUMENT_BYTES:
        raise PolicyError(f"{len(data)} bytes; the limit is {MAX_DOCUMENT_BYTES}", source=source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"not UTF-8 (byte {exc.start})", source=source) from None
    value, lines = _parse(text, source, json_only)
    return from_data(value, source, lines)


def from_data(value: Any, source: str = "policy", lines: Lines | None = None) -> PolicyDocument:
    """A policy from parsed data (a pinned document, a registry update), validated."""
    if not isinstance(value, dict):
        raise PolicyError("a policy is a mapping with `policy`, `version` and `rules`", 1, source)
    try:
        return PolicyDocument.model_validate(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        line = _line_of(loc, lines or {})
        where = ".".join(str(p) for p in loc)
        reason = err["msg"].removeprefix("Value error, ")
        raise PolicyError(f"{where}: {reason}" if where else reason, line, source) from None


def _line_of(loc: tuple[Any, ...], lines: Lines) -> int | None:
    """The line of the deepest part of `loc` the document has (a missing key: its parent)."""
    path = tuple("in" if p == "in_" else p for p in loc)
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get((), None)


def _parse(text: str, source: str, json_only: bool) -> tuple[Any, Lines]:
    if json_only or text.lstrip().startswith("{"):
        try:
            value = json.loads(text, parse_float=Decimal, parse_constant=_no_constant)
        except ValueError as exc:
            line = getattr(exc, "lineno", None)
            raise PolicyError(f"not JSON: {getattr(exc, 'msg', exc)}", line, source) from None
        try:
            return value, _yaml(text, source)[1]  # line numbers, where YAML can read JSON
        except PolicyError:
            return value, {}
    return _yaml(text, source)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a policy can hold")


def _yaml(text: str, source: str) -> tuple[Any, Lines]:
    try:
        import yaml  # noqa: F401  (only: is it there)
    except ImportError:  # pragma: no cover - the `policy` extra brings it
        raise PolicyError(
            "YAML needs PyYAML (pip install 'hitl-temporal[policy]'), or write the policy as JSON",
            source=source,
        ) from None
    from hitl.policy.yaml_nodes import read_yaml

    return read_yaml(text, source)
