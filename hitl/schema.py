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
    text = inspect.cleandoc(doc)
    lines = text.splitlines()
    params: dict[str, str] = {}
    description: list[str] = []
    in_args = False
    current: str | None = None
    args_indent: int | None = None
    for line in lines:
        sphinx = _SPHINX_PARAM.match(line)
        if sphinx:
            current = sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            in_args = False
            continue
        if line.strip().startswith(":return") or line.strip().startswith(":raises"):
            current = None
            continue
        if _ARGS_HEADER.match(line):
            description.append("\x00")
            in_args = True
            current = None
            args_indent = None
            continue
        if in_args:
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            if indent == 0 and _SECTION_HEADER.match(line):
                in_args = False
                current = None
                description.append("\x00")  # later sections are not part of the description
                continue
            if args_indent is None:
                args_indent = indent
            match = _GOOGLE_PARAM.match(line)
            if match and indent <= args_indent:
                current = match.group(1).lstrip("*")
                params[current] = match.group(3).strip()
            elif current is not None:
                params[current] = (params[current] + " " + line.strip()).strip()
            continue
        if _SECTION_HEADER.match(line) and not description:
            continue
        if _SECTION_HEADER.match(line):
            # Returns:, Raises:, Examples: end the description.
            in_args = False
            current = None
            description.append("\x00")
            continue
        if current is not None and line.startswith(" "):
            params[current] = (params[current] + " " + line.strip()).strip()
            continue
        description.append(line)
    desc_text = "\n".join(description).split("\x00")[0].strip()
    return desc_text, params


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
