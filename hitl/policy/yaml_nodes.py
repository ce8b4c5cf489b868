"""YAML to data by hand, from PyYAML's node graph: nothing constructed, every line kept.

Only plain mappings, sequences and scalars: tags, anchors and aliases are refused (an alias
can make a small file a huge document), and so are duplicate keys (which YAML would otherwise
resolve silently to the last one). Numbers become `Decimal` or `int`, never float; only
`true` and `false` are booleans (`no`, `yes`, `on`, `off` stay text).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

import yaml

from hitl.policy.loading import Lines, PolicyError

_STD = "tag:yaml.org,2002:"
MAX_DEPTH = 20


def read_yaml(text: str, source: str) -> tuple[Any, Lines]:
    """The document's data and the line of each path in it."""
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                line = event.start_mark.line + 1
                raise PolicyError("anchors and aliases are not allowed", line, source)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise PolicyError(f"not YAML: {exc.problem or exc.context}", line, source) from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"not YAML: {exc}", source=source) from None
    if node is None:
        raise PolicyError("the document is empty", 1, source)
    lines: Lines = {}
    return _value(node, (), lines, source), lines


def _value(node: yaml.Node, path: tuple[str | int, ...], lines: Lines, source: str) -> Any:
    line = node.start_mark.line + 1
    lines.setdefault(path, line)
    if len(path) > MAX_DEPTH:
        raise PolicyError("nested too deep", line, source)
    if isinstance(node, yaml.MappingNode):
        if node.tag != _STD + "map":
            raise PolicyError(f"tag {node.tag} is not allowed", line, source)
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node, source)
            if not isinstance(key, str):
                raise PolicyError("keys are names", key_node.start_mark.line + 1, source)
            if key in out:
                raise PolicyError(f"{key!r} appears twice", key_node.start_mark.line + 1, source)
            lines[(*path, key)] = key_node.start_mark.line + 1
            out[key] = _value(value_node, (*path, key), lines, source)
        return out
    if isinstance(node, yaml.SequenceNode):
        if node.tag != _STD + "seq":
            raise PolicyError(f"tag {node.tag} is not allowed", line, source)
        return [_value(v, (*path, i), lines, source) for i, v in enumerate(node.value)]
    return _scalar(node, source)


def _scalar(node: yaml.Node, source: str) -> Any:
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.ScalarNode):
        raise PolicyError("keys are names", line, source)
    tag, text = node.tag, str(node.value)
    if tag == _STD + "str":
        return text
    if tag == _STD + "null":
        return None
    if tag == _STD + "bool":
        # Only true/false: YAML 1.1 also reads yes/no/on/off as booleans, so a rule id `no`
        # or a country code `NO` would silently become `false`.
        return text.lower() == "true" if text.lower() in ("true", "false") else text
    if tag == _STD + "int":
        try:
            return int(text.replace("_", ""), 0)
        except ValueError:
            raise PolicyError(f"{text!r} is not a number", line, source) from None
    if tag == _STD + "float":
        try:
            number: Decimal | None = Decimal(text.replace("_", ""))
        except InvalidOperation:
            number = None
        if number is None or not number.is_finite():
            raise PolicyError(f"{text!r} is not a finite number", line, source)
        return number
    raise PolicyError(f"tag {tag} is not allowed (write it as text)", line, source)
