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

__all__ = ["POSTED", "edited_arguments", "form_fields", "number", "one_text_each"]

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
                "value": value if kind != "json" else json.dumps(value),
                "description": str(spec.get("description") or ""),
                "required": name in required,
            }
        )
    return fields


def number(value: Any) -> float | None:
    """A form field's number (`None`: not one)."""
    try:
        return float(str(value))
    except (TypeError, ValueError):
        return None


def edited_arguments(form: FormData) -> tuple[dict[str, Any], str | None]:
    """The arguments the form's `arg.<name>` fields give, typed by their `type.<name>`."""
    out: dict[str, Any] = {}
    for key in form:
        if not key.startswith("type."):
            continue
        name, kind = key[5:], str(form.get(key))
        raw = form.get(f"arg.{name}")
        if kind == "boolean":
            out[name] = raw is not None and str(raw) in ("on", "true", "1")
            continue
        text = "" if raw is None else str(raw)
        if kind == "string":
            out[name] = text
        elif kind in ("integer", "number"):
            if text.strip() == "":
                continue
            try:
                out[name] = int(text) if kind == "integer" else float(text)
            except ValueError:
                return {}, f"{name} must be a{'n integer' if kind == 'integer' else ' number'}"
        elif text.strip():
            try:
                out[name] = json.loads(text)
            except ValueError:
                return {}, f"{name} must be JSON"
    return out, None
