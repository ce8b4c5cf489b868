"""Built-in tools: run allowed commands (`shell_tool`), apply unified diffs (`apply_patch_tool`).

Both are `function_tool`s. A call a tool will not carry out is answered (`refused: ...`, `patch
not applied: ...`), not raised, which would be retried like a worker failure; the tool's approver
makes the same checks while the call is planned, before anyone is asked to approve it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import os
import re
import secrets
import shlex
import shutil
import signal
import sys
import tempfile
from asyncio.subprocess import DEVNULL, PIPE
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from hitl._user_code import call_user
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


# The supervisor a command runs under on Linux (`python -I -S -c _SUPERVISOR status_fd worker_pid
# lc_ctype argv...`). It is a child subreaper, so descendants orphaned by a double fork or setsid
# are reparented to it rather than to init, and it can still find them by walking /proc. It kills
# them all when the command exits, when the worker asks (SIGTERM) and when the worker dies
# (PR_SET_PDEATHSIG sends it SIGTERM). A string run by the worker's own interpreter, not a module:
# `-I -S` starts in ~50 ms and imports nothing from the worker's environment.
_SUPERVISOR = r"""
import os, resource, signal, subprocess, sys, time


def descendants():
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/" + name + "/stat", "rb") as f:
                    state, ppid = f.read().rsplit(b")", 1)[1].split()[:2]
            except (OSError, ValueError):
                continue  # it exited while the list was read
            children.setdefault(int(ppid), []).append((int(name), state))
    living, todo, seen = [], [os.getpid()], set()
    while todo:
        for pid, state in children.get(todo.pop(), ()):
            if pid not in seen:
                seen.add(pid)
                todo.append(pid)
                if state not in (b"Z", b"X"):
                    living.append(pid)
    return living


def kill_all():
    # Again until none is left: a process may fork between one scan and its kill.
    deadline = time.monotonic() + 3
    while True:
        living = descendants()
        for pid in living:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if not living or time.monotonic() > deadline:
            return
        time.sleep(0.01)


def stop(signum, frame):
    kill_all()
    os._exit(128 + signal.SIGTERM)


signal.signal(signal.SIGTERM, stop)
status_fd, worker, lc_ctype, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
try:
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    args = [ctypes.c_ulong(0)] * 3
    prctl(36, ctypes.c_ulong(1), *args)  # PR_SET_CHILD_SUBREAPER
    prctl(1, ctypes.c_ulong(signal.SIGTERM), *args)  # PR_SET_PDEATHSIG
except (ImportError, OSError, AttributeError):
    pass  # best effort: the worker still kills the process group
if os.getppid() != worker:
    os._exit(128 + signal.SIGTERM)  # the worker died before PR_SET_PDEATHSIG took effect
env = dict(os.environ)
# Python coerces a C locale by setting LC_CTYPE; the command gets the environment it was given.
if lc_ctype:
    env["LC_CTYPE"] = lc_ctype[1:]
else:
    env.pop("LC_CTYPE", None)
try:
    child = subprocess.Popen(argv, env=env)
except OSError as exc:
    os.write(status_fd, b"%d %s" % (exc.errno or 0, (exc.strerror or str(exc)).encode()))
    os._exit(127)
