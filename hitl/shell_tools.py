"""Built-in tools: run allowed commands (`shell_tool`), apply unified diffs (`apply_patch_tool`).

Both are `function_tool`s. A call a tool will not carry out is answered (`refused: ...`, `patch
not applied: ...`), not raised, which would be retried like a worker failure; the tool's approver
makes the same checks while the call is planned, before anyone is asked to approve it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import os
import re
import shlex
import shutil
import signal
import tempfile
from asyncio.subprocess import DEVNULL, PIPE
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from hitl.approval import ApprovalCall, ApprovalRequest, ToolDenied
from hitl.context import RunContextWrapper
from hitl.errors import UserError
from hitl.tools import ApprovalPredicate, ApproverFunction, FunctionTool, function_tool

__all__ = ["CommandRefused", "FilePatch", "Hunk", "PatchError", "PatchResult", "apply_patch"]
__all__ += ["apply_patch_tool", "parse_command", "parse_patch", "shell_tool"]

MAX_HUNK_OFFSET = 100  # lines from its stated place a hunk may be found (an offset, no fuzz)
_SHELL = re.compile(r"[;|&<>`$*?~]")


class CommandRefused(ValueError):
    """A command line the shell tool will not run; the message says why."""


def parse_command(command: str, allowed_commands: Collection[str]) -> list[str]:
    """Split a command line into words (`shlex.split`); `CommandRefused` unless it is allowed."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise CommandRefused(f"cannot parse the command ({exc})") from None
    if not argv or any("\0" in arg for arg in argv):
        raise CommandRefused("the command is empty or contains a NUL character")
    if "/" in argv[0]:
        raise CommandRefused(f"name the program, not a path ({argv[0]!r})")
    if argv[0] not in allowed_commands:
        allowed = ", ".join(sorted(allowed_commands)) or "none"
        hint = "; no shell runs it: no pipes, ;, >, globs or $(...)" * bool(_SHELL.search(command))
        raise CommandRefused(f"{argv[0]!r} is not an allowed command (allowed: {allowed}){hint}")
    return argv


