"""Named callables: how a run names user code, and the allow-list a worker resolves names with.

Run options such as `tool_error_formatter` are functions the *client* names but a *worker* runs
(in an activity). They travel as references (`module:qualname`). A reference is a name, never
an instruction: a worker never imports anything because a payload named it. It resolves names
only against its allow-list, built when it starts from

- the agents it serves (their context types, read from tool and instruction annotations and
  from `Agent[MyContext](...)`);
- objects registered in the process with `hitl.allow(...)` (usable as a decorator), typically
  next to the functions in the modules the worker imports;
- objects given to the worker itself (`build_worker(..., allow=[...])`, `python -m hitl.worker
  --allow module:attr`, or the run config of `Runner.run` when it serves in-process).

Anything else is a typed `UserError` naming the reference, and the run fails before it does
anything (see `activities.agents.resolve_agent`).
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from hitl.errors import UserError

T = TypeVar("T")

_PROCESS: dict[str, Any] = {}
"""What `allow()` registered in this process."""


def callable_ref(fn: Any, *, what: str) -> str:
    """The reference (`module:qualname`) of a module-level function or class.

    Lambdas and closures are refused: a worker in another process could never serve them.
    A string is taken as a reference already.
    """
    if isinstance(fn, str):
        name, sep, attr = fn.partition(":")
        if not sep or not name or not attr:
            raise UserError(f"{what}: {fn!r} is not a reference of the form 'module:qualname'")
        return fn
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or "<lambda>" in qualname or "<locals>" in qualname:
        raise UserError(
            f"{what} must be a module-level function or class (workers look it up by name), "
            f"got {fn!r}"
        )
    return f"{module}:{qualname}"


def wrapped_ref(obj: Any, *, what: str) -> str:
    """The reference of a guardrail object (by its function) or of a function."""
    return callable_ref(getattr(obj, "guardrail_function", obj), what=what)


def allow(*objects: T) -> T:
    """Let runs name these functions or types on workers of this process.

    Use it as a decorator on a module-level function a `RunConfig` names (an error handler, a
    `tool_error_formatter`, a handoff filter, a context type, ...) in a module the worker
    imports; or call it with several objects. Returns the (first) object unchanged.
    """
    if not objects:
        raise UserError("allow() needs at least one function or type")
    for obj in objects:
        for ref, target in _entries(obj):
            _PROCESS[ref] = target
    return objects[0]


def _entries(obj: Any) -> list[tuple[str, Any]]:
    """(reference, object) pairs an allowed object stands for."""
    from hitl.model import Model
    from hitl.run_config import RunConfig

    if isinstance(obj, RunConfig):
        return [(callable_ref(fn, what="a run config callable"), fn) for fn in obj.callables()]
    if isinstance(obj, Model) or obj is None:
        return []  # models are allowed by their spec (`Allowed.models`)
    if isinstance(obj, list | tuple | set):
        return [e for item in obj for e in _entries(item)]
    fn = getattr(obj, "guardrail_function", None)
    if fn is not None:
        # A guardrail object is named by its function; the worker runs the object.
        return [(callable_ref(fn, what="a guardrail"), obj)]
    return [(callable_ref(obj, what="an allowed object"), obj)]


class Allowed:
    """The references one worker resolves: everything else is refused, nothing is imported."""

    def __init__(self, objects: Iterable[Any] = ()) -> None:
        self._by_ref: dict[str, Any] = {}
        self._models: list[Any] = []
        self.add(*objects)

    def add(self, *objects: Any) -> None:
        """Allow more objects (functions, classes, guardrails, `Model`s, `RunConfig`s)."""
        from hitl.model import Model
        from hitl.run_config import RunConfig

        for obj in objects:
            if isinstance(obj, list | tuple | set):
                self.add(*obj)
                continue
            if isinstance(obj, Model):
                self._models.append(obj.spec())
            elif isinstance(obj, RunConfig) and isinstance(obj.model, Model):
                self._models.append(obj.model.spec())
            for ref, target in _entries(obj):
                self._by_ref[ref] = target

    def add_models(self, specs: Iterable[Any]) -> None:
        """Allow these model specs (the served agents' own models)."""
        self._models.extend(specs)

    def get(self, ref: str, *, what: str) -> Any:
        """The object `ref` names, or `UserError` when this worker does not allow it."""
        target = self._by_ref.get(ref)
        if target is None:
            target = _PROCESS.get(ref)
        if target is None:
            raise UserError(
                f"{what} {ref[:200]!r} is not allowed on this worker: register it where the "
                "worker starts (`hitl.allow(...)` in a module the worker imports, "
                "`python -m hitl.worker --allow module:attr`, or `build_worker(..., allow=[...])`)"
            )
        return target

    def get_callable(self, ref: str, *, what: str) -> Callable[..., Any]:
        """Like `get`, for something that must be callable."""
        target = self.get(ref, what=what)
        if not callable(target):
            raise UserError(f"{what} {ref[:200]!r} is not callable")
        return target  # type: ignore[no-any-return]

    def allows_model(self, spec: Any) -> bool:
        """Whether a run may use this model spec instead of its agents' own.

        A spec equal to one this worker knows (its agents' models, allowed `Model`s) is fine;
        so is a bare model name on the worker's default OpenAI endpoint and key. A spec that
        names an endpoint, a key variable or header variables must be one the worker knows:
        otherwise a caller could send the worker's secrets to a server of their choosing.
        """
        if spec in self._models:
            return True
        if spec.provider == "scripted":
            from hitl.model import _SCRIPTED

            scripted = _SCRIPTED.get(spec.name)
            return scripted is not None and scripted.spec() == spec
        return (
            spec.provider == "openai"
            and spec.base_url is None
            and spec.api_key_env is None
            and not spec.default_headers_env
            and not spec.default_query
        )


def context_types(fn: Any) -> list[type[Any]]:
    """Context types named by a function's annotations (`RunContextWrapper[MyContext]`)."""
    from hitl.context import RunContextWrapper

    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        return []
    found = []
    for hint in hints.values():
        origin = typing.get_origin(hint)
        if isinstance(origin, type) and issubclass(origin, RunContextWrapper):
            for arg in typing.get_args(hint):
                if isinstance(arg, type) and arg.__module__ not in ("builtins", "typing"):
                    found.append(arg)
    return found