os.close(status_fd)
while True:
    pid, status = os.waitpid(-1, 0)  # reaps orphans too, while the command runs
    if pid == child.pid:
        break
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # already stopping
kill_all()
if os.WIFSIGNALED(status):
    # Die of the same signal, so the worker reads the same status as without a supervisor.
    sig = os.WTERMSIG(status)
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    try:
        signal.signal(sig, signal.SIG_DFL)
    except (OSError, ValueError):
        pass
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)
os._exit(os.waitstatus_to_exitcode(status))
"""


# Linux: commands run under `_SUPERVISOR`, which kills every descendant, detached ones included.
# Elsewhere (no prctl, no /proc), or with no interpreter to run it (an embedded Python), the
# command's own process group is all that can be killed.
_SUPERVISED = sys.platform.startswith("linux") and os.path.isdir("/proc/self")
_SUPERVISED = _SUPERVISED and bool(sys.executable)
_STOP_GRACE = 5.0  # seconds the supervisor gets to kill the tree before its group is SIGKILLed


def _under_supervisor(argv: list[str], env: Mapping[str, str], status_w: int) -> list[str]:
    lc_ctype = f"={env['LC_CTYPE']}" if "LC_CTYPE" in env else ""
    head = [sys.executable, "-I", "-S", "-c", _SUPERVISOR, str(status_w), str(os.getpid())]
    return [*head, lc_ctype, *argv]


def _start_failure(status_r: int, program: str) -> str | None:
    """What the supervisor reported when the command could not start (it has exited)."""
    os.set_blocking(status_r, False)
    try:
        report = os.read(status_r, 4096).decode("utf-8", "replace")
    except BlockingIOError:  # held open elsewhere: nothing was reported
        return None
    if not report:
        return None
    code, _, reason = report.partition(" ")
    if code == str(errno.ENOENT):
        return f"refused: {program!r} is not installed on the worker (not found on PATH)"
    return f"could not start {program!r}: {reason}"


async def _stop(proc: asyncio.subprocess.Process, supervised: bool) -> None:
    """Kill the command and everything it started; returns once its process was reaped."""
    if supervised and proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)  # the supervisor kills the whole tree, then exits
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), _STOP_GRACE)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group
    await proc.wait()


async def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float, limit: int) -> str:
    status_r, status_w = os.pipe() if _SUPERVISED else (-1, -1)
    supervised = status_w >= 0
    try:
        try:
            # A new session (its own process group), so that a timeout can kill the group.
            proc = await asyncio.create_subprocess_exec(
                *(_under_supervisor(argv, env, status_w) if supervised else argv),
                cwd=cwd,
                env=env,
                stdin=DEVNULL,
                stdout=PIPE,
                stderr=PIPE,
                start_new_session=True,
                pass_fds=(status_w,) if supervised else (),
            )
        except OSError as exc:
            if isinstance(exc, FileNotFoundError) and not supervised:
                return f"refused: {argv[0]!r} is not installed on the worker (not found on PATH)"
            return f"could not start {argv[0]!r}: {exc.strerror or exc}"
        finally:
            if supervised:
                os.close(status_w)  # the supervisor's copy is left: EOF once it exits
        return await _collect(proc, argv[0], status_r, timeout, limit)
    finally:
        if supervised:
            os.close(status_r)


async def _collect(
    proc: asyncio.subprocess.Process, program: str, status_r: int, timeout: float, limit: int
) -> str:
    supervised = status_r >= 0
    out, err = _Capture(limit), _Capture(limit)
    reading = asyncio.gather(out.drain(proc.stdout), err.drain(proc.stderr), proc.wait())
    reading.add_done_callback(lambda f: f.cancelled() or f.exception())  # seen, if cancelled
    finished = False
    try:
        await asyncio.wait_for(reading, timeout)
        finished = True
    except TimeoutError:
        pass
    finally:
        if not finished:  # timed out, or the activity was cancelled
            await _stop(proc, supervised)
    if finished and supervised and (failure := _start_failure(status_r, program)):
        return failure
    if finished:
        parts = [f"exit code {proc.returncode}"]
    else:
        parts = [f"timed out after {timeout:g} s (the command and its children were killed)"]
    for label, capture in (("stdout", out), ("stderr", err)):
        if text := capture.text():
            parts.append(f"--- {label} ---\n{text.rstrip(chr(10))}")
    return "\n".join(parts if len(parts) > 1 else [*parts, "(no output)"])


async def _consult(fn: ApproverFunction | None, ctx: Any, call: ApprovalCall) -> Any:
    """The user's own approver (`on_approval`), once the tool's checks let the call through."""
    return None if fn is None else await call_user(fn, ctx, call, what="on_approval")


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
    """A patch that cannot be read, does not apply, or could not be written.

    Attributes:
        nothing_changed: True (the usual case) when every file is as it was before the call. False
            only when writing failed and undoing the files already written failed too; the
            message then says which paths were left in which state.
    """

    def __init__(self, message: str, *, nothing_changed: bool = True) -> None:
        super().__init__(message)
        self.nothing_changed = nothing_changed


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
    """What `apply_patch` did: files `changed`, and those `unchanged` (already patched).

    `left_behind`: backup copies (root-relative) that could not be removed once every file was
    written; the patch itself was applied.
    """

    changed: tuple[FilePatch, ...]
    unchanged: tuple[FilePatch, ...] = ()
    dry_run: bool = False
    left_behind: tuple[str, ...] = ()

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
        if self.left_behind:
            text += f"; could not remove the old files' copies {', '.join(self.left_behind)}"
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


def _check_conflicts(root: Path, patches: Sequence[FilePatch]) -> None:
    """`PatchError` if two sections of one patch would step on each other.

    Each file is planned against the file system as it is, so only the patch as a whole shows
    that one section makes `pkg` a file while another puts `pkg/__init__.py` inside it.
    """
    claimed: dict[Path, FilePatch] = {}
    for patch in patches:
        target = _inside(root, patch.path)
        if (other := claimed.get(target)) is not None:
            raise PatchError(
                f"{other.path} and {patch.path} are the same file "
                f"({target.relative_to(root).as_posix()}); give each file one section"
            )
        claimed[target] = patch
    does = {"create": "creates", "modify": "modifies", "delete": "deletes"}
    for target, patch in claimed.items():
        for folder in target.parents:
            if folder == root:
                break
            if (other := claimed.get(folder)) is not None:
                raise PatchError(
                    f"{patch.path} needs {other.path} to be a folder, but the same patch "
                    f"{does[other.action]} {other.path} as a file; split the patch in two"
                )


@dataclass
class _Change:
    """One file's way through `_write_all`, recorded step by step so that it can be undone."""

    target: Path
    content: str | None  # None: delete the file
    existed: bool  # modified or deleted, not created
    tmp: Path | None = None  # the new content, staged next to the target
    backup: Path | None = None  # a second name for the old file, to restore it from
    moved: bool = False  # the backup is the old file's only name (renamed, not hard-linked)
    done: bool = False  # the target holds the new content, or is gone


