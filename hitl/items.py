"""Transcript items: pure helpers over OpenAI Responses items, shared by workflow and activities.

The workflow parses model output and builds the transcript with them; activities read message
text with them. Pure and deterministic (imported by workflow code).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from hitl.limits import MAX_ARGUMENT_DEPTH
from hitl.wire import RunItem

REJECTION_MESSAGE = "Tool execution was not approved."
OVERSIZED_KEY = "x_hitl_argument_bytes"
"""Set by the model activity on a function call whose arguments it dropped for their size."""
PROBLEM_KEY = "x_hitl_argument_problem"
"""Set by the model activity on a function call whose arguments it dropped as unusable (nested
too deeply, not writable as JSON); the run answers the model with the problem."""
TOOL_ERROR_PREFIX = "An error occurred while running the tool. Please try again. Error: "


class BadInput(ValueError):
    """The run's input is not a string or a list of Responses input items."""


def normalize_input(value: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turn the run's input into Responses input items."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not all(isinstance(i, dict) for i in value):
        raise BadInput("input must be a string or a list of OpenAI Responses input items")
    return [dict(i) for i in value]


@dataclass
class FunctionCall:
    """A function call from the model output."""

    call_id: str
    name: str
    arguments: str
    raw: dict[str, Any]
    oversized: int | None = None
    """Size of arguments the model activity dropped for being too large."""
    problem: str | None = None
    """Why the model activity dropped the arguments as unusable (see `PROBLEM_KEY`)."""


@dataclass
class ParsedOutput:
    """Model output split by what the loop does with each part.

    A function call without a call id or name, or repeating a call id, is dropped.
    """

    messages: list[dict[str, Any]] = field(default_factory=list)
    calls: list[FunctionCall] = field(default_factory=list)
    others: list[dict[str, Any]] = field(default_factory=list)


def parse_model_output(output: list[dict[str, Any]]) -> ParsedOutput:
    """Validate the shape of the model's output items (never trusts the model)."""
    parsed = ParsedOutput()
    seen: set[str] = set()
    for item in output:
        kind = item.get("type")
        if kind == "message" or (kind is None and item.get("role") == "assistant"):
            parsed.messages.append(item)
        elif kind == "function_call":
            call_id, name, args = item.get("call_id"), item.get("name"), item.get("arguments", "")
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str):
                continue
            if call_id in seen:
                continue
            seen.add(call_id)
            problem = item.get(PROBLEM_KEY)
            if not isinstance(args, str):
                try:
                    args = json.dumps(args, allow_nan=False)
                except (TypeError, ValueError, RecursionError):
                    args, problem = "", "the arguments cannot be written as JSON"
            oversized = item.get(OVERSIZED_KEY)
            raw = {k: v for k, v in item.items() if k not in (OVERSIZED_KEY, PROBLEM_KEY)}
            if not isinstance(raw.get("arguments", ""), str):
                raw["arguments"] = args
            parsed.calls.append(
                FunctionCall(
                    call_id,
                    name,
                    args,
                    raw,
                    oversized if isinstance(oversized, int) else None,
                    str(problem)[:200] if problem else None,
                )
            )
        else:
            parsed.others.append(item)
    return parsed


def message_text(item: dict[str, Any]) -> str:
    """Text of a message item (input or output form; refusals and images have none)."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") in ("output_text", "text", "input_text")
        )
    return ""


def assistant_message(text: str, item_id: str) -> dict[str, Any]:
    """An assistant message item (used when an error handler's output joins the history)."""
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def function_output(call_id: str, output: str) -> dict[str, Any]:
    """A `function_call_output` item."""
    return {"type": "function_call_output", "call_id": call_id, "output": output}


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def nesting_depth(text: str) -> int:
    """How deeply JSON text nests arrays and objects (brackets inside strings do not count).

    A linear scan, safe on any input: the parser's recursion is never reached for text nested
    deeper than a limit, which would otherwise raise `RecursionError` where it is parsed.
    """
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRING.sub('""', text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:30]} is too large a number")
    return value


def _integer(text: str) -> int:
    if len(text) > 4300:
        raise ValueError(f"an integer of {len(text)} digits is too large a number")
    return int(text)


def strict_json(text: str, max_depth: int = MAX_ARGUMENT_DEPTH) -> Any:
    """`json.loads` for text from anyone: only what JSON allows, and within bounds.

    Refused with `ValueError` (a one-line reason): invalid JSON, `NaN`, `Infinity` and
    `-Infinity` (not JSON, and they compare false with every number: "amount > 100" would let
    `NaN` through), numbers too large for a float (`1e999`), integers of more than 4,300
    digits, and nesting deeper than `max_depth`.
    """
    depth = nesting_depth(text)
    if depth > max_depth:
        raise ValueError(f"nested {depth} levels deep; the limit is {max_depth}")
    try:
        return json.loads(
            text, parse_constant=_no_constant, parse_float=_finite, parse_int=_integer
        )
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at position {exc.pos})") from None
    except RecursionError:
        raise ValueError(f"nested more than {max_depth} levels deep") from None


def check_arguments(call: FunctionCall, max_bytes: int) -> str | None:
    """Why these arguments cannot be used, or `None`: what the model reads instead of a run.

    Too large, dropped by the model activity (nested too deeply, not writable as JSON), not
    strict JSON (`strict_json`: `NaN`, `Infinity`, overflowing numbers, deep nesting), or not
    a JSON object. Every such call goes back to the model as an error: it runs nothing and
    asks nobody, whatever its tool's approval rules say.
    """
    arguments = call.arguments
    size = call.oversized or len(arguments.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return (
            f"Tool arguments are too large ({size} bytes; the limit is {max_bytes}). "
            "Send a smaller request."
        )
    if call.problem:
        return f"Tool arguments are unusable: {call.problem}. Retry."
    try:
        value = strict_json(arguments) if arguments.strip() else {}
    except ValueError as exc:
        return f"Tool arguments are {exc}. Retry with plain JSON."
    if not isinstance(value, dict):
        return "Tool arguments must be a JSON object. Retry."
    return None


def model_input(
    input_items: list[dict[str, Any]], new_items: list[RunItem]
) -> list[dict[str, Any]]:
    """The transcript as Responses input items (what `to_input_list()` returns)."""
    return [*input_items, *(i.raw_item for i in new_items)]
