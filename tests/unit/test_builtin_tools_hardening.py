"""The built-in tools keep their promises under hostile conditions: apply-patch writes every file
or none (sections that collide, a failure at any step of writing, an undo that fails too), and
no process a shell command starts outlives the call (detached children, timeouts, cancellation).
Real files and real processes; only failures are injected."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hitl.shell_tools import PatchError, apply_patch, apply_patch_tool, shell_tool
from hitl.testing import ToolCheck
from tests.helpers import wait_for
from tests.unit.test_shell_tools import alive, diff

# --- apply-patch: every file or none -------------------------------------------------------------


def snapshot(root: Path) -> dict[str, tuple[str, bytes, int]]:
    """Every entry under `root`: its kind, its bytes (or link target) and its mode."""
    found: dict[str, tuple[str, bytes, int]] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            mode = stat.S_IMODE(path.lstat().st_mode)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path).encode(), 0)
            elif path.is_dir():
                found[rel] = ("dir", b"", mode)
            else:
                found[rel] = ("file", path.read_bytes(), mode)
    return found


def create(path: str, text: str) -> str:
    return f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{text}\n"


def delete(path: str, text: str) -> str:
    return f"--- a/{path}\n+++ /dev/null\n@@ -1 +0,0 @@\n-{text}\n"


def modify(path: str, old: str, new: str) -> str:
    return f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n+{new}\n"


async def test_a_file_and_a_folder_of_the_same_name_leave_the_root_as_it_was(
    tmp_path: Path,
) -> None:
    (tmp_path / "keep.txt").write_text("keep\n")
    before = snapshot(tmp_path)
    tool = ToolCheck(apply_patch_tool(root=tmp_path))
    for patch in (
        create("pkg", "x = 1") + create("pkg/__init__.py", "y = 2"),
        create("pkg/__init__.py", "y = 2") + create("pkg", "x = 1"),
    ):
        with pytest.raises(PatchError, match="needs pkg to be a folder, but the same patch"):
            apply_patch(tmp_path, patch)
        assert snapshot(tmp_path) == before
        out = await tool.execute({"patch": patch})
        assert out.startswith("patch not applied: pkg/__init__.py needs pkg to be a folder")
        assert out.endswith("Nothing was changed.")
        assert snapshot(tmp_path) == before, "byte for byte, no folder, no temporary file"


@pytest.mark.parametrize(
    ("patch", "problem"),
    [
        (
            modify("a.txt", "a", "A") + create("a.txt/b.txt", "b"),
            "a.txt/b.txt needs a.txt to be a folder, but the same patch modifies a.txt",
        ),
        (
            delete("old.txt", "old") + create("old.txt/new.txt", "new"),
            "old.txt/new.txt needs old.txt to be a folder, but the same patch deletes old.txt",
        ),
        (
            create("deep/er/x.txt", "x") + create("deep", "d"),
            "deep/er/x.txt needs deep to be a folder, but the same patch creates deep",
        ),
        (
            modify("a.txt", "a", "A") + modify("./a.txt", "a", "B"),
            r"a\.txt and \./a\.txt are the same file \(a\.txt\)",
        ),
        (
            modify("a.txt", "a", "A") + modify("alias.txt", "a", "B"),
            r"a\.txt and alias\.txt are the same file \(a\.txt\)",
        ),
        (
            create("new.txt", "x") + "--- /dev/null\n+++ new.txt\n@@ -0,0 +1 @@\n+y\n",
            "new.txt: give each file one section",  # b/new.txt and new.txt: one path
        ),
    ],
)
def test_sections_that_collide_are_refused_before_anything_is_written(
    tmp_path: Path, patch: str, problem: str
) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    (tmp_path / "old.txt").write_text("old\n")
    (tmp_path / "alias.txt").symlink_to("a.txt")
    before = snapshot(tmp_path)
    with pytest.raises(PatchError, match=problem):
        apply_patch(tmp_path, patch)
    with pytest.raises(PatchError, match=problem):
        apply_patch(tmp_path, patch, dry_run=True)
    assert snapshot(tmp_path) == before


# A patch with every kind of change: two folders to make, a kept mode, a deletion.
FILES = {"a.txt": ("a", 0o755), "b.txt": ("b", 0o600), "gone.txt": ("gone", 0o644)}
MIXED = (
    modify("a.txt", "a", "A")
    + create("new/deep/c.txt", "c")
    + delete("gone.txt", "gone")
    + modify("b.txt", "b", "B")
    + create("top.txt", "top")
)
FAILING = ("replace", "rename", "link", "unlink", "mkdir", "rmdir", "chmod")


def fresh(root: Path) -> Path:
    root.mkdir()
    for name, (text, mode) in FILES.items():
        (root / name).write_text(f"{text}\n")
        (root / name).chmod(mode)
    return root


@contextlib.contextmanager
def fail_once(monkeypatch: pytest.MonkeyPatch, at: int) -> Iterator[list[str]]:
    """The `at`-th call of any of `FAILING` raises ENOSPC; the list names the call, once made."""
    calls, failed = [0], []

    def wrap(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if calls[0] == at:
                failed.append(f"os.{name}{args}")
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(*args, **kwargs)

        return call

    with monkeypatch.context() as patched:
        for name in FAILING:
            patched.setattr(os, name, wrap(name, getattr(os, name)))
        yield failed


@pytest.mark.parametrize("hard_links", [True, False], ids=["hard-links", "no-hard-links"])
def test_a_failure_at_any_step_of_writing_leaves_every_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hard_links: bool
) -> None:
    expected = fresh(tmp_path / "expected")
    apply_patch(expected, MIXED)
    after = snapshot(expected)
    if not hard_links:  # a file system without them: old files are moved aside instead
        monkeypatch.setattr(os, "link", lambda *a, **k: (_ for _ in ()).throw(PermissionError()))
    outcomes = []
    for at in range(1, 200):
        root = fresh(tmp_path / f"fail-at-{at}")
        before = snapshot(root)
        with fail_once(monkeypatch, at) as failed:
            try:
                result, error = apply_patch(root, MIXED), None
            except PatchError as exc:
                error = exc
        if error is not None:
            assert failed, f"only the injected failure fails the patch ({error})"
            assert error.nothing_changed and str(error).startswith("could not ")
            assert "No space left on device" in str(error)
            assert snapshot(root) == before, f"{failed[0]}: not every step was undone"
            outcomes.append("undone")
            continue
        now = snapshot(root)
        # A backup that could not be removed after every file was written is reported.
        assert set(now) - set(after) == set(result.left_behind)
        assert {k: v for k, v in now.items() if k in after} == after
        assert [f.path for f in result.changed] == [
            "a.txt",
            "new/deep/c.txt",
            "gone.txt",
            "b.txt",
            "top.txt",
        ]
        if not failed:
            break
        outcomes.append("left a backup" if result.left_behind else "absorbed")
    else:
        raise AssertionError("the patch never ran out of steps to fail")
    assert outcomes.count("undone") >= 10, outcomes  # every step of staging and committing


async def test_a_failing_commit_is_undone_and_the_tool_says_nothing_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = fresh(tmp_path / "root")
    before = snapshot(root)
    real, calls = os.replace, []

    def second_fails(src: Any, dst: Any) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", second_fails)
    out = await ToolCheck(apply_patch_tool(root=root)).execute({"patch": MIXED})
    assert out == "patch not applied: could not replace b.txt (Input/output error). " + (
        "Nothing was changed."
    )
    assert len(calls) >= 3, "a.txt was replaced, then put back"
    assert snapshot(root) == before


async def test_when_undoing_fails_too_the_error_says_what_was_left_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = fresh(tmp_path / "root")
    patch = modify("a.txt", "a", "A") + modify("b.txt", "b", "B")
    real, calls = os.replace, []

    def commit_and_undo_fail(src: Any, dst: Any) -> None:
        calls.append(dst)
        if len(calls) in (2, 3):  # b.txt's commit, then a.txt's restore
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", commit_and_undo_fail)
    with pytest.raises(PatchError) as failed:
        apply_patch(root, patch)
    message = str(failed.value)
    assert not failed.value.nothing_changed
    found = re.search(
        r"a\.txt has the patch's new content; its old content is in (\S+\.bak) ", message
    )
    assert found, message
    assert message.startswith("could not replace b.txt (Input/output error), and undoing")
    assert message.endswith("every other file is as it was")
    # What the message says is what the disk holds.
    assert (root / "a.txt").read_text() == "A\n"
    assert (root / found[1]).read_text() == "a\n"
    assert (root / "b.txt").read_text() == "b\n"
    assert set(snapshot(root)) == {*FILES, found[1]}, "no other file left behind"

    # The tool does not tell the model that nothing changed.
    (root / "a.txt").write_text("a\n")
    (root / found[1]).unlink()
    calls.clear()
    out = await ToolCheck(apply_patch_tool(root=root)).execute({"patch": patch})
    assert out.startswith("patch failed midway and could not be fully undone: could not replace")
    assert "a.txt has the patch's new content" in out and "Nothing was changed" not in out


def test_a_dotdot_path_is_refused_even_when_it_resolves_inside_the_root(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "x.txt").write_text("x\n")
    before = snapshot(tmp_path)
    for path, patch in {
        "sub/../new.txt": create("sub/../new.txt", "new"),
        "sub/../x.txt": modify("sub/../x.txt", "x", "X"),
    }.items():
        # `sub/../x.txt` is `x.txt`: only the `..` rule refuses it, not the resolved path.
        with pytest.raises(PatchError) as refused:
            apply_patch(tmp_path, patch)
        assert str(refused.value) == f"{path!r}: paths must be relative and stay inside the root"
        assert snapshot(tmp_path) == before


async def test_a_patch_that_creates_modifies_and_deletes_reports_exactly_that(
    tmp_path: Path,
) -> None:
    root = fresh(tmp_path / "root")
    patch = (
        diff("a.txt", "a\n", "A\nmore\n")
        + create("new/c.txt", "c")
        + delete("gone.txt", "gone")
        + create("top.txt", "top")
    )
    out = await ToolCheck(apply_patch_tool(root=root)).execute({"patch": patch})
    assert out == (
        "applied the patch: modified a.txt (+2 -1), created new/c.txt (+1 -0), "
        "deleted gone.txt (+0 -1), created top.txt (+1 -0)"
    )
    now = snapshot(root)
    assert now.pop("new")[0] == "dir"
    assert now == {
        "a.txt": ("file", b"A\nmore\n", 0o755),
        "b.txt": ("file", b"b\n", 0o600),
        "new/c.txt": ("file", b"c\n", 0o644),
        "top.txt": ("file", b"top\n", 0o644),
    }, "exactly these changes: no temporary or backup file is left"


# --- shell: no process outlives the call ---------------------------------------------------------

# Starts a child that leaves the command's process group (`setsid`: a new session, then a
# second fork; `setpgid`: a group of its own) with its stdio closed, writes its pid, sleeps a
# minute; the command then prints, and sleeps for argv[2] seconds if given.
SPAWN = """#!{python}
import os, sys, time
with open("command.pid", "w") as f:
    f.write(str(os.getpid()))
