"""Transcript items: pure helpers over OpenAI Responses items, shared by workflow and activities.

The workflow parses model output and builds the transcript with them; activities read message
text with them. Pure and deterministic (imported by workflow code).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from hitl.limits import MAX_ARGUMENT_DEPTH
from hitl.wire import RunItem

REJECTION_MESSAGE = "Tool execution was not approved."
OVERSIZED_KEY = "x_hitl_argument_bytes"
"""Set by the model activity on a function call whose arguments it dropped for their size."""
PROBLEM_KEY = "x_hitl_argument_problem"
"""Set by the model activity on a function call whose arguments it dropped as unusable (nested
too deeply, not writable as JSON); the run answers the model with the problem."""
TOOL_ERROR_PREFIX = "An error occurred while running the tool. Please try again. Error: "
TOOL_KEY = "x_hitl_tool"
"""Set by the model activity on a `shell_call` / `apply_patch_call`: the name of the agent's
tool of that type (the items name no tool)."""
BUILTIN_CALLS: dict[str, tuple[str, str]] = {
    "shell_call": ("action", "shell"),
    "apply_patch_call": ("operation", "apply_patch"),
}
"""Responses call items of built-in tools: the field holding the call's payload (its one
argument), and the tool's default name. An `apply_patch_call` may carry `operations` (a
list) instead of `operation`: see `payload_field`."""


def payload_field(kind: str, item: dict[str, Any]) -> str:
    """The field of a built-in call item holding its payload.

    An `apply_patch_call` with `operations` (any value but `null`) is that list, as the SDK
    reads it (`operations` wins over `operation`); else the type's one field.
    """
    if kind == "apply_patch_call" and item.get("operations") is not None:
        return "operations"
    return BUILTIN_CALLS[kind][0]


_MARKERS = (OVERSIZED_KEY, PROBLEM_KEY, TOOL_KEY)
MCP_APPROVAL_REQUEST = "mcp_approval_request"
"""A hosted MCP server asks to run one of its tools (`HostedMCPTool`): a call of the agent's
hosted tool for its `server_label` (named in `TOOL_KEY` by the model activity), its arguments
`{"server_label", "name", "arguments"}`, answered with an `mcp_approval_response`."""
HOSTED_MCP_ITEMS = {"mcp_call": "mcp_call_item", "mcp_list_tools": "mcp_list_tools_item"}
"""What a hosted MCP server did (the provider ran it): kept in the transcript as these run
items, never executed by the run."""
MCP_APPROVED_KEY = "mcp_approval"
"""A `HostedMCPTool`'s answer to an approved call is JSON: `{"mcp_approval": "approved"}`."""


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
    call_type: Literal[
        "function_call", "shell_call", "apply_patch_call", "mcp_approval_request"
    ] = "function_call"
    """The item's type: `function_call`, or a built-in tool's `shell_call` / `apply_patch_call`
    (its payload is the call's one argument: `{"action": ...}` / `{"operation": ...}`), or a
    hosted MCP server's `mcp_approval_request` (named by its `id`)."""


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
        elif kind == MCP_APPROVAL_REQUEST or (isinstance(kind, str) and kind in BUILTIN_CALLS):
            call = (
                _mcp_approval(item) if kind == MCP_APPROVAL_REQUEST else _builtin_call(kind, item)
            )
            if call is not None and call.call_id not in seen:
                seen.add(call.call_id)
                parsed.calls.append(call)
        else:
            parsed.others.append(item)
    return parsed


