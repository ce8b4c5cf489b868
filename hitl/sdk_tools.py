"""`ShellTool` and `ApplyPatchTool`: the OpenAI Agents SDK's shell and apply_patch tools.

The model calls them with the Responses API's `shell_call` (`action.commands`, `timeout_ms`,
`max_output_length`) and `apply_patch_call` (`operation`: `create_file`, `update_file` or
`delete_file` with a V4A diff) items, and is answered with `shell_call_output` and
`apply_patch_call_output` items; on Chat Completions they are function tools taking the same
payload (`{"action": ...}`, `{"operation": ...}`). Each is a `FunctionTool` underneath, so its
calls pass the same gate as every other: `needs_approval` (a bool, or the SDK's predicate
`(ctx, action_or_operation, call_id)`, run in an activity), an `on_approval` callback that
approves or rejects without an interruption (`{"approve": False, "reason": ...}`: the reason
is what the model reads), else a pending call that people decide, signed and audited.

The `executor` and `editor` are the user's code, as in the SDK; `AllowListShellExecutor` and
`hitl.editor.WorkspaceEditor` are the hardened ones (an allow-list and no shell, a subreaper
and timeouts; paths kept inside a root, atomic writes). A call they would refuse is refused
while it is planned, before anyone is asked, and changes nothing.

The SDK's types these tools take and return, and the payloads' schemas, are in
`hitl.sdk_tool_types` (and importable from here).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from hitl._shell import CommandRefused, execute, parse_command
from hitl._user_code import call_user
from hitl.approval import ApprovalCall, ApprovalRequest, ToolApproved, ToolDenied
from hitl.context import RunContextWrapper
from hitl.editor import ApplyPatchEditor, ApplyPatchOperation, ApplyPatchResult
from hitl.errors import UserError
from hitl.items import PATCH_STATUS_KEY, strict_json
from hitl.sdk_tool_types import MAX_COMMAND_CHARS as MAX_COMMAND_CHARS
from hitl.sdk_tool_types import MAX_COMMANDS as MAX_COMMANDS
from hitl.sdk_tool_types import (
    MAX_OUTPUT_CHARS,
    MAX_PATCH_OUTPUT_CHARS,
    PATCH_PARAMETERS,
    SHELL_PARAMETERS,
    ApplyPatchApprovalFunction,
    ApplyPatchOnApprovalFunction,
    ApplyPatchOnApprovalFunctionResult,
    ShellActionRequest,
    ShellApprovalFunction,
    ShellCallData,
    ShellCallOutcome,
    ShellCommandOutput,
    ShellCommandRequest,
    ShellExecutor,
    ShellOnApprovalFunction,
    ShellOnApprovalFunctionResult,
    ShellResult,
    _Action,
    _PatchArgs,
    _ShellArgs,
    patch_operations,
    shell_answer,
)
from hitl.shell_tools import _Commands
from hitl.state import AgentRef, ToolApprovalItem
from hitl.tools import FunctionTool
from hitl.wire import ToolSpec

__all__ = [
    "ApplyPatchApprovalFunction",
    "ApplyPatchOnApprovalFunction",
    "ApplyPatchOnApprovalFunctionResult",
    "ApplyPatchTool",
    "AllowListShellExecutor",
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
    "ShellTool",
]


# ----------------------------------------------------------------------------- shared


def _payload(arguments: str, key: str) -> Any:
    try:
        value = strict_json(arguments)
    except ValueError:
        return None
    return value.get(key) if isinstance(value, dict) else None


def on_approval_decision(result: Any) -> ToolApproved | ToolDenied | None:
    """An SDK `on_approval` answer as a decision (`None`: not one; a person decides)."""
    if not isinstance(result, Mapping) or not isinstance(result.get("approve"), bool):
        return None
    reason = result.get("reason")
    reason = reason[:2000] if isinstance(reason, str) and reason else None
    if result["approve"]:
        return ToolApproved(reason=reason)
    return ToolDenied(message=reason, reason=reason)


class _BuiltinTool(FunctionTool):
    """What `ShellTool` and `ApplyPatchTool` share: the SDK's approval callables as ours."""

    builtin: Literal["shell", "apply_patch"]
    call_type: str
    payload_key: str
    on_approval: ShellOnApprovalFunction | None

    def _setup(
        self,
        name: str,
        needs_approval: bool | Callable[..., Any],
        on_approval: ShellOnApprovalFunction | None,
        **fields: Any,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise UserError(f"{type(self).__name__}: name must be a non-empty string")
        if not (isinstance(needs_approval, bool) or callable(needs_approval)):
            raise UserError(f"{type(self).__name__}: needs_approval must be a bool or callable")
        if on_approval is not None and not callable(on_approval):
            raise UserError(f"{type(self).__name__}: on_approval must be callable")
        self.on_approval = on_approval
        predicate: Any = needs_approval
        if callable(needs_approval):
            user_predicate = needs_approval

            async def predicate(
                ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
            ) -> bool:
                what = f"needs_approval of {name!r}"
                for request in self._requests_for(params, ctx):  # (any operation of a patch)
                    if await call_user(user_predicate, ctx, request, call_id, what=what):
                        return True
                return False

        async def approver(ctx: RunContextWrapper[Any], call: ApprovalCall) -> Any:
            return await self._approve(ctx, call)

        approver.__qualname__ = f"{type(self).__name__}[{name}]"  # recorded as `policy:...`
        FunctionTool.__init__(
            self,
            name=name,
            func=self._invoke,
            needs_approval=predicate,
            approval_request=self._render,
            approver=approver,
            _takes_context=True,
            **fields,
        )

    def spec(self) -> ToolSpec:
        """The tool as data: a function tool marked as the Responses built-in it stands for."""
        return super().spec().model_copy(update={"builtin": self.builtin})

    def call_item(self, call_id: str, arguments: str) -> dict[str, Any]:
        """The call as the model made it: a `shell_call` / `apply_patch_call` item."""
        key = self.payload_key
        if key == "operation" and _payload(arguments, "operations") is not None:
            key = "operations"
        return {
            "type": self.call_type,
            "call_id": call_id,
            key: _payload(arguments, key),
            "status": "completed",
        }

    async def _approve(self, ctx: RunContextWrapper[Any], call: ApprovalCall) -> Any:
        problem = self._problem(call.params)
        if problem is not None:
            return ToolDenied(message=f"refused: {problem}", reason="refused by the tool's checks")
        if self.on_approval is None:
            return None
        item = ToolApprovalItem(
            call_id=call.call_id,
            name=self.name,
            arguments=call.arguments,
            agent=AgentRef(name=call.agent_name, id=call.agent_name),
            agent_id=call.agent_name,
            _raw_item=self.call_item(call.call_id, call.arguments),
        )
        what = f"on_approval of {self.name!r}"
        return on_approval_decision(await call_user(self.on_approval, ctx, item, what=what))

    # What each tool fills in.
    def _request_for(self, params: dict[str, Any], ctx: RunContextWrapper[Any]) -> Any:
        raise NotImplementedError

    def _requests_for(self, params: dict[str, Any], ctx: RunContextWrapper[Any]) -> list[Any]:
        return [self._request_for(params, ctx)]

    def _problem(self, params: dict[str, Any]) -> str | None:
        raise NotImplementedError

    def _render(self, params: dict[str, Any]) -> ApprovalRequest:
        raise NotImplementedError

    async def _invoke(self, ctx: RunContextWrapper[Any], **params: Any) -> str:
        raise NotImplementedError


# ----------------------------------------------------------------------------- shell


class AllowListShellExecutor:
    """The hardened shell executor: allowed programs only, no shell, bounded time and output.

    Each command line is split into words as a shell would, but no shell runs it (no pipes,
    `;`, redirections, globs or variables); its program must be on `allowed_commands`. It runs
    in `cwd` with a clean environment (`PATH`, `HOME`, `LANG` and `env`), under a supervisor
    that kills everything it started when it ends or times out. The commands of one call share
    `timeout` seconds (the model's `timeout_ms` may only shorten it) and `max_output_chars`
    (the model's `max_output_length` may only lower it). A refused command ends the call.

    Args:
        cwd: The folder commands run in (an existing directory on the worker).
        allowed_commands: Programs the model may run (`["ls", "git"]`), whatever the arguments.
        timeout: Seconds all commands of one call may take together.
        max_output_chars: Characters of output kept per command stream.
        env: Variables set over the worker's `PATH`, `HOME` and `LANG` (and nothing else).
        dry_run: Run nothing; say what would have run.
    """

    def __init__(
        self,
        cwd: str | os.PathLike[str],
        allowed_commands: Sequence[str],
        *,
        timeout: float = 30.0,
        max_output_chars: int = MAX_OUTPUT_CHARS,
        env: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> None:
        self.commands = _Commands.checked(
            cwd, allowed_commands, timeout, max_output_chars, dry_run, env
        )

    @property
    def timeout(self) -> float:
        """Seconds all commands of one call may take together."""
        return self.commands.timeout

    def check(self, commands: Sequence[str]) -> str | None:
        """Why these commands would be refused, or `None`."""
        for command in commands:
            try:
                parse_command(command, self.commands.allowed)
            except CommandRefused as exc:
                return f"{command[:200]!r}: {exc}"
        return None

    async def __call__(self, request: ShellCommandRequest) -> ShellResult:
        """Run the call's commands in order; stop at the first refused or timed-out one."""
        c, action = self.commands, request.data.action
        timeout = c.timeout
        if action.timeout_ms:
            timeout = min(timeout, action.timeout_ms / 1000)
        limit = c.max_output_chars
        if action.max_output_length is not None:
            limit = max(min(limit, action.max_output_length), 1)
        deadline = time.monotonic() + timeout
        outputs: list[ShellCommandOutput] = []
        for command in action.commands:
            try:
                argv = parse_command(command, c.allowed)
            except CommandRefused as exc:
                outputs.append(_refused(command, f"refused: {exc}"))
                break
            if c.dry_run:
                outputs.append(
                    ShellCommandOutput(
                        stdout=f"dry run: would run {argv!r} in {c.workdir}",
                        outcome=ShellCallOutcome("exit", 0),
                        command=command,
                    )
                )
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                outputs.append(
                    ShellCommandOutput(command=command, outcome=ShellCallOutcome("timeout"))
                )
                break
            run = await execute(argv, c.workdir, c.env, left, limit)
            if run.failure is not None:
                outputs.append(_refused(command, run.failure))
                break
            outcome = (
                ShellCallOutcome("timeout")
                if run.timed_out
                else ShellCallOutcome("exit", run.exit_code)
            )
            outputs.append(ShellCommandOutput(run.stdout, run.stderr, outcome, command))
            if run.timed_out:
                break
        return ShellResult(output=outputs, max_output_length=limit)


def _refused(command: str, why: str) -> ShellCommandOutput:
    return ShellCommandOutput(stderr=why, outcome=ShellCallOutcome("exit", 1), command=command)


class ShellTool(_BuiltinTool):
    """The SDK's `ShellTool`: the model runs commands through `executor`.

    Args:
        executor: Runs a call's commands: `(ShellCommandRequest) -> str | ShellResult`, sync or
            async, in the tool's activity. `AllowListShellExecutor` is the hardened one.
        name: The tool's name.
        needs_approval: `True`, `False`, or `(ctx, ShellActionRequest, call_id) -> bool`.
        on_approval: `(ctx, ToolApprovalItem) -> {"approve": bool, "reason": str}`, consulted
            when a call needs approval, before anyone is asked; a rejection's `reason` is what
            the model reads. Anything else leaves the call to a person.
        environment: `{"type": "local"}` (the default; hosted containers are not supported).
        max_output_length: Characters of output the model reads at most (the model's own
            `max_output_length` may only lower it).
        timeout: Seconds one call may run (default: the executor's timeout plus 30 s, else
            300 s); the activity's start-to-close timeout.
        retry_safe: `False` (the default): an attempt that dies midway is not run again
            blindly; the call waits for a person to say what happened.
        **options: Any other `function_tool` option (`approval_timeout`, `approvers`,
            `signed_decisions`, `required_approvals`, `auto_approve`, ...).
    """

    builtin = "shell"
    call_type = "shell_call"
    payload_key = "action"

    def __init__(
        self,
        executor: ShellExecutor | None = None,
        name: str = "shell",
        needs_approval: bool | ShellApprovalFunction = False,
        on_approval: ShellOnApprovalFunction | None = None,
        environment: Mapping[str, Any] | None = None,
        *,
        description: str | None = None,
        max_output_length: int = MAX_OUTPUT_CHARS,
        timeout: float | None = None,
        retry_safe: bool = False,
        **options: Any,
    ) -> None:
        if environment is not None and dict(environment).get("type", "local") != "local":
            raise UserError("ShellTool: only the local environment is supported")
        if executor is None or not callable(executor):
            raise UserError("ShellTool with local environment requires an executor.")
        if max_output_length < 1:
            raise UserError("ShellTool: max_output_length must be at least 1")
        self.executor = executor
        self.environment = {"type": "local"}
        self.max_output_length = max_output_length
        own = getattr(executor, "timeout", None)
        default = own + 30 if isinstance(own, int | float) else 300.0
        where = getattr(getattr(executor, "commands", None), "workdir", None)
        self._setup(
            name,
            needs_approval,
            on_approval,
            description=description
            or (
                f"Run shell commands{f' in {where}' if where else ''}; each call's commands "
                "run in order, and you get each one's output and exit code."
            ),
            params_json_schema=SHELL_PARAMETERS,
            _args_model=_ShellArgs,
            timeout=timeout or default,
            retry_safe=retry_safe,
            **options,
        )

    @property
    def type(self) -> str:
        """The Responses tool type."""
        return "shell"

    def _request_for(self, params: dict[str, Any], ctx: RunContextWrapper[Any]) -> Any:
        action: _Action = params["action"]
        return ShellActionRequest(
            list(action.commands), action.timeout_ms, action.max_output_length
        )

    def _problem(self, params: dict[str, Any]) -> str | None:
        check = getattr(self.executor, "check", None)
        return check(params["action"].commands) if callable(check) else None

    def _render(self, params: dict[str, Any]) -> ApprovalRequest:
        commands = params["action"].commands
        problem = self._problem(params)
        where = getattr(getattr(self.executor, "commands", None), "workdir", None)
        n = len(commands)
        message = f"The assistant wants to run {n} command{'s' * (n != 1)}"
        message += f" in {where}." if where else "."
        if problem:
            message += f"\n\nIt will be refused: {problem}."
        return ApprovalRequest(
            title=f"Run {n} shell command{'s' * (n != 1)}",
            message=message,
            preview="\n".join(f"$ {c}" for c in commands),
            preview_label="Commands",
            primary_label="Run",
        )

    async def _invoke(self, ctx: RunContextWrapper[Any], **params: Any) -> str:
        action: _Action = params["action"]
        request = ShellCommandRequest(
            ctx_wrapper=ctx,
            data=ShellCallData(
                call_id=str(getattr(ctx, "tool_call_id", "")),
                action=self._request_for(params, ctx),
                status="completed",
            ),
        )
        limit = self.max_output_length
        if action.max_output_length is not None:
            limit = max(min(limit, action.max_output_length), 0)
        try:
            result = await call_user(
                self.executor, request, what=f"the executor of {self.name!r}", in_thread=False
            )
        except Exception as exc:  # the SDK's answer: the error, as a failed command
            failed = ShellCommandOutput(
                stderr=str(exc) or type(exc).__name__, outcome=ShellCallOutcome("exit", 1)
            )
            return shell_answer([failed], limit)
        if isinstance(result, ShellResult):
            if result.max_output_length is not None:
                limit = max(min(limit, result.max_output_length), 0)
            outputs = [o for o in result.output if isinstance(o, ShellCommandOutput)]
        else:
            text = result if isinstance(result, str) else str(result)
            outputs = [ShellCommandOutput(stdout=text, outcome=ShellCallOutcome("exit", 0))]
        return shell_answer(outputs, limit)


# ----------------------------------------------------------------------------- apply_patch


class ApplyPatchTool(_BuiltinTool):
    """The SDK's `ApplyPatchTool`: the model creates, updates and deletes files via `editor`.

    Args:
        editor: An `ApplyPatchEditor` (`create_file`, `update_file`, `delete_file`, each
            `(ApplyPatchOperation) -> ApplyPatchResult | str | None`, sync or async, in the
            tool's activity). `hitl.editor.WorkspaceEditor` is the hardened one.
        name: The tool's name.
        needs_approval: `True`, `False`, or `(ctx, ApplyPatchOperation, call_id) -> bool`.
        on_approval: `(ctx, ToolApprovalItem) -> {"approve": bool, "reason": str}`, as for
            `ShellTool`.
        timeout: Seconds one call may take (the activity's start-to-close timeout).
        **options: Any other `function_tool` option.
    """

    builtin = "apply_patch"
    call_type = "apply_patch_call"
    payload_key = "operation"

    def __init__(
        self,
        editor: ApplyPatchEditor,
        name: str = "apply_patch",
        needs_approval: bool | ApplyPatchApprovalFunction = False,
        on_approval: ApplyPatchOnApprovalFunction | None = None,
        *,
        description: str | None = None,
        timeout: float = 60.0,
        **options: Any,
    ) -> None:
        if not all(callable(getattr(editor, m, None)) for m in _EDITOR_METHODS.values()):
            raise UserError("ApplyPatchTool: editor needs create_file, update_file, delete_file")
        self.editor = editor
        where = getattr(editor, "root", None)
        self._setup(
            name,
            needs_approval,
            on_approval,
            description=description
            or (
                f"Create, update or delete a file{f' in {where}' if where else ''} with a V4A "
                "diff (one operation per call)."
            ),
            params_json_schema=PATCH_PARAMETERS,
            _args_model=_PatchArgs,
            timeout=timeout,
            **options,
        )

    @property
    def type(self) -> str:
        """The Responses tool type."""
        return "apply_patch"

    def _requests_for(self, params: dict[str, Any], ctx: RunContextWrapper[Any]) -> list[Any]:
        return [
            ApplyPatchOperation(op.type, op.path, op.diff, ctx, op.move_to)
            for op in patch_operations(params)
        ]

    def _problem(self, params: dict[str, Any]) -> str | None:
        operations = self._requests_for(params, RunContextWrapper(context=None))
        if len(operations) > 1:
            check_all = getattr(self.editor, "check_all", None)
            if callable(check_all):
                problem = check_all(operations)
                return str(problem) if problem else None
            if not callable(getattr(self.editor, "apply_all", None)):
                return _ONE_PER_CALL
        check = getattr(self.editor, "check", None)
        if not callable(check):
            return None
        problem = check(operations[0])
        return str(problem) if problem else None

    def _render(self, params: dict[str, Any]) -> ApprovalRequest:
        ops = patch_operations(params)
        verbs = [_VERBS[op.type] for op in ops]
        where = getattr(self.editor, "root", None)
        if len(ops) == 1:
            op, verb = ops[0], verbs[0]
            title = f"{verb} {op.path}"
            message = f"The assistant wants to {verb.lower()} {op.path}"
            message += f" in {where}" if where else ""
            message += f", moving it to {op.move_to}." if op.move_to else "."
            preview = op.diff if op.diff else f"(delete {op.path})"
        else:
            title = f"Change {len(ops)} files"
            message = f"The assistant wants to change {len(ops)} files"
            message += f" in {where}" if where else ""
            message += ", all or none:\n\n" + "\n".join(
                f"- {v} {op.path}" + (f" (to {op.move_to})" if op.move_to else "")
                for v, op in zip(verbs, ops, strict=True)
            )
            preview = "\n".join(
                f"*** {v} File: {op.path}\n{op.diff or ''}".rstrip("\n")
                for v, op in zip(verbs, ops, strict=True)
            )
        problem = self._problem(params)
        if problem:
            message += f"\n\nIt will be refused, and approving it changes nothing: {problem}"
        return ApprovalRequest(
            title=title,
            message=message,
            preview=preview,
            preview_label="Diff",
            primary_label="Apply",
        )

    async def _invoke(self, ctx: RunContextWrapper[Any], **params: Any) -> str:
        operations = self._requests_for(params, ctx)
        what = f"the editor of {self.name!r}"
        try:
            if len(operations) == 1:
                method = getattr(self.editor, _EDITOR_METHODS[operations[0].type])
                result = await call_user(method, operations[0], what=what, in_thread=True)
            else:  # all or none: the editor's own transaction
                apply_all: Any = getattr(self.editor, "apply_all", None)
                if not callable(apply_all):
                    return _patch_answer("failed", _ONE_PER_CALL + ". Nothing was changed.")
                result = await call_user(apply_all, operations, what=what, in_thread=True)
        except Exception as exc:  # the SDK's answer: the error, as a failed operation
            return _patch_answer("failed", str(exc) or type(exc).__name__)
        if isinstance(result, ApplyPatchResult):
            status, text = result.status, result.output
        elif isinstance(result, Mapping):
            status, text = result.get("status"), result.get("output")
        else:
            status, text = None, None if result is None else str(result)
        return _patch_answer("failed" if status == "failed" else "completed", text)


_ONE_PER_CALL = "this editor applies one operation per call (it has no apply_all)"
_VERBS = {"create_file": "Create", "update_file": "Update", "delete_file": "Delete"}

_EDITOR_METHODS = {
    "create_file": "create_file",
    "update_file": "update_file",
    "delete_file": "delete_file",
}


def _patch_answer(status: str, text: Any) -> str:
    output = "" if text is None else str(text)[:MAX_PATCH_OUTPUT_CHARS]
    return json.dumps({PATCH_STATUS_KEY: status, "output": output})
