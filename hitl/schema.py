"""JSON schemas for tools and structured outputs, made acceptable to OpenAI's strict mode."""

from __future__ import annotations

import copy
import inspect
import re
from typing import Any

from hitl.errors import UserError


def ensure_strict_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of `schema` that satisfies OpenAI's strict structured-output rules.

    Every object gets `additionalProperties: false` and lists all its properties as required;
    `$defs` and nested schemas are processed the same way. Optional parameters stay optional in
    meaning because pydantic already typed them as nullable.
    """
    out = copy.deepcopy(schema)
    _strictify(out, root=out)
    return out


def _strictify(node: Any, *, root: dict[str, Any]) -> None:
    if not isinstance(node, dict):
        return
    if node.get("type") == "object" or "properties" in node:
        props = node.get("properties")
        if props is None and node.get("additionalProperties") not in (None, False):
            raise UserError(
                "strict JSON schemas cannot describe free-form objects (dict[str, X]); "
                "use a pydantic model or pass strict_mode=False"
            )
        node["additionalProperties"] = False
        if props is not None:
            node["required"] = list(props)
    for key in ("properties", "$defs", "definitions"):
        for child in (node.get(key) or {}).values():
            _strictify(child, root=root)
    for key in ("items", "additionalProperties", "not"):
        _strictify(node.get(key), root=root)
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for child in node.get(key) or []:
            _strictify(child, root=root)
    if node.get("default", 0) is None:
        # `None` defaults are implied by the nullable type; strict mode rejects them.
        del node["default"]


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters|Params)\s*:\s*$")
_SECTION_HEADER = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_GOOGLE_PARAM = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a docstring into its description and per-parameter descriptions.

    Understands Google style (`Args:` sections) and Sphinx style (`:param x: ...`).
    """
    if not doc:
        return "", {}
    reader = _DocstringReader()
    for line in inspect.cleandoc(doc).splitlines():
        reader.read(line)
    return reader.description(), reader.params


_END = "\x00"
"""Marks where the description ends: sections after it are not part of it."""


class _DocstringReader:
    """Reads a docstring line by line: the description, and each parameter's text."""

    def __init__(self) -> None:
        self.params: dict[str, str] = {}
        self.lines: list[str] = []  # the description, `_END` where a section began
        self.in_args = False  # inside an `Args:` section
        self.current: str | None = None  # the parameter a continuation line belongs to
        self.args_indent: int | None = None  # the indentation of the section's parameters

    def description(self) -> str:
        """The text before the first section."""
        return "\n".join(self.lines).split(_END)[0].strip()

    def read(self, line: str) -> None:
        """Take the next line."""
        sphinx = _SPHINX_PARAM.match(line)
        if sphinx:
            self.current = sphinx.group(1)
            self.params[self.current] = sphinx.group(2).strip()
            self.in_args = False
        elif line.strip().startswith((":return", ":raises")):
            self.current = None
        elif _ARGS_HEADER.match(line):
            self.lines.append(_END)
            self.in_args, self.current, self.args_indent = True, None, None
        elif self.in_args:
            self._args_line(line)
        else:
            self._prose_line(line)

    def _args_line(self, line: str) -> None:
        """A line of an `Args:` section: a parameter, more of its text, or the next section."""
        if not line.strip():
            return
        indent = len(line) - len(line.lstrip())
        if indent == 0 and _SECTION_HEADER.match(line):
            self.in_args, self.current = False, None
            self.lines.append(_END)
            return
        if self.args_indent is None:
            self.args_indent = indent
        match = _GOOGLE_PARAM.match(line)
        if match and indent <= self.args_indent:
            self.current = match.group(1).lstrip("*")
            self.params[self.current] = match.group(3).strip()
        elif self.current is not None:
            self._more(self.current, line)

    def _prose_line(self, line: str) -> None:
        """A line outside `Args:`: description, a section header, or more of a `:param:`."""
        if _SECTION_HEADER.match(line):
            if self.lines:  # Returns:, Raises:, Examples: end the description
                self.current = None
                self.lines.append(_END)
        elif self.current is not None and line.startswith(" "):
            self._more(self.current, line)
        else:
            self.lines.append(line)

    def _more(self, name: str, line: str) -> None:
        self.params[name] = (self.params[name] + " " + line.strip()).strip()


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def schema_problem(value: Any, schema: dict[str, Any], *, where: str = "arguments") -> str | None:
    """Why `value` does not fit the JSON schema `schema`, or `None`.

    Pure and deterministic (a run checks a person's edited arguments with it before accepting
    them). It covers what tool schemas generated from signatures use: `type`, `properties`,
    `required`, `additionalProperties`, `enum`, `const`, `items`, `anyOf`/`oneOf`, `$ref` to
    `$defs`, bounds on numbers, strings and arrays. The tool's own validation runs again before
    it executes, so a schema feature not covered here is still enforced there.
    """
    return _problem(value, schema, schema, where, 0)