class _Capture:
    """One output stream: keeps enough bytes for `limit` characters and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.limit, self.data, self.dropped = limit, bytearray(), 0

    async def drain(self, stream: asyncio.StreamReader | None) -> None:
        while stream is not None and (chunk := await stream.read(65536)):
            room = max(4 * self.limit + 4 - len(self.data), 0)  # `limit` UTF-8 characters
            self.data += chunk[:room]
            self.dropped += max(len(chunk) - room, 0)

    def text(self) -> str:
        text = self.data.decode("utf-8", "replace")
        cut = max(len(text) - self.limit, 0) + self.dropped
        return f"{text[: self.limit]}\n[output cut: {cut} more characters]" if cut else text


async def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float, limit: int) -> str:
    try:
        # A new session (its own process group), so a timeout kills its children too.
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=env, stdin=DEVNULL, stdout=PIPE, stderr=PIPE, start_new_session=True
        )
    except FileNotFoundError:
        return f"refused: {argv[0]!r} is not installed on the worker (not found on PATH)"
    except OSError as exc:
        return f"could not start {argv[0]!r}: {exc.strerror or exc}"
    out, err = _Capture(limit), _Capture(limit)
    reading = asyncio.gather(out.drain(proc.stdout), err.drain(proc.stderr), proc.wait())
    reading.add_done_callback(lambda f: f.cancelled() or f.exception())  # seen, if cancelled
    parts = [""]
    try:
        await asyncio.wait_for(reading, timeout)
        parts = [f"exit code {proc.returncode}"]
    except TimeoutError:
        parts = [f"timed out after {timeout:g} s (the command and its children were killed)"]
    finally:
        if not parts[0].startswith("exit"):  # timed out, or the activity was cancelled
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    for label, capture in (("stdout", out), ("stderr", err)):
        if text := capture.text():
            parts.append(f"--- {label} ---\n{text.rstrip(chr(10))}")
    return "\n".join(parts if len(parts) > 1 else [*parts, "(no output)"])


async def _consult(fn: ApproverFunction | None, ctx: Any, call: ApprovalCall) -> Any:
    result = fn(ctx, call) if fn is not None else None
    return await result if inspect.isawaitable(result) else result


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
        timeout: Seconds a command may run before its process group is killed.
        max_output_chars: Characters kept of stdout, and of stderr.
        dry_run: Run nothing; say what would have run.
        env: Variables set over the worker's `PATH`, `HOME` and `LANG` (and nothing else).
        description: What the model reads about the tool (default: what is allowed).
        retry_safe: `False`: an attempt that dies midway parks the call for a person.
    """
    workdir = Path(cwd).expanduser().resolve()
    if not workdir.is_dir():
        raise UserError(f"shell_tool: cwd {os.fspath(cwd)!r} is not an existing directory")
    allowed = frozenset(allowed_commands)
    names = not isinstance(allowed_commands, str) and all(c and "/" not in c for c in allowed)
    if not names or timeout <= 0 or max_output_chars < 1:
        raise UserError("shell_tool: invalid allowed_commands, timeout or max_output_chars")
    child_env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    child_env.setdefault("PATH", os.defpath)
    child_env.update(env or {})

    def command_request(params: dict[str, Any]) -> ApprovalRequest:
        command = str(params["command"])
        try:
            shown, problem = shlex.join(parse_command(command, allowed)), ""
        except CommandRefused as exc:
            shown, problem = command, f"\n\nIt will be refused: {exc}."
        effect = "Nothing will run (dry run)." if dry_run else f"It may run for {timeout:g} s."
        return ApprovalRequest(
            title="Run a shell command",
            message=f"The assistant wants to run a command in {workdir}. {effect}{problem}",
            preview=f"# in {workdir}\n$ {shown}",
            preview_label="Command",
            primary_label="Run",
        )

    async def allow_list(ctx: RunContextWrapper[Any], call: ApprovalCall) -> Any:
        try:
            parse_command(str(call.params.get("command", "")), allowed)
        except CommandRefused as exc:
            return ToolDenied(message=f"refused: {exc}", reason="refused by the allow-list")
        return await _consult(on_approval, ctx, call)

    allow_list.__qualname__ = f"shell_tool[{name}]"  # recorded as the deciding `policy:...`

    async def shell(command: str) -> str:
        """Run one command line.

        Args:
            command: The command line, e.g. `git status --short`, split into words as a shell
                would (quotes work); but no shell runs it: no pipes, `;`, `>`, globs or `$X`.
        """
        try:
            argv = parse_command(command, allowed)
        except CommandRefused as exc:
            return f"refused: {exc}"
        if dry_run:
            return f"dry run: would run {argv!r} in {workdir}"
        return await _run(argv, workdir, child_env, timeout, max_output_chars)

    default = (
        f"Run one command in {workdir}; get its exit code and output. Allowed programs: "
        f"{', '.join(sorted(allowed)) or 'none'}. No shell: no pipes, `;`, redirections, globs, "
        f"`~` or variables. Commands are stopped after {timeout:g} s."
    )
    return function_tool(
        name_override=name,
        description_override=description or default,
        needs_approval=needs_approval,
        approval_request=command_request,
        approver=allow_list,
        timeout=timeout + 30,  # our own kill comes first; the activity's timeout is a backstop
        retry_safe=retry_safe,
    )(shell)


class PatchError(ValueError):
    """A patch that cannot be read or does not apply (nothing was changed)."""


@dataclass(frozen=True)
class Hunk:
    """One `@@` section: `old` lines (context, removed) become `new` ones (context, added)."""

    old_start: int
    new_start: int
    old: tuple[str, ...]
    new: tuple[str, ...]
    added: int
    removed: int
    old_eol: bool = True  # false: the old side's last line has no newline ("\ No newline ...")
    new_eol: bool = True

    def reversed(self) -> Hunk:
        """The hunk that undoes this one."""
        h = self
        return Hunk(
            h.new_start, h.old_start, h.new, h.old, h.removed, h.added, h.new_eol, h.old_eol
        )


@dataclass(frozen=True)
class FilePatch:
    """The hunks of one file; a path of `None` is `/dev/null` (a created or deleted file)."""

    old_path: str | None
    new_path: str | None
    hunks: tuple[Hunk, ...]

    @property
    def path(self) -> str:
        """The file's path, relative to the root."""
        return self.new_path or self.old_path or ""

    @property
    def action(self) -> Literal["create", "delete", "modify"]:
        """What the patch does to the file."""
        return "create" if not self.old_path else "delete" if not self.new_path else "modify"

    @property
    def added(self) -> int:
        """Lines added."""
        return sum(h.added for h in self.hunks)

    @property
    def removed(self) -> int:
        """Lines removed."""
        return sum(h.removed for h in self.hunks)

    def reversed(self) -> FilePatch:
        """The patch that undoes this one."""
        return FilePatch(self.new_path, self.old_path, tuple(h.reversed() for h in self.hunks))


