"""Transcript items: pure helpers over OpenAI Responses items, shared by workflow and activities.

The workflow parses model output and builds the transcript with them; activities read message
text with them. Pure and deterministic (imported by workflow code).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hitl.wire import RunItem

REJECTION_MESSAGE = "Tool execution was not approved."
OVERSIZED_KEY = "x_hitl_argument_bytes"
"""Set by the model activity on a function call whose arguments it dropped for their size."""
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
            if not isinstance(args, str):
                args = json.dumps(args)
            oversized = item.get(OVERSIZED_KEY)
            raw = {k: v for k, v in item.items() if k != OVERSIZED_KEY}
            parsed.calls.append(FunctionCall(call_id, name, args, raw, oversized))
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


def check_arguments(call: FunctionCall, max_bytes: int) -> str | None:
    """Why these arguments cannot be used (too large, not a JSON object), or `None`."""
    arguments = call.arguments
    size = call.oversized or len(arguments.encode("utf-8"))
    if size > max_bytes:
        return (
            f"Tool arguments are too large ({size} bytes; the limit is {max_bytes}). "
            "Send a smaller request."
        )
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return f"Tool arguments are not valid JSON ({exc.msg} at position {exc.pos}). Retry."
    if not isinstance(value, dict):
        return "Tool arguments must be a JSON object. Retry."
    return None


def model_input(
    input_items: list[dict[str, Any]], new_items: list[RunItem]
) -> list[dict[str, Any]]:
    """The transcript as Responses input items (what `to_input_list()` returns)."""
    return [*input_items, *(i.raw_item for i in new_items)]
