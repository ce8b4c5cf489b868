"""Built-in tools: run allowed commands (`shell_tool`), apply unified diffs (`apply_patch_tool`).

Both are `function_tool`s. A call a tool will not carry out is answered (`refused: ...`, `patch
not applied: ...`), not raised, which would be retried like a worker failure; the tool's approver
makes the same checks while the call is planned, before anyone is asked to approve it.

This module is what the model, the approver and the person see; running commands lives in
`hitl._shell`, reading and applying diffs in `hitl._patch` (their public names are re-exported
here).
"""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hitl._patch import FilePatch, Hunk, PatchError, PatchResult, apply_patch, parse_patch
from hitl._shell import CommandRefused, parse_command, run_command
from hitl._user_code import call_user
from hitl.approval import ApprovalCall, ApprovalRequest, ToolDenied
from hitl.context import RunContextWrapper
from hitl.errors import UserError
from hitl.tools import ApprovalPredicate, ApproverFunction, FunctionTool, function_tool

__all__ = ["CommandRefused", "FilePatch", "Hunk", "PatchError", "PatchResult", "apply_patch"]
__all__ += ["apply_patch_tool", "parse_command", "parse_patch", "shell_tool"]


def shell_tool(
    *,
    cwd: str | os.PathLike[str],
    allowed_commands: Sequence[str],
    name: str = "shell",
    needs_approval: bool | ApprovalPredicate = True,
    on_approval: ApproverFunction | None = None,
    timeout: float = 30.0,
    max_output_chars: int = 8000,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
    description: str | None = None,
    retry_safe: bool = False,
) -> FunctionTool:
    """A tool running one allowed command line (`{"command": "git status"}`) in `cwd`, no shell.

    Args:
        cwd: The folder commands run in (an existing directory on the worker).
        allowed_commands: Programs the model may run (`["ls", "git"]`), whatever the arguments.
        name: The tool's name.
        needs_approval: `True`, `False` or a predicate `(ctx, params, call_id) -> bool`.
        on_approval: An approver `(ctx, ApprovalCall) -> ToolApproved | ToolDenied | None`.
        timeout: Seconds a command may run before it is killed, with every process it started
            (on Linux; elsewhere, with its process group).
        max_output_chars: Characters kept of stdout, and of stderr.
        dry_run: Run nothing; say what would have run.
        env: Variables set over the worker's `PATH`, `HOME` and `LANG` (and nothing else).
        description: What the model reads about the tool (default: what is allowed).
        retry_safe: `False`: an attempt that dies midway parks the call for a person.
    """
    commands = _Commands.checked(cwd, allowed_commands, timeout, max_output_chars, dry_run, env)

    async def allow_list(ctx: RunContextWrapper[Any], call: ApprovalCall) -> Any:
        return await commands.approve(ctx, call, on_approval)

    allow_list.__qualname__ = f"shell_tool[{name}]"  # recorded as the deciding `policy:...`

    async def shell(command: str) -> str:
        """Run one command line.

        Args:
            command: The command line, e.g. `git status --short`, split into words as a shell
                would (quotes work); but no shell runs it: no pipes, `;`, `>`, globs or `$X`.
        """
        return await commands.run(command)

    return function_tool(
        name_override=name,
        description_override=description or commands.description(),
        needs_approval=needs_approval,
        approval_request=commands.request,
        approver=allow_list,
        timeout=timeout + 30,  # our own kill comes first; the activity's timeout is a backstop
        retry_safe=retry_safe,
    )(shell)


