"""The console's forms: what a call's page asks for, and what a query string or a post says.

A call's page shows one field per property of the call's arguments (or of the question a tool
asks: `form_fields`); a post gives them back as `arg.<name>` fields typed by their
`type.<name>` (`edited_arguments`). Every id a page or a post names is read once, as text
(`one_text_each`): a value given twice, or a file where text belongs, names nothing.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.datastructures import FormData

from hitl.console.urls import one_each
from hitl.wire import PendingApproval

__all__ = ["POSTED", "edited_arguments", "form_fields", "number", "one_text_each", "posted_text"]

POSTED = ("ns", "run", "call", "seen", "round", "ticket")
"""The hidden fields of every form of a call's page: the call as shown, and the ticket."""


def one_text_each(multi: Any, names: tuple[str, ...]) -> list[str] | None:
    """One text value for each of `names` in a query or form (`None`: missing or repeated)."""
    given = {n: [v for v in multi.getlist(n) if isinstance(v, str)] for n in names}
    if any(len(multi.getlist(n)) != len(given[n]) for n in names):
        return None  # an uploaded file where text belongs
    return one_each(given, names)


def form_fields(
    schema: dict[str, Any] | None, call: PendingApproval | None
) -> list[dict[str, Any]]:
    """The form of a call's arguments (or of a tool's question): one field per property."""
    if call is None:
        return []
    if call.kind == "input" and call.input_request is not None:
        schema, current = call.input_request.requested_schema, {}
    else:
        try:
            current = json.loads(call.arguments)
        except ValueError:
            current = {}
    props = (schema or {}).get("properties")
    if not isinstance(props, dict):
        return []
    required = set((schema or {}).get("required") or [])
    fields = []
    for name, spec in props.items():
        spec = spec if isinstance(spec, dict) else {}
        kind = spec.get("type") if isinstance(spec.get("type"), str) else "json"
        value = current.get(name, spec.get("default")) if isinstance(current, dict) else None
        fields.append(
            {
                "name": str(name),
                "type": kind if kind in ("string", "integer", "number", "boolean") else "json",
                "enum": [str(e) for e in spec.get("enum", [])] if "enum" in spec else None,
                "value": value if kind != "json" else ("" if value is None else json.dumps(value)),
                "description": str(spec.get("description") or ""),
                "required": name in required,
            }
        )
    return fields


def posted_text(form: FormData, name: str) -> str | None:
    """A posted text field, its line breaks as typed (`None`: empty or missing)."""
    return _lines(str(form.get(name) or "")).strip() or None


def number(value: Any) -> float | None:
    """A form field's number (`None`: not one)."""
    try:
        return float(str(value))
    except (TypeError, ValueError):
        return None


def edited_arguments(
    form: FormData, original: dict[str, Any] | None = None
) -> tuple[dict[str, Any], str | None]:
    """The arguments the form's `arg.<name>` fields give, typed by their `type.<name>`.

    With the call's `original` arguments, the result starts from them: a field the person left
    as shown keeps its original value byte for byte (browsers send a text area's line breaks as
    CRLF, and a number as they print it), arguments the form has no field for are kept, and a
    number field emptied removes its argument.
    """
    out: dict[str, Any] = dict(original or {})
    for key in form:
        if not key.startswith("type."):
            continue
        name, kind = key[5:], str(form.get(key))
        raw = form.get(f"arg.{name}")
        value, problem = _field_value(kind, raw)
        if problem is not None:
            return {}, f"{name} {problem}"
        if original is not None and _unchanged(kind, value, name, original):
            continue  # as shown: the original value stays, byte for byte
        if value is _ABSENT:
            out.pop(name, None)
        else:
            out[name] = value
    return out, None


_ABSENT: Any = object()
"""An empty number or JSON field: the argument is left out."""


def _field_value(kind: str, raw: Any) -> tuple[Any, str | None]:
    """One posted field's value by its type (`_ABSENT`: left empty), or why it is not one."""
    if kind == "boolean":
        return raw is not None and str(raw) in ("on", "true", "1"), None
    text = "" if raw is None else str(raw)
    if kind == "string":
        return _lines(text), None
    if kind in ("integer", "number"):
        if text.strip() == "":
            return _ABSENT, None
        try:
            return (int(text) if kind == "integer" else float(text)), None
        except ValueError:
            return None, f"must be a{'n integer' if kind == 'integer' else ' number'}"
    if not text.strip():
        return _ABSENT, None
    try:
        return json.loads(text), None
    except ValueError:
        return None, "must be JSON"


def _unchanged(kind: str, value: Any, name: str, original: dict[str, Any]) -> bool:
    """Whether a posted field says what the form showed for the original argument `name`."""
    if name not in original:
        # Shown empty (or unchecked): left so, the argument stays out.
        return value is _ABSENT or (kind == "boolean" and value is False) or value == ""
    before = original[name]
    if kind == "string":
        return isinstance(before, str) and value == _lines(before)
    if kind == "boolean":
        return isinstance(before, bool) and value == before
    if kind in ("integer", "number"):
        numeric = isinstance(before, int | float) and not isinstance(before, bool)
        return numeric and value is not _ABSENT and value == before
    if value is _ABSENT:
        return before is None  # shown empty
    return bool(value == before) and type(value) is type(before)


def _lines(text: str) -> str:
    """`text` with the line breaks a browser's form sends (CRLF, CR) made line feeds."""
    return text.replace("\r\n", "\n").replace("\r", "\n")