def _builtin_call(kind: str, item: dict[str, Any]) -> FunctionCall | None:
    """A `shell_call` / `apply_patch_call` item as a call of the agent's tool of that type."""
    call_id, tool = item.get("call_id"), item.get(TOOL_KEY)
    if not isinstance(call_id, str) or not call_id:
        return None
    field_name, default_name = payload_field(kind, item), BUILTIN_CALLS[kind][1]
    name = tool if isinstance(tool, str) and tool else default_name
    problem = item.get(PROBLEM_KEY)
    try:
        args = json.dumps({field_name: item.get(field_name)}, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        args, problem = "", "the call's payload cannot be written as JSON"
    oversized = item.get(OVERSIZED_KEY)
    if isinstance(oversized, int):
        args = ""
    raw = {k: v for k, v in item.items() if k not in _MARKERS}
    return FunctionCall(
        call_id,
        name,
        args,
        raw,
        oversized if isinstance(oversized, int) else None,
        str(problem)[:200] if problem else None,
        call_type="shell_call" if kind == "shell_call" else "apply_patch_call",
    )


def _mcp_approval(item: dict[str, Any]) -> FunctionCall | None:
    """An `mcp_approval_request` as a call of the agent's hosted MCP tool for its label.

    The model activity checked the item (`TOOL_KEY` names the tool; an unknown label names
    none, so the call is refused); without an `id` it cannot be answered, so it is no call.
    """
    request_id, tool = item.get("id"), item.get(TOOL_KEY)
    if not isinstance(request_id, str) or not request_id:
        return None
    problem = item.get(PROBLEM_KEY)
    try:
        args = json.dumps(
            {k: item.get(k) for k in ("server_label", "name", "arguments")}, allow_nan=False
        )
    except (TypeError, ValueError, RecursionError):
        args, problem = "", "the request cannot be written as JSON"
    oversized = item.get(OVERSIZED_KEY)
    if isinstance(oversized, int):
        args = ""
    return FunctionCall(
        request_id,
        tool if isinstance(tool, str) and tool else "hosted_mcp",
        args,
        {k: v for k, v in item.items() if k not in _MARKERS},
        oversized if isinstance(oversized, int) else None,
        str(problem)[:200] if problem else None,
        call_type="mcp_approval_request",
    )


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


SHELL_OUTPUT_KEY = "shell_output"
"""A `ShellTool`'s answer is JSON: `{"shell_output": [entry, ...], "max_output_length": n}`."""
PATCH_STATUS_KEY = "apply_patch_status"
"""An `ApplyPatchTool`'s answer is JSON: `{"apply_patch_status": "completed", "output": ...}`."""


def call_output(call_type: str | None, call_id: str, output: str) -> dict[str, Any]:
    """The output item answering a call: `function_call_output`, or the built-in tool's own.

    A built-in tool's answer is JSON its tool wrote (`SHELL_OUTPUT_KEY`, `PATCH_STATUS_KEY`);
    any other text (a rejection, a refusal, an error) is a failed command (stderr, exit code 1)
    or a failed patch, as the OpenAI Agents SDK answers a rejected call.
    """
    if call_type == "shell_call":
        entries, limit = shell_entries(output)
        item: dict[str, Any] = {"type": "shell_call_output", "call_id": call_id}
        item["output"] = entries
        if limit is not None:
            item["max_output_length"] = limit
        return item
    if call_type == MCP_APPROVAL_REQUEST:
        return mcp_approval_response(call_id, output)
    if call_type == "apply_patch_call":
        status, text = patch_status(output)
        return {"type": "apply_patch_call_output", "call_id": call_id, "status": status} | (
            {"output": text} if text else {}
        )
    return function_output(call_id, output)


def _json_object(text: str) -> dict[str, Any] | None:
    if not text.startswith("{"):
        return None
    try:
        value = strict_json(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def shell_entries(output: str) -> tuple[list[dict[str, Any]], int | None]:
    """The `output` entries of a `shell_call_output`, and its `max_output_length`."""
    value = _json_object(output)
    raw = value.get(SHELL_OUTPUT_KEY) if value is not None else None
    if value is None or not isinstance(raw, list) or not raw:
        return [failed_command(output)], None
    entries = []
    for entry in raw:
        entry = entry if isinstance(entry, dict) else {}
        outcome = entry.get("outcome")
        outcome = outcome if isinstance(outcome, dict) else {}
        code = outcome.get("exit_code")
        clean: dict[str, Any] = {
            "stdout": str(entry.get("stdout") or ""),
            "stderr": str(entry.get("stderr") or ""),
        }
        if outcome.get("type") == "timeout":
            clean["outcome"] = {"type": "timeout"}
        else:
            exit_code = code if isinstance(code, int) and not isinstance(code, bool) else 1
            clean["outcome"] = {"type": "exit", "exit_code": exit_code}
        entries.append(clean)
    limit = value.get("max_output_length")
    return entries, limit if isinstance(limit, int) and not isinstance(limit, bool) else None


def failed_command(message: str) -> dict[str, Any]:
    """A shell output entry saying why nothing ran (the SDK's answer to a rejected call)."""
    return {"stdout": "", "stderr": message, "outcome": {"type": "exit", "exit_code": 1}}


def mcp_approval_response(request_id: str, output: str) -> dict[str, Any]:
    """The `mcp_approval_response` answering a hosted MCP server's request.

    Approved only when the `HostedMCPTool` itself answered (`MCP_APPROVED_KEY`): any other
    text (a rejection, an expiry, a refusal) is a denial, and the text is its reason.
    """
    value = _json_object(output)
    approved = value is not None and value.get(MCP_APPROVED_KEY) == "approved"
    item: dict[str, Any] = {
        "type": "mcp_approval_response",
        "approval_request_id": request_id,
        "approve": approved,
    }
    if not approved and output:
        item["reason"] = output[:2000]
    return item


def patch_status(output: str) -> tuple[str, str]:
    """The `status` and `output` of an `apply_patch_call_output` answering `output`."""
    value = _json_object(output)
    status = value.get(PATCH_STATUS_KEY) if value is not None else None
    if value is None or status not in ("completed", "failed"):
        return "failed", output
    return str(status), str(value.get("output") or "")


def output_text(item: dict[str, Any]) -> str | None:
    """What a tool's output item says, as text (`None`: not an output item)."""
    kind = item.get("type")
    if kind == "function_call_output":
        out = item.get("output", "")
        return out if isinstance(out, str) else json.dumps(out)
    if kind == "apply_patch_call_output":
        return f"{item.get('status', 'completed')}: {item.get('output') or ''}".rstrip(": ")
    if kind == "mcp_approval_response":
        if item.get("approve") is True:
            return "approved"
        return f"rejected: {item.get('reason') or ''}".rstrip(": ")
    if kind != "shell_call_output":
        return None
    parts = []
    for entry in item.get("output") or []:
        if not isinstance(entry, dict):
            continue
        found = entry.get("outcome")
        outcome: dict[str, Any] = found if isinstance(found, dict) else {}
        lines = [str(entry.get("stdout") or "").rstrip("\n")]
        if entry.get("stderr"):
            lines += ["stderr:", str(entry["stderr"]).rstrip("\n")]
        if outcome.get("type") == "timeout":
            lines.append("status: timeout")
        elif outcome.get("exit_code") not in (None, 0):
            lines.append(f"exit code: {outcome.get('exit_code')}")
        parts.append("\n".join(line for line in lines if line) or "(no output)")
    return "\n\n".join(parts)


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