@dataclass(frozen=True)
class _Commands:
    """What a `shell_tool` may run, and how: one place for the model, the approver and the run."""

    workdir: Path
    allowed: frozenset[str]
    env: dict[str, str]
    timeout: float
    max_output_chars: int
    dry_run: bool

    @classmethod
    def checked(
        cls,
        cwd: str | os.PathLike[str],
        allowed_commands: Sequence[str],
        timeout: float,
        max_output_chars: int,
        dry_run: bool,
        env: Mapping[str, str] | None,
    ) -> _Commands:
        """The tool's settings, or `UserError` when they cannot work (checked at definition)."""
        workdir = Path(cwd).expanduser().resolve()
        if not workdir.is_dir():
            raise UserError(f"shell_tool: cwd {os.fspath(cwd)!r} is not an existing directory")
        allowed = frozenset(allowed_commands)
        names = not isinstance(allowed_commands, str) and all(c and "/" not in c for c in allowed)
        if not names or timeout <= 0 or max_output_chars < 1:
            raise UserError("shell_tool: invalid allowed_commands, timeout or max_output_chars")
        # A clean environment: the worker's secrets never reach a command.
        child_env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
        child_env.setdefault("PATH", os.defpath)
        child_env.update(env or {})
        return cls(workdir, allowed, child_env, timeout, max_output_chars, dry_run)

    def description(self) -> str:
        """What the model reads about the tool by default."""
        return (
            f"Run one command in {self.workdir}; get its exit code and output. Allowed programs: "
            f"{', '.join(sorted(self.allowed)) or 'none'}. No shell: no pipes, `;`, "
            f"redirections, globs, `~` or variables. Commands are stopped after "
            f"{self.timeout:g} s."
        )

    def request(self, params: dict[str, Any]) -> ApprovalRequest:
        """What the person sees: the command as it will run (or why it will be refused)."""
        command = str(params["command"])
        try:
            shown, problem = shlex.join(parse_command(command, self.allowed)), ""
        except CommandRefused as exc:
            shown, problem = command, f"\n\nIt will be refused: {exc}."
        effect = (
            "Nothing will run (dry run)." if self.dry_run else f"It may run for {self.timeout:g} s."
        )
        return ApprovalRequest(
            title="Run a shell command",
            message=f"The assistant wants to run a command in {self.workdir}. {effect}{problem}",
            preview=f"# in {self.workdir}\n$ {shown}",
            preview_label="Command",
            primary_label="Run",
        )

    async def approve(
        self, ctx: RunContextWrapper[Any], call: ApprovalCall, on_approval: ApproverFunction | None
    ) -> Any:
        """Refuse a command off the allow-list before anyone is asked; else `on_approval`."""
        try:
            parse_command(str(call.params.get("command", "")), self.allowed)
        except CommandRefused as exc:
            return ToolDenied(message=f"refused: {exc}", reason="refused by the allow-list")
        return await _consult(on_approval, ctx, call)

    async def run(self, command: str) -> str:
        """The tool's answer for one command line: its output, or why it did not run."""
        try:
            argv = parse_command(command, self.allowed)
        except CommandRefused as exc:
            return f"refused: {exc}"
        if self.dry_run:
            return f"dry run: would run {argv!r} in {self.workdir}"
        return await run_command(argv, self.workdir, self.env, self.timeout, self.max_output_chars)


def apply_patch_tool(
    *,
    root: str | os.PathLike[str],
    name: str = "apply_patch",
    needs_approval: bool | ApprovalPredicate = True,
    on_approval: ApproverFunction | None = None,
    dry_run: bool = False,
    max_patch_bytes: int = 200_000,
    description: str | None = None,
) -> FunctionTool:
    """A tool applying a unified diff (`{"patch": "--- a/x.py ..."}`) to the files under `root`.

    Args:
        root: The folder patches apply to (an existing directory on the worker).
        name: The tool's name.
        needs_approval: `True`, `False` or a predicate `(ctx, params, call_id) -> bool`.
        on_approval: An approver `(ctx, ApprovalCall) -> ToolApproved | ToolDenied | None`.
        dry_run: Check patches and say what would change; write nothing.
        max_patch_bytes: Larger patches are refused.
        description: What the model reads about the tool.
    """
    base = Path(root).expanduser().resolve()
    if not base.is_dir() or max_patch_bytes < 1:
        raise UserError(
            f"apply_patch_tool: no directory {os.fspath(root)!r}, or max_patch_bytes < 1"
        )
    patches = _Patches(base, dry_run, max_patch_bytes)

    async def applies(ctx: RunContextWrapper[Any], call: ApprovalCall) -> Any:
        return await patches.approve(ctx, call, on_approval)

    applies.__qualname__ = f"apply_patch_tool[{name}]"  # recorded as the deciding `policy:...`

    def apply(patch: str) -> str:
        """Apply a unified diff.

        Args:
            patch: The diff, e.g. the output of `git diff`.
        """
        return patches.apply(patch)

    return function_tool(
        name_override=name,
        description_override=description or patches.description(),
        needs_approval=needs_approval,
        approval_request=patches.request,
        approver=applies,
        timeout=60.0,
    )(apply)


