"""The base of every wire model, and derived fields."""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from pydantic import AliasChoices, AliasPath, BaseModel, ConfigDict, Field

__all__ = [
    "WireModel",
    "derived",
]

Source = tuple[str, ...]
"""A field (`("agent_id",)`) or a field of a model a field holds (`("decision", "call_id")`)."""


class WireModel(BaseModel):
    """A payload model, stored in histories: fields are only added, defaults never change.

    Unknown fields are ignored (an older worker reads a newer payload), and payloads are stored
    without the fields at their defaults (`hitl.converter`), nor (sparse payloads) without the
    `derived` fields that hold what a reader derives.
    """

    model_config = ConfigDict(extra="ignore")
    _sparse: ClassVar[bool] = True

    @classmethod
    def check_derived(cls) -> None:
        """Refuse (`TypeError`) a `derived` field that could misread a payload.

        A derived field is required (every payload written before it was derivable holds it),
        and so is each source (a field, or a field of the model a field holds: there, the
        holding field may be optional); a source is no derived field declared after the field,
        nor a derived field of the model that holds it.
        """
        own = dict(derivations(cls))
        done: set[str] = set()
        for name, sources in own.items():
            _require(cls, name)
            for source in sources:
                if len(source) == 1:
                    _require(cls, source[0])
                    if source[0] in own and source[0] not in done:
                        raise TypeError(f"{cls.__name__}.{name}: {source[0]} is derived later")
                    continue
                inner = _model_of(cls, source)
                _require(inner, source[1])
                if len(source) > 2 or source[1] in dict(derivations(inner)):
                    raise TypeError(f"{cls.__name__}.{name}: {source} is no plain field")
            done.add(name)


def _require(cls: type[BaseModel], name: str) -> None:
    field = cls.model_fields.get(name)
    if field is None or not field.is_required():
        raise TypeError(f"{cls.__name__}.{name} is no required field (derived fields need one)")


def derived(name: str, *sources: str | Source) -> Any:
    """A required field that a payload may leave out when it holds what its sources hold.

    `agent_name: str = derived("agent_name", "agent_id")`: a payload without `agent_name`
    reads it from `agent_id`; with several sources, from the first one the payload holds; a
    source may be a field of a model a field holds (`("decision", "call_id")`). A payload
    that holds the field is read as it is, whatever it holds. Sparse payloads
    (`hitl.converter`) leave the field out exactly when the reader would derive its value.

    Only for fields that were required (so every stored payload holds them) and whose sources
    are required: a field with a default must never become derived, since a stored payload
    without it meant the default (`WireModel.check_derived` refuses it at import).
    """
    choices = [AliasPath(*s) if isinstance(s, tuple) else s for s in sources]
    return Field(validation_alias=AliasChoices(name, *choices))


@functools.cache
def derivations(cls: type[BaseModel]) -> tuple[tuple[str, tuple[Source, ...]], ...]:
    """The `derived` fields of `cls`, in declaration order, each with its sources."""
    out: list[tuple[str, tuple[Source, ...]]] = []
    for name, info in cls.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices) and alias.choices and alias.choices[0] == name:
            sources = tuple(
                tuple(str(p) for p in c.path) if isinstance(c, AliasPath) else (c,)
                for c in alias.choices[1:]
            )
            out.append((name, sources))
    return tuple(out)


def _model_of(cls: type[BaseModel], source: Source) -> type[BaseModel]:
    """The model class a source's field holds (`X` or `X | None`)."""
    hint = cls.model_fields[source[0]].annotation
    for candidate in (hint, *getattr(hint, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    raise TypeError(f"{cls.__name__}.{source[0]} holds no model")


def derived_exclusions(value: WireModel) -> dict[Any, Any] | None:
    """What a sparse payload of `value` leaves out: `derived` fields holding what is derived.

    The result is a pydantic `exclude` argument (nested dicts; `None`: nothing), found through
    the fields typed with wire models: a model, or a list, tuple or dict of them. (A field
    typed `Any` is read back as plain data, which no declaration could restore.)
    """
    out: dict[Any, Any] = {}
    for name in _model_fields(type(value)):
        held = getattr(value, name)
        if isinstance(held, WireModel):
            sub = derived_exclusions(held)
        elif isinstance(held, (list, tuple, dict)):
            pairs = held.items() if isinstance(held, dict) else enumerate(held)
            subs = {k: derived_exclusions(v) for k, v in pairs if isinstance(v, WireModel)}
            sub = {k: s for k, s in subs.items() if s is not None} or None
        else:
            sub = None
        if sub is not None:
            out[name] = sub
    for name, sources in derivations(type(value)):
        # The reader takes the first source the payload holds: one left out is skipped.
        read = next((s for s in sources if _written(value, s, out)), None)
        if read is not None and getattr(value, name) == _value(value, read):
            out[name] = True
    return out or None


def _written(value: BaseModel, source: Source, excluded: dict[Any, Any]) -> bool:
    """Whether a sparse payload of `value` holds `source` (`excluded`: what it leaves out)."""
    if excluded.get(source[0]) is True:
        return False
    held: Any = value
    for step in source:
        held = getattr(held, step, None)
        if held is None:
            return False  # (a source is required: `None` only on the way to it)
    return True


def _value(value: BaseModel, source: Source) -> Any:
    held: Any = value
    for step in source:
        held = getattr(held, step)
    return held


@functools.cache
def _model_fields(cls: type[WireModel]) -> tuple[str, ...]:
    """The fields of `cls` whose type names a wire model with derived fields (at any depth)."""
    return tuple(n for n, f in cls.model_fields.items() if _holds_derived(f.annotation, set()))


def _holds_derived(hint: Any, seen: set[type]) -> bool:
    if isinstance(hint, type) and issubclass(hint, WireModel):
        if hint in seen:
            return False
        seen.add(hint)
        return bool(derivations(hint)) or any(
            _holds_derived(f.annotation, seen) for f in hint.model_fields.values()
        )
    return any(_holds_derived(a, seen) for a in getattr(hint, "__args__", ()))
