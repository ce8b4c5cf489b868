"""The OpenAI Agents SDK's shell and apply_patch types, and the payloads the model sends.

`ShellTool` and `ApplyPatchTool` (`hitl.sdk_tools`, which exports these names too) take and
return these: what an executor is called with and returns, the approval callables' types, the
limits on a `shell_call`, and the `action` / `operation` payloads as checked models and as the
function parameters Chat Completions is given.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, NotRequired, TypeAlias, TypedDict

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from hitl.context import RunContextWrapper
from hitl.editor import ApplyPatchOperation
from hitl.interruptions import ToolApprovalItem
from hitl.items import SHELL_OUTPUT_KEY

__all__ = [
    "ApplyPatchApprovalFunction",
    "ApplyPatchOnApprovalFunction",
    "ApplyPatchOnApprovalFunctionResult",
    "ShellActionRequest",
    "ShellApprovalFunction",
    "ShellCallData",
    "ShellCallOutcome",
    "ShellCommandOutput",
    "ShellCommandRequest",
    "ShellExecutor",
    "ShellOnApprovalFunction",
    "ShellOnApprovalFunctionResult",
    "ShellResult",
]

MAX_COMMANDS = 20
"""Commands one `shell_call` may carry."""
MAX_COMMAND_CHARS = 4096
"""Characters of one command."""
MAX_OUTPUT_CHARS = 8000
"""Default characters of output a shell call returns (stdout and stderr of every command)."""
MAX_PATCH_OUTPUT_CHARS = 8000
"""Characters of an editor's answer the model reads."""
MAX_PATCH_OPERATIONS = 20
"""Operations one `apply_patch_call` may carry (`operations`); more: refused, none applied."""


# ----------------------------------------------------------------------------- the SDK's types


@dataclass
class ShellCallOutcome:
    """How a command ended: it exited (with `exit_code`), or timed out."""

    type: Literal["exit", "timeout"]
    exit_code: int | None = None


@dataclass
class ShellCommandOutput:
    """One command's output."""

    stdout: str = ""
    stderr: str = ""
    outcome: ShellCallOutcome = field(default_factory=lambda: ShellCallOutcome(type="exit"))
    command: str | None = None
    provider_data: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int | None:
        """The command's exit code (`None`: it timed out)."""
        return self.outcome.exit_code

    @property
    def status(self) -> Literal["completed", "timeout"]:
        """`timeout` when the command was stopped for taking too long."""
        return "timeout" if self.outcome.type == "timeout" else "completed"


@dataclass
class ShellResult:
    """What an executor returns: each command's output."""

    output: list[ShellCommandOutput]
    max_output_length: int | None = None
    provider_data: dict[str, Any] | None = None


@dataclass
class ShellActionRequest:
    """The `action` of a `shell_call`: commands to run in order."""

    commands: list[str]
    timeout_ms: int | None = None
    max_output_length: int | None = None


@dataclass
class ShellCallData:
    """A shell call as an executor receives it."""

    call_id: str
    action: ShellActionRequest
    status: Literal["in_progress", "completed"] | None = None
    raw: Any | None = None


@dataclass
class ShellCommandRequest:
    """What an executor is called with."""

    ctx_wrapper: RunContextWrapper[Any]
    data: ShellCallData


ShellExecutor: TypeAlias = Callable[
    [ShellCommandRequest], "str | ShellResult | Awaitable[str | ShellResult]"
]
"""Runs a shell call's commands; returns text or a `ShellResult` (sync or async)."""

ShellApprovalFunction: TypeAlias = Callable[
    [RunContextWrapper[Any], ShellActionRequest, str], "bool | Awaitable[bool]"
]
"""`(ctx, action, call_id) -> bool`: whether this call needs approval (run in an activity)."""


class ShellOnApprovalFunctionResult(TypedDict):
    """What `on_approval` returns: approve or not, and why (a rejection's text for the model)."""

    approve: bool
    reason: NotRequired[str]


ShellOnApprovalFunction: TypeAlias = Callable[[RunContextWrapper[Any], ToolApprovalItem], Any]
"""`(ctx, approval_item) -> {"approve": bool, "reason": str}`, sync or async; anything else
leaves the call to a person."""

