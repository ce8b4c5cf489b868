"""Running one allowed command line: no shell, and every process it starts ended with it.

`parse_command` is the allow-list: a command line is split into words as a shell would, but no
shell runs it. `run_command` runs it in a new session, on Linux under a small supervisor that
kills every descendant (detached ones included) when the command exits, times out, or the
worker dies; elsewhere, its process group is what can be killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import shlex
import signal
import sys
from asyncio.subprocess import DEVNULL, PIPE
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class CommandRun:
    """What became of one command: its exit code and output, a timeout, or why it did not start.

    Attributes:
        exit_code: The command's exit code (`None`: it timed out or never started).
        stdout: Up to the limit's characters of its standard output (a cut is marked).
        stderr: The same of its standard error.
        timed_out: It was killed, with everything it started, after the timeout.
        failure: Why it could not start (`refused: ... not installed`, `could not start ...`).
    """

    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    failure: str | None = None

    def describe(self, timeout: float) -> str:
        """The text the model reads about it (`shell_tool`'s answer)."""
        if self.failure is not None:
            return self.failure
        if self.timed_out:
            parts = [f"timed out after {timeout:g} s (the command and its children were killed)"]
        else:
            parts = [f"exit code {self.exit_code}"]
        for label, text in (("stdout", self.stdout), ("stderr", self.stderr)):
            if text:
                parts.append(f"--- {label} ---\n{text.rstrip(chr(10))}")
        return "\n".join(parts if len(parts) > 1 else [*parts, "(no output)"])


async def run_command(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float, limit: int
) -> str:
    """Run `argv` in `cwd` with exactly `env`; what the model reads about it.

    Its exit code and output (`limit` characters of each stream), or why it could not start. It
    is stopped after `timeout` seconds, with everything it started.
    """
    return (await execute(argv, cwd, env, timeout, limit)).describe(timeout)


async def execute(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float, limit: int
) -> CommandRun:
    """Run `argv` in `cwd` with exactly `env` (as `run_command`): what became of it."""
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
                why = f"refused: {argv[0]!r} is not installed on the worker (not found on PATH)"
                return CommandRun(None, failure=why)
            return CommandRun(None, failure=f"could not start {argv[0]!r}: {exc.strerror or exc}")
        finally:
            if supervised:
                os.close(status_w)  # the supervisor's copy is left: EOF once it exits
        return await _collect(proc, argv[0], status_r, timeout, limit)
    finally:
        if supervised:
            os.close(status_r)


async def _collect(
    proc: asyncio.subprocess.Process, program: str, status_r: int, timeout: float, limit: int
) -> CommandRun:
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
        return CommandRun(None, failure=failure)
    if not finished:
        return CommandRun(None, out.text(), err.text(), timed_out=True)
    return CommandRun(proc.returncode, out.text(), err.text())