@dataclass(frozen=True)
class PatchResult:
    """What `apply_patch` did: files `changed`, and those `unchanged` (already patched)."""

    changed: tuple[FilePatch, ...]
    unchanged: tuple[FilePatch, ...] = ()
    dry_run: bool = False

    @property
    def already_applied(self) -> bool:
        """Every file already had its changes: nothing was (or would be) written."""
        return not self.changed

    def summary(self) -> str:
        """One line for the model."""
        verbs = {"create": "created", "delete": "deleted", "modify": "modified"}
        changes = ", ".join(
            f"{f.action if self.dry_run else verbs[f.action]} {f.path} (+{f.added} -{f.removed})"
            for f in self.changed
        )
        already = ", ".join(f.path for f in self.unchanged)
        if not self.changed:
            text = f"already applied: {already} already have these changes; nothing changed"
        elif self.dry_run:
            text = f"the patch applies; it would {changes}"
        else:
            text = f"applied the patch: {changes}"
        if self.changed and already:
            text += f"; already applied, left unchanged: {already}"
        return f"dry run: {text}" if self.dry_run else text


_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_UNSUPPORTED = ("rename from ", "rename to ", "copy from ", "copy to ", "GIT binary", "Binary ")


def _file_paths(old_line: str, new_line: str, lineno: int) -> tuple[str | None, str | None]:
    old, new = (
        None if p == "/dev/null" else p
        for p in (line[4:].split("\t")[0].strip().strip('"') for line in (old_line, new_line))
    )
    if old is None and new is None:
        raise PatchError(f"line {lineno}: both sides are /dev/null")
    if (old is None or old.startswith("a/")) and (new is None or new.startswith("b/")):
        old, new = old and old[2:], new and new[2:]  # git's a/ and b/ prefixes
    if old is not None and new is not None and old != new:
        raise PatchError(f"line {lineno}: {old!r} and {new!r} differ; renames are not supported")
    return old, new


def _read_hunk(lines: list[str], i: int) -> tuple[Hunk, int]:
    header = lines[i].rstrip("\r")
    m = _HUNK_HEADER.match(header)
    if m is None:
        raise PatchError(f"line {i + 1}: malformed hunk header {header!r:.80}")
    old_len, new_len = (1 if n is None else int(n) for n in (m[2], m[4]))
    old: list[str] = []
    new: list[str] = []
    ops = ""  # the body's ops, with "<" / ">" where the old / new side lacks its last newline
    j = i + 1
    while True:
        line = lines[j] if j < len(lines) else None
        if line is not None and line.startswith("\\") and ops:  # "\ No newline at end of file"
            ops += "<" if ops[-1] == "-" else ">" if ops[-1] == "+" else "<>"
            j += 1
            continue
        if len(old) == old_len and len(new) == new_len:
            break
        if line is None or (line and line[0] not in " -+"):
            end = "the end" if line is None else f"{line!r:.60}"
            raise PatchError(
                f"line {j + 1}: hunk {header} needs {old_len} old and {new_len} new lines but "
                f"has {len(old)} and {len(new)} before {end}"
            )
        op, text = (line[0], line[1:]) if line else (" ", "")  # an empty line: blank context
        full_old = "<" in ops or len(old) == old_len
        if (op != "+" and full_old) or (op != "-" and (">" in ops or len(new) == new_len)):
            raise PatchError(f"line {j + 1}: hunk {header} has more lines than its header says")
        if op != "+":
            old.append(text)
        if op != "-":
            new.append(text)
        ops += op
        j += 1
    hunk = Hunk(int(m[1]), int(m[3]), tuple(old), tuple(new), ops.count("+"), ops.count("-"))
    return dataclasses.replace(hunk, old_eol="<" not in ops, new_eol=">" not in ops), j