@dataclass(frozen=True)
class _Patches:
    """Where an `apply_patch_tool` writes, and how: for the model, the approver and the run."""

    base: Path
    dry_run: bool
    max_patch_bytes: int

    def description(self) -> str:
        """What the model reads about the tool by default."""
        return (
            f"Apply a unified diff (`git diff` format: `--- a/path`, `+++ b/path`, `/dev/null` "
            f"to create or delete, hunks with 3 lines of context) to files in {self.base}; all "
            "or nothing."
        )

    def attempt(self, patch: str, dry: bool) -> PatchResult | str:
        """Apply (or with `dry`, check) a patch: what it did, or the answer for the model."""
        size = len(patch.encode("utf-8"))
        if size > self.max_patch_bytes:
            return f"refused: the patch is {size} bytes, over the limit of {self.max_patch_bytes}"
        try:
            return apply_patch(self.base, patch, dry_run=dry)
        except PatchError as exc:
            if exc.nothing_changed:
                return f"patch not applied: {exc}. Nothing was changed."
            return f"patch failed midway and could not be fully undone: {exc}."

    def request(self, params: dict[str, Any]) -> ApprovalRequest:
        """What the person sees: the files it changes, the diff, and whether it would apply."""
        patch = str(params["patch"])
        checked = self.attempt(patch, True)
        try:
            files = parse_patch(patch)
        except PatchError:
            files = []
        listed = "\n".join(f"- {f.action} {f.path} (+{f.added} -{f.removed})" for f in files)
        message = (
            f"The assistant wants to change files in {self.base}:\n{listed or '(none readable)'}"
        )
        if isinstance(checked, str):
            message += f"\n\nIt will be refused, and approving it changes nothing: {checked}"
        elif checked.already_applied:
            message += "\n\nThese changes are already in the files; approving changes nothing."
        message += "\n\nDry run: nothing will be written." * self.dry_run
        count = f" to {len(files)} file{'' if len(files) == 1 else 's'}" if files else ""
        return ApprovalRequest(
            title=f"Apply a patch{count}",
            message=message,
            preview=patch,
            preview_label="Diff",
            primary_label="Apply",
        )

    async def approve(
        self, ctx: RunContextWrapper[Any], call: ApprovalCall, on_approval: ApproverFunction | None
    ) -> Any:
        """Refuse a patch that does not apply before anyone is asked; else `on_approval`."""
        checked = await asyncio.to_thread(self.attempt, str(call.params.get("patch", "")), True)
        if isinstance(checked, str):
            return ToolDenied(message=checked, reason="the patch does not apply")
        return await _consult(on_approval, ctx, call)

    def apply(self, patch: str) -> str:
        """The tool's answer for one patch: what changed, or why nothing did."""
        result = self.attempt(patch, self.dry_run)
        return result if isinstance(result, str) else result.summary()


async def _consult(fn: ApproverFunction | None, ctx: Any, call: ApprovalCall) -> Any:
    """The user's own approver (`on_approval`), once the tool's checks let the call through."""
    return None if fn is None else await call_user(fn, ctx, call, what="on_approval")
