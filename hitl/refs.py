"""Import references for user callables that run on workers (`module:qualname`).

Run options such as `tool_error_formatter` are functions the *client* names but a *worker*
runs (in an activity). They travel as import references, so they must be module-level
functions that the worker can import.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from typing import Any

from hitl.errors import UserError


def callable_ref(fn: Callable[..., Any], *, what: str) -> str:
    """The import reference of a module-level function; refuse lambdas and closures."""
    if isinstance(fn, str):
        resolve_ref(fn)
        return fn
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or "<lambda>" in qualname or "<locals>" in qualname:
        raise UserError(
            f"{what} must be a module-level function (workers import it by name), got {fn!r}"
        )
    ref = f"{module}:{qualname}"
    found = resolve_ref(ref)
    # A decorator may have replaced the function by a wrapper that keeps it (guardrails do).
    if found is not fn and getattr(found, "guardrail_function", None) is not fn:
        raise UserError(f"{what}: {ref} does not name the function passed")
    return ref


def wrapped_ref(obj: Any, *, what: str) -> str:
    """The import reference of a guardrail object (by its function) or of a function."""
    fn = getattr(obj, "guardrail_function", obj)
    return callable_ref(fn, what=what)


@functools.lru_cache(maxsize=256)
def resolve_ref(ref: str) -> Callable[..., Any]:
    """Import `module:qualname` and return the object; `UserError` with the reason if it fails."""
    module_name, sep, qualname = ref.partition(":")
    if not sep or not module_name or not qualname:
        raise UserError(f"{ref!r} is not an import reference of the form 'module:qualname'")
    try:
        obj: Any = sys.modules.get(module_name) or importlib.import_module(module_name)
    except Exception as exc:
        raise UserError(f"cannot import {module_name!r} for {ref!r}: {exc}") from exc
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UserError(f"{ref!r}: {module_name} has no attribute {qualname!r}") from None
    if not callable(obj):
        raise UserError(f"{ref!r} is not callable")
    return obj  # type: ignore[no-any-return]