def _problem(value: Any, node: Any, root: dict[str, Any], where: str, depth: int) -> str | None:
    if depth > 32 or not isinstance(node, dict):
        return None
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        return _problem(value, target, root, where, depth + 1)
    for key in ("anyOf", "oneOf"):
        options = node.get(key)
        if (
            isinstance(options, list)
            and options
            and all(_problem(value, o, root, where, depth + 1) for o in options)
        ):
            return f"{where} matches none of the allowed forms"
    for sub in node.get("allOf") or []:
        problem = _problem(value, sub, root, where, depth + 1)
        if problem:
            return problem
    if "const" in node and value != node["const"]:
        return f"{where} must be {node['const']!r}"
    if "enum" in node and value not in node["enum"]:
        return f"{where} must be one of {', '.join(repr(v) for v in node['enum'][:10])}"
    kinds = node.get("type")
    if kinds is not None:
        names = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is(value, k) for k in names):
            return f"{where} must be {' or '.join(str(k) for k in names)}"
    if isinstance(value, dict):
        return _object_problem(value, node, root, where, depth)
    if isinstance(value, list):
        return _array_problem(value, node, root, where, depth)
    if isinstance(value, str):
        if len(value) < node.get("minLength", 0):
            return f"{where} must have at least {node['minLength']} characters"
        if "maxLength" in node and len(value) > node["maxLength"]:
            return f"{where} must have at most {node['maxLength']} characters"
        pattern = node.get("pattern")
        if isinstance(pattern, str) and len(pattern) < 500 and not re.search(pattern, value):
            return f"{where} must match {pattern}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _number_problem(value, node, where)
    return None


def _is(value: Any, kind: Any) -> bool:
    types = _JSON_TYPES.get(kind) if isinstance(kind, str) else None
    if types is None:
        return True
    if isinstance(value, bool) and kind not in ("boolean",):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, types)


def _object_problem(
    value: dict[str, Any], node: dict[str, Any], root: dict[str, Any], where: str, depth: int
) -> str | None:
    props = node.get("properties") or {}
    for name in node.get("required") or []:
        if name not in value:
            return f"{where}.{name} is required"
    extra = node.get("additionalProperties", True)
    for name, item in value.items():
        if name in props:
            problem = _problem(item, props[name], root, f"{where}.{name}", depth + 1)
        elif extra is False:
            problem = f"{where}.{name} is not a parameter of this tool"
        else:
            problem = _problem(item, extra, root, f"{where}.{name}", depth + 1)
        if problem:
            return problem
    return None


def _array_problem(
    value: list[Any], node: dict[str, Any], root: dict[str, Any], where: str, depth: int
) -> str | None:
    if len(value) < node.get("minItems", 0):
        return f"{where} must have at least {node['minItems']} items"
    if "maxItems" in node and len(value) > node["maxItems"]:
        return f"{where} must have at most {node['maxItems']} items"
    items = node.get("items")
    for i, item in enumerate(value):
        problem = _problem(item, items, root, f"{where}[{i}]", depth + 1)
        if problem:
            return problem
    return None


def _number_problem(value: float, node: dict[str, Any], where: str) -> str | None:
    if "minimum" in node and value < node["minimum"]:
        return f"{where} must be at least {node['minimum']}"
    if "maximum" in node and value > node["maximum"]:
        return f"{where} must be at most {node['maximum']}"
    if "exclusiveMinimum" in node and value <= node["exclusiveMinimum"]:
        return f"{where} must be above {node['exclusiveMinimum']}"
    if "exclusiveMaximum" in node and value >= node["exclusiveMaximum"]:
        return f"{where} must be below {node['exclusiveMaximum']}"
    return None