def _set_aside(target: Path) -> tuple[Path, bool]:
    """Give the old file a second name next to it; whether it had to be moved there."""
    while True:
        backup = target.with_name(f".{target.name}.{secrets.token_hex(4)}.bak")
        try:
            # A hard link leaves the file in place: readers see the old file or the new one.
            os.link(target, backup)
            return backup, False
        except FileExistsError:
            continue
        except OSError:
            break  # no hard links here (or not allowed): move it instead
    os.rename(target, backup)
    return backup, True


def _make_folders(target: Path, made: list[Path]) -> None:
    missing = []
    folder = target.parent
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder)
        except FileExistsError:
            if not folder.is_dir():
                raise
            continue  # made by someone else meanwhile: not ours to remove
        made.append(folder)


def _stage(change: _Change, made: list[Path]) -> None:
    target, content = change.target, change.content
    assert content is not None
    _make_folders(target, made)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    change.tmp = Path(tmp)
    with open(fd, "w", encoding="utf-8", newline="") as f:
        f.write(content)
    shutil.copymode(target, tmp) if change.existed else os.chmod(tmp, 0o644)


def _commit(change: _Change) -> None:
    target = change.target
    if change.existed:
        change.backup, change.moved = _set_aside(target)
    if change.content is None:
        if not change.moved:
            os.unlink(target)
        change.done = True
        return
    assert change.tmp is not None
    if change.existed:
        os.replace(change.tmp, target)  # atomic: the old file or the new one, never half
        change.tmp, change.done = None, True
        return
    try:
        os.link(change.tmp, target)  # unlike a rename, never over a file that appeared since
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, "it appeared after the patch was checked") from None
    except OSError:
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "it appeared after the patch was checked") from None
        os.replace(change.tmp, target)
        change.tmp, change.done = None, True
        return
    change.done = True
    os.unlink(change.tmp)
    change.tmp = None


def _undo(root: Path, changes: list[_Change], made: list[Path]) -> list[str]:
    """Undo every step taken, newest first; what could not be undone, and where it is."""
    rel = _relative(root)
    left: list[str] = []
    for change in reversed(changes):
        try:
            if change.backup is not None and (change.done or change.moved):
                os.replace(change.backup, change.target)
                change.backup, change.moved, change.done = None, False, False
            elif change.backup is not None:
                # A hard link of a target still in place (renaming one link of a file over
                # another would do nothing): drop the extra name.
                os.unlink(change.backup)
                change.backup = None
            elif change.done:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(change.target)
                change.done = False
        except OSError as exc:
            left.append(_left_state(rel, change, exc))
        if change.tmp is not None:
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(change.tmp)
            except OSError as exc:
                left.append(f"{rel(change.tmp)} (a temporary file) is left ({exc.strerror})")
    for folder in reversed(made):  # deepest first: a folder was made after its parent
        try:
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(folder)
        except OSError as exc:
            left.append(f"{rel(folder)}/ (a folder the patch created) is left ({exc.strerror})")
    return left


