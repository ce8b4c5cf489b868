"""Rebuild the user's context object inside an activity."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from hitl.errors import UserError
from hitl.refs import resolve_ref
from hitl.wire import RunContextData


def rebuild_context(data: RunContextData | None) -> Any:
    """The context object user code sees: its JSON value, rebuilt as its type when one is known."""
    if data is None:
        return None
    if data.type is None:
        return data.value
    cls: Any = resolve_ref(data.type)
    try:
        return TypeAdapter(cls).validate_python(data.value)
    except ValidationError as exc:
        raise UserError(f"the run context does not validate as {data.type}: {exc}") from exc