ApplyPatchApprovalFunction: TypeAlias = Callable[
    [RunContextWrapper[Any], ApplyPatchOperation, str], "bool | Awaitable[bool]"
]
"""`(ctx, operation, call_id) -> bool`: whether this call needs approval (run in an activity)."""

ApplyPatchOnApprovalFunctionResult = ShellOnApprovalFunctionResult
ApplyPatchOnApprovalFunction = ShellOnApprovalFunction


# ----------------------------------------------------------------------------- payloads


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Action(_Payload):
    commands: Annotated[
        list[Annotated[str, Field(max_length=MAX_COMMAND_CHARS)]],
        Field(min_length=1, max_length=MAX_COMMANDS),
    ]
    timeout_ms: Annotated[StrictInt, Field(ge=0)] | None = None
    max_output_length: Annotated[StrictInt, Field(ge=0)] | None = None


class _ShellArgs(_Payload):
    action: _Action


class _Operation(_Payload):
    type: Literal["create_file", "update_file", "delete_file"]
    path: Annotated[str, Field(min_length=1, max_length=1024)]
    diff: str | None = None
    move_to: Annotated[str, Field(min_length=1, max_length=1024)] | None = None

    @model_validator(mode="after")
    def _has_diff(self) -> _Operation:
        if self.type != "delete_file" and not self.diff:
            raise ValueError(f"{self.type} needs a diff")
        return self


class _PatchArgs(_Payload):
    """One `operation`, or `operations`: a list approved as one call, applied all or none."""

    operation: _Operation | None = None
    operations: (
        Annotated[list[_Operation], Field(min_length=1, max_length=MAX_PATCH_OPERATIONS)] | None
    ) = None

    @model_validator(mode="after")
    def _one_form(self) -> _PatchArgs:
        if (self.operation is None) == (self.operations is None):
            raise ValueError("give operation or operations (a list), not both or neither")
        return self


def patch_operations(params: dict[str, Any]) -> list[_Operation]:
    """A checked `apply_patch_call` payload's operations, in order."""
    operations = params.get("operations")
    return list(operations) if operations is not None else [params["operation"]]


def _nullable(kind: str) -> dict[str, Any]:
    return {"type": [kind, "null"]}


SHELL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {
            "type": "object",
            "properties": {
                "commands": {"type": "array", "items": {"type": "string"}},
                "timeout_ms": _nullable("integer"),
                "max_output_length": _nullable("integer"),
            },
            "required": ["commands", "timeout_ms", "max_output_length"],
            "additionalProperties": False,
        }
    },
    "required": ["action"],
    "additionalProperties": False,
}
"""The `shell_call` payload as function arguments (Chat Completions)."""

PATCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "operation": {
            "type": "object",
            "properties": {
                "type": {"type": "string", "enum": ["create_file", "update_file", "delete_file"]},
                "path": {"type": "string"},
                "diff": _nullable("string"),
            },
            "required": ["type", "path", "diff"],
            "additionalProperties": False,
        }
    },
    "required": ["operation"],
    "additionalProperties": False,
}
"""The `apply_patch_call` payload as function arguments (Chat Completions)."""


# ----------------------------------------------------------------------------- shell answers


def _entry(output: ShellCommandOutput) -> dict[str, Any]:
    outcome: dict[str, Any] = {"type": output.outcome.type}
    if output.outcome.type == "exit":
        code = output.outcome.exit_code
        outcome["exit_code"] = code if isinstance(code, int) and not isinstance(code, bool) else 0
    return {"stdout": str(output.stdout), "stderr": str(output.stderr), "outcome": outcome}


def shell_answer(outputs: list[ShellCommandOutput], limit: int) -> str:
    """A `ShellTool`'s answer (`SHELL_OUTPUT_KEY`).

    At most `limit` characters of output in all, stdout before stderr (as the SDK cuts).
    """
    entries = [_entry(o) for o in outputs] or [
        {"stdout": "", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
    ]
    left = limit
    for entry in entries:
        for stream in ("stdout", "stderr"):
            entry[stream] = entry[stream][: max(left, 0)]
            left -= len(entry[stream])
    return json.dumps({SHELL_OUTPUT_KEY: entries, "max_output_length": limit})