def parse_patch(text: str) -> list[FilePatch]:
    """Read a unified diff (`diff -u`, `git diff`): one `FilePatch` per file (`PatchError`)."""
    lines = text.removesuffix("\n").split("\n")
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i].rstrip("\r")
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = _file_paths(line, lines[i + 1].rstrip("\r"), i + 1)
            files.append(FilePatch(old, new, ()))
            i += 2
        elif line.startswith("@@"):
            if not files:
                raise PatchError(f"line {i + 1}: a hunk before any '--- ' / '+++ ' file header")
            hunk, i = _read_hunk(lines, i)
            files[-1] = dataclasses.replace(files[-1], hunks=(*files[-1].hunks, hunk))
        elif line.startswith(_UNSUPPORTED):
            raise PatchError(f"line {i + 1}: renames, copies and binary patches are unsupported")
        elif files and line[:1] in ("+", "-", " ", "\\"):
            raise PatchError(f"line {i + 1}: {line!r:.60} is outside any hunk (check its counts)")
        else:
            i += 1  # commentary, `diff --git`, `index`, file modes, blank lines
    if not files:
        raise PatchError("no file header ('--- a/path' then '+++ b/path') found")
    for f in files:
        if not f.hunks or [g.path for g in files].count(f.path) > 1:
            raise PatchError(f"{f.path}: give each file one section, with at least one hunk")
    return files


def _mismatch(path: str, n: int, hunk: Hunk, src: list[str], want: int) -> str:
    where = f"{path}: hunk {n} (@@ -{hunk.old_start},{len(hunk.old)} @@) does not match"
    start = min(max(want, 0), len(src))
    for k, expected in enumerate(hunk.old):
        actual = src[start + k] if start + k < len(src) else None
        if actual != expected:
            got = "past the end of the file" if actual is None else f"{actual!r:.80}"
            return f"{where}: line {start + k + 1} is {got}, the patch expects {expected!r:.80}"
    return f"{where}: its lines are at line {start + 1} but the end-of-file newline differs"


def _apply_hunks(src: list[str], eol: bool, patch: FilePatch) -> tuple[list[str], bool]:
    """The file's lines after the patch, and whether the last one ends with a newline."""
    out: list[str] = []
    cursor = drift = 0
    end_eol = eol
    for n, hunk in enumerate(patch.hunks, 1):
        old = list(hunk.old)
        stated = hunk.old_start - 1 if old else hunk.old_start  # an empty side: after that line
        want = stated + drift  # a file shifted for one hunk is likely shifted for the next
        for pos in (want + d * s for d in range(MAX_HUNK_OFFSET + 1) for s in (-1, 1)):
            end = pos + len(old)
            # At the end of the file, the hunk must also agree about the last newline.
            if (
                pos >= cursor
                and src[pos:end] == old
                and end <= len(src)
                and (hunk.old_eol if end < len(src) else not src or eol == hunk.old_eol)
            ):
                break
        else:
            raise PatchError(_mismatch(patch.path, n, hunk, src, want))
        drift = pos - stated
        out += src[cursor:pos] + list(hunk.new)
        cursor = end
        if cursor == len(src):
            end_eol = hunk.new_eol
    out += src[cursor:]
    return out, end_eol or not out


def _inside(root: Path, rel: str) -> Path:
    pure = PurePosixPath(rel)
    if not rel or "\0" in rel or pure.is_absolute() or ".." in pure.parts:
        raise PatchError(f"{rel!r}: paths must be relative and stay inside the root")
    try:
        target = (root / pure).resolve()
    except (OSError, RuntimeError) as exc:
        raise PatchError(f"{rel!r} cannot be resolved ({exc})") from None
    if target == root or not target.is_relative_to(root):
        raise PatchError(f"{rel!r} is not a file path inside the root (a symbolic link out?)")
    return target


def _plan_file(root: Path, patch: FilePatch) -> tuple[Path, str | None]:
    """The file to write and its new content (`None`: delete it); nothing is written."""
    target = _inside(root, patch.path)
    content = ""
    if patch.old_path is None:
        if target.exists():
            raise PatchError(f"{patch.path} already exists")
        parent = target.parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            raise PatchError(f"{patch.path}: {parent.relative_to(root)} is not a directory")
    elif not target.is_file():
        raise PatchError(f"{patch.path} does not exist (or is not a file)")
    else:
        try:
            content = target.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise PatchError(f"{patch.path} is not UTF-8 text") from None
    lines = content.split("\n") if content else []
    eol = not lines or lines[-1] == ""
    lines, eol = _apply_hunks(lines[:-1] if lines and eol else lines, eol, patch)
    if patch.new_path is not None:
        return target, "\n".join(lines) + ("\n" if lines and eol else "")
    if lines:
        raise PatchError(f"{patch.path}: the deletion leaves {len(lines)} lines in place")
    return target, None