def _relative(root: Path) -> Callable[[Path], str]:
    return lambda path: path.relative_to(root).as_posix()


def _left_state(rel: Callable[[Path], str], change: _Change, exc: OSError) -> str:
    why = f" ({exc.strerror or exc})"
    name = rel(change.target)
    if change.backup is None:
        return f"{name} was created and is still there{why}"
    kept = rel(change.backup)
    if not change.done:
        return (
            f"{name} is missing; its old content is in {kept}{why}"
            if change.moved
            else f"{name} is unchanged, with an extra copy in {kept}{why}"
        )
    now = "is deleted" if change.content is None else "has the patch's new content"
    return f"{name} {now}; its old content is in {kept}{why}"


def _write_all(root: Path, writes: Sequence[tuple[Path, str | None, bool]]) -> tuple[str, ...]:
    """Write every file or none; the backups that could not be removed (after success).

    Staging first (new content in temporary files next to their targets, missing folders
    made), then the commit (old files set aside, new ones renamed into place). Any failure,
    expected or not, undoes every step taken; if undoing fails too, `PatchError` says where
    things were left (`nothing_changed=False`).
    """
    rel = _relative(root)
    changes = [_Change(target, content, existed) for target, content, existed in writes]
    made: list[Path] = []
    doing = ""
    try:
        for change in changes:
            if change.content is not None:
                doing = f"write {rel(change.target)}"
                _stage(change, made)
        for change in changes:
            verb = "delete" if change.content is None else "replace" if change.existed else "create"
            doing = f"{verb} {rel(change.target)}"
            _commit(change)
    except BaseException as exc:
        left = _undo(root, changes, made)
        reason = (exc.strerror if isinstance(exc, OSError) else None) or str(exc) or repr(exc)
        if left:
            detail = "; ".join(left)
            message = (
                f"could not {doing} ({reason}), and undoing the files already written failed: "
                f"{detail}; every other file is as it was"
            )
        else:
            message = f"could not {doing} ({reason})"
        if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: still theirs
            exc.add_note(message)
            raise
        raise PatchError(message, nothing_changed=not left) from exc
    leftovers = []
    for change in changes:
        if change.backup is not None:
            try:
                os.unlink(change.backup)
            except OSError:
                leftovers.append(rel(change.backup))
    return tuple(leftovers)


def apply_patch(root: str | os.PathLike[str], text: str, *, dry_run: bool = False) -> PatchResult:
    """Apply a unified diff to the files under `root`: every file, or none.

    Every hunk of every file is checked, and the sections are checked against each other (one
    file twice, a file that another section needs as a folder), before anything is written.
    Writing is a transaction: if any step fails, the steps already taken are undone. A file
    whose changes are already there (the reverse patch applies, e.g. on a retried attempt) is
    left as it is (`unchanged`).

    Args:
        root: The folder the patch's paths are relative to.
        text: The unified diff.
        dry_run: Check everything, write nothing.

    Returns:
        What changed (or would change), and what was already applied.

    Raises:
        PatchError: The patch cannot be read, a file would not apply, or writing failed. Nothing
            was changed unless `nothing_changed` is false (see its message).
    """
    base = Path(root).resolve()
    if not base.is_dir():
        raise PatchError(f"the root {os.fspath(root)!r} is not a directory")
    patches = parse_patch(text)
    _check_conflicts(base, patches)
    writes: list[tuple[Path, str | None, bool]] = []
    changed: list[FilePatch] = []
    unchanged: list[FilePatch] = []
    for patch in patches:
        try:
            writes.append((*_plan_file(base, patch), patch.old_path is not None))
            changed.append(patch)
        except PatchError as forward:
            try:
                _plan_file(base, patch.reversed())
            except PatchError:
                raise forward from None
            unchanged.append(patch)
    left = () if dry_run or not writes else _write_all(base, writes)
    return PatchResult(tuple(changed), tuple(unchanged), dry_run=dry_run, left_behind=left)


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
            if exc.nothing_changed:
                return f"patch not applied: {exc}. Nothing was changed."
            return f"patch failed midway and could not be fully undone: {exc}."

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
