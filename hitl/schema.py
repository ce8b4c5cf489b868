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