def _write(target: Path, content: str | None) -> None:
    if content is None:
        return target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(content)
        shutil.copymode(target, tmp) if target.exists() else os.chmod(tmp, 0o644)
        os.replace(tmp, target)  # readers see the old file or the new one, never half of it
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def apply_patch(root: str | os.PathLike[str], text: str, *, dry_run: bool = False) -> PatchResult:
    """Apply a unified diff to the files under `root`: every file, or none.

    Every hunk is checked before anything is written. A file whose changes are already there
    (the reverse patch applies, e.g. on a retried attempt) is left as it is (`unchanged`).
    `PatchError`: the patch cannot be read, or a file would not apply; nothing was written.
    """
    base = Path(root).resolve()
    if not base.is_dir():
        raise PatchError(f"the root {os.fspath(root)!r} is not a directory")
    writes: list[tuple[Path, str | None]] = []
    changed: list[FilePatch] = []
    unchanged: list[FilePatch] = []
    for patch in parse_patch(text):
        try:
            writes.append(_plan_file(base, patch))
            changed.append(patch)
        except PatchError as forward:
            try:
                _plan_file(base, patch.reversed())
            except PatchError:
                raise forward from None
            unchanged.append(patch)
    for target, content in [] if dry_run else writes:
        _write(target, content)
    return PatchResult(tuple(changed), tuple(unchanged), dry_run=dry_run)


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

    def attempt(patch: str, dry: bool) -> PatchResult | str:
        size = len(patch.encode("utf-8"))
        if size > max_patch_bytes:
            return f"refused: the patch is {size} bytes, over the limit of {max_patch_bytes}"
        try:
            return apply_patch(base, patch, dry_run=dry)
        except PatchError as exc:
            return f"patch not applied: {exc}. Nothing was changed."

    def patch_request(params: dict[str, Any]) -> ApprovalRequest:
        patch = str(params["patch"])
        checked = attempt(patch, True)
        try:
            files = parse_patch(patch)
        except PatchError:
            files = []
        listed = "\n".join(f"- {f.action} {f.path} (+{f.added} -{f.removed})" for f in files)
        message = f"The assistant wants to change files in {base}:\n{listed or '(none readable)'}"
        if isinstance(checked, str):
            message += f"\n\nIt will be refused, and approving it changes nothing: {checked}"
        elif checked.already_applied:
            message += "\n\nThese changes are already in the files; approving changes nothing."
        message += "\n\nDry run: nothing will be written." * dry_run
        count = f" to {len(files)} file{'' if len(files) == 1 else 's'}" if files else ""
        return ApprovalRequest(
            title=f"Apply a patch{count}",
            message=message,
            preview=patch,
            preview_label="Diff",
            primary_label="Apply",
        )

    async def applies(ctx: RunContextWrapper[Any], call: ApprovalCall) -> Any:
        checked = await asyncio.to_thread(attempt, str(call.params.get("patch", "")), True)
        if isinstance(checked, str):
            return ToolDenied(message=checked, reason="the patch does not apply")
        return await _consult(on_approval, ctx, call)

    applies.__qualname__ = f"apply_patch_tool[{name}]"  # recorded as the deciding `policy:...`

    def apply(patch: str) -> str:
        """Apply a unified diff.

        Args:
            patch: The diff, e.g. the output of `git diff`.
        """
        result = attempt(patch, dry_run)
        return result if isinstance(result, str) else result.summary()

    default = (
        f"Apply a unified diff (`git diff` format: `--- a/path`, `+++ b/path`, `/dev/null` to "
        f"create or delete, hunks with 3 lines of context) to files in {base}; all or nothing."
    )
    return function_tool(
        name_override=name,
        description_override=description or default,
        needs_approval=needs_approval,
        approval_request=patch_request,
        approver=applies,
        timeout=60.0,
    )(apply)