pid = os.fork()
if pid == 0:
    if sys.argv[1] == "setsid":
        os.setsid()
        if os.fork():
            os._exit(0)
    else:
        os.setpgid(0, 0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    with open("child.tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename("child.tmp", "child.pid")
    time.sleep(60)
    os._exit(0)
if sys.argv[1] == "setsid":
    os.waitpid(pid, 0)
while not os.path.exists("child.pid"):
    time.sleep(0.01)
print("started", flush=True)
if len(sys.argv) > 2:
    time.sleep(float(sys.argv[2]))
"""


@pytest.fixture
def spawner(tmp_path: Path) -> Iterator[dict[str, str]]:
    """`env=` for a shell tool with the `spawn` program first on its PATH; kills what is left."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "spawn").write_text(SPAWN.format(python=sys.executable))
    (folder / "spawn").chmod(0o755)
    yield {"PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', os.defpath)}"}
    for name in ("command.pid", "child.pid"):  # survivors of a failed test
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int((tmp_path / name).read_text()), signal.SIGKILL)


def pids(folder: Path) -> list[int]:
    return [int((folder / name).read_text()) for name in ("command.pid", "child.pid")]


@pytest.mark.parametrize("how", ["setsid", "setpgid"])
async def test_a_detached_child_does_not_outlive_the_command(
    tmp_path: Path, spawner: dict[str, str], how: str
) -> None:
    tool = shell_tool(cwd=tmp_path, allowed_commands=["spawn"], env=spawner, timeout=30)
    started = time.monotonic()
    out = await ToolCheck(tool).execute({"command": f"spawn {how}"})
    assert time.monotonic() - started < 20, "the call returns when the command exits"
    assert out == "exit code 0\n--- stdout ---\nstarted"
    child = pids(tmp_path)[1]
    await wait_for(lambda: not alive(child), 5, f"the detached child {child} to be killed")


async def test_a_background_child_holding_the_output_ends_with_the_command(
    tmp_path: Path,
) -> None:
    tool = shell_tool(cwd=tmp_path, allowed_commands=["sh"], timeout=20)
    started = time.monotonic()
    out = await ToolCheck(tool).execute({"command": "sh -c 'sleep 60 & echo $! > bg.pid'"})
    assert time.monotonic() - started < 10, "not held until the timeout by the child's stdout"
    assert out == "exit code 0\n(no output)"
    child = int((tmp_path / "bg.pid").read_text())
    await wait_for(lambda: not alive(child), 5, "the background child to be killed")


async def test_a_timeout_kills_the_whole_tree_detached_children_included(
    tmp_path: Path, spawner: dict[str, str]
) -> None:
    tool = shell_tool(cwd=tmp_path, allowed_commands=["spawn"], env=spawner, timeout=3)
    started = time.monotonic()
    out = await ToolCheck(tool).execute({"command": "spawn setsid 60"})
    assert time.monotonic() - started < 20
    assert out == (
        "timed out after 3 s (the command and its children were killed)\n--- stdout ---\nstarted"
    )
    for pid in pids(tmp_path):
        await wait_for(lambda pid=pid: not alive(pid), 5, f"process {pid} to be killed")


async def test_a_cancelled_call_kills_the_whole_tree(
    tmp_path: Path, spawner: dict[str, str]
) -> None:
    tool = shell_tool(cwd=tmp_path, allowed_commands=["spawn"], env=spawner, timeout=60)
    call = asyncio.create_task(ToolCheck(tool).execute({"command": "spawn setsid 60"}))
    await wait_for(lambda: (tmp_path / "child.pid").exists(), 10, "the detached child")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    for pid in pids(tmp_path):
        await wait_for(lambda pid=pid: not alive(pid), 5, f"process {pid} to be killed")


async def test_the_command_reads_as_if_it_ran_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit codes, deaths by signal, start failures and the environment: as without a wrapper."""
    monkeypatch.delenv("LANG", raising=False)  # a C locale, which Python itself would coerce
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/not-executable").write_text("#!/bin/sh\n")
    path = f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', os.defpath)}"
    names = ["sh", "env", "not-executable", "no-such-program-hitl"]
    check = ToolCheck(
        shell_tool(cwd=tmp_path, allowed_commands=names, env={"PATH": path, "EXTRA_VAR": "1"})
    )
    assert await check.execute({"command": "sh -c 'exit 3'"}) == "exit code 3\n(no output)"
    assert await check.execute({"command": "sh -c 'kill -9 $$'"}) == "exit code -9\n(no output)"
    assert await check.execute({"command": "not-executable"}) == (
        "could not start 'not-executable': Permission denied"
    )
    assert (await check.execute({"command": "no-such-program-hitl"})).startswith(
        "refused: 'no-such-program-hitl' is not installed on the worker"
    )
    listed = (await check.execute({"command": "env"})).split("\n")[2:]
    assert {line.split("=", 1)[0] for line in listed} == {
        "PATH",
        "EXTRA_VAR",
        *(["HOME"] if "HOME" in os.environ else []),
    }
    assert f"PATH={path}" in listed


async def test_a_worker_that_dies_takes_the_whole_tree_with_it(
    tmp_path: Path, spawner: dict[str, str]
) -> None:
    """SIGKILL to the worker: its supervisor still kills the command and the detached child."""
    worker_code = (
        "import asyncio, sys\n"
        "from hitl.shell_tools import shell_tool\n"
        "from hitl.testing import ToolCheck\n"
        "env = {'PATH': sys.argv[2]}\n"
        "tool = shell_tool(cwd=sys.argv[1], allowed_commands=['spawn'], env=env)\n"
        "asyncio.run(ToolCheck(tool).execute({'command': 'spawn setsid 60'}))\n"
    )
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", worker_code, str(tmp_path), spawner["PATH"], cwd=Path.cwd()
    )
    try:
        await wait_for(lambda: (tmp_path / "child.pid").exists(), 30, "the detached child")
    finally:
        worker.kill()
        await worker.wait()
    for pid in pids(tmp_path):
        await wait_for(lambda pid=pid: not alive(pid), 5, f"process {pid} to be killed")
