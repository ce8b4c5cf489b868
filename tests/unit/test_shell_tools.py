"""`hitl.shell_tools`: the built-in shell and apply-patch tools, tried with `ToolCheck` (no
server): approval policy and previews, real subprocesses, and a pure-Python patch applier."""

from __future__ import annotations

import asyncio
import difflib
import os
import time
from pathlib import Path
from typing import Any

import pytest

from hitl import ApprovalCall, ToolApproved, ToolDenied
from hitl.errors import UserError
from hitl.shell_tools import (
    CommandRefused,
    PatchError,
    apply_patch,
    apply_patch_tool,
    parse_command,
    parse_patch,
    shell_tool,
)
from hitl.testing import ToolCheck
from tests.helpers import process_alive, wait_for


def diff(path: str, old: str, new: str) -> str:
    """A `git diff`-style patch of one file (both sides end with a newline)."""
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
        )
    )


alive = process_alive


# --- shell ---------------------------------------------------------------------------------------


async def test_the_shell_tool_asks_first_and_previews_the_command(tmp_path: Path) -> None:
    tool = shell_tool(cwd=tmp_path, allowed_commands=["ls"])
    check = ToolCheck(tool)
    assert tool.name == "shell" and tool.retry_safe is False and tool.spec().retry_safe is False
    assert tool.params_json_schema["required"] == ["command"]
    assert tool.params_json_schema["additionalProperties"] is False
    assert "ls" in tool.description
    assert await check.needs_approval({"command": "ls -la"})
    request = await check.request({"command": "ls -la"})
    assert request is not None
    assert (request.title, request.preview_label, request.primary_label) == (
        "Run a shell command",
        "Command",
        "Run",
    )
    assert request.preview == f"# in {tmp_path.resolve()}\n$ ls -la"
    refused = await check.request({"command": "rm -rf /"})
    assert refused is not None and "will be refused" in refused.message

    free = shell_tool(cwd=tmp_path, allowed_commands=["ls"], needs_approval=False)
    assert not await ToolCheck(free).needs_approval({"command": "ls"})
    listing_only = shell_tool(
        cwd=tmp_path,
        allowed_commands=["ls", "git"],
        needs_approval=lambda ctx, params, call_id: not params["command"].startswith("ls"),
        retry_safe=True,
    )
    assert listing_only.retry_safe
    assert not await ToolCheck(listing_only).needs_approval({"command": "ls"})
    assert await ToolCheck(listing_only).needs_approval({"command": "git push"})


async def test_a_command_runs_in_cwd_without_a_shell(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("hi\n")
    (tmp_path / "my notes.txt").write_text("spaced out\n")
    check = ToolCheck(shell_tool(cwd=tmp_path, allowed_commands=["ls", "cat"]))
    listing = await check.execute({"command": "ls"})
    assert listing.startswith("exit code 0\n--- stdout ---\n") and "hello.txt" in listing
    quoted = await check.execute({"command": 'cat "my notes.txt"'})
    assert quoted == "exit code 0\n--- stdout ---\nspaced out"
    failed = await check.execute({"command": "cat missing.txt"})
    assert failed.startswith("exit code 1\n--- stderr ---\n") and "missing.txt" in failed


async def test_programs_off_the_allow_list_are_refused_and_do_nothing(tmp_path: Path) -> None:
    victim = tmp_path / "x"
    victim.write_text("keep me")
    check = ToolCheck(shell_tool(cwd=tmp_path, allowed_commands=["ls"]))
    for command, why in [
        ("rm -rf x", "'rm' is not an allowed command (allowed: ls)"),
        ("/bin/rm x", "name the program, not a path"),
        ("./ls x", "name the program, not a path"),
        ("", "the command is empty"),
        ("   ", "the command is empty"),
        ('ls "unclosed', "cannot parse the command"),
    ]:
        out = await check.execute({"command": command})
        assert out.startswith("refused: ") and why in out, (command, out)
    assert victim.read_text() == "keep me"
    nothing = ToolCheck(shell_tool(cwd=tmp_path, allowed_commands=[]))
    assert "(allowed: none)" in await nothing.execute({"command": "ls"})
    with pytest.raises(CommandRefused):
        parse_command("rm x", {"ls"})
    assert parse_command("ls -la 'a b'", {"ls"}) == ["ls", "-la", "a b"]


async def test_shell_syntax_is_plain_text_so_injections_do_nothing(tmp_path: Path) -> None:
    victim = tmp_path / "x"
    victim.write_text("keep me")
    check = ToolCheck(shell_tool(cwd=tmp_path, allowed_commands=["ls", "echo"]))
    chained = await check.execute({"command": "ls; rm x"})
    assert chained.startswith("refused: 'ls;' is not an allowed command")
    assert "no shell runs it" in chained
    substituted = await check.execute({"command": "ls $(rm x)"})
    assert substituted.startswith("exit code 2") and "$(rm" in substituted
    anded = await check.execute({"command": "ls x && rm x"})
    assert anded.startswith("exit code 2")  # `&&` and `rm` are names ls cannot find
    echoed = await check.execute({"command": "echo `rm x` $HOME > out"})
    assert echoed == "exit code 0\n--- stdout ---\n`rm x` $HOME > out"
    assert victim.read_text() == "keep me" and not (tmp_path / "out").exists()


async def test_a_command_over_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    script = "echo $$ > sh.pid; sleep 30 & echo $! > child.pid; echo started; wait"
    tool = shell_tool(cwd=tmp_path, allowed_commands=["sh"], timeout=0.5)
    started = time.monotonic()
    out = await ToolCheck(tool).execute({"command": f"sh -c '{script}'"})
    assert time.monotonic() - started < 20  # not the 30 s the command asked for
    assert out.startswith("timed out after 0.5 s (the command and its children were killed)")
    assert "--- stdout ---\nstarted" in out, "the output so far is kept"
    pids = [int((tmp_path / name).read_text()) for name in ("sh.pid", "child.pid")]
    # SIGKILL is delivered asynchronously: wait for it to be observable.
    await wait_for(
        lambda: not any(alive(pid) for pid in pids), 5, "the background child killed too"
    )

    plain = shell_tool(cwd=tmp_path, allowed_commands=["sleep"], timeout=0.2)
    assert (await ToolCheck(plain).execute({"command": "sleep 30"})).startswith("timed out")


async def test_a_cancelled_call_kills_its_command(tmp_path: Path) -> None:
    """A cancelled activity (the run was cancelled, the worker shuts down) leaves no process."""
    tool = shell_tool(cwd=tmp_path, allowed_commands=["sh"], timeout=60)
    call = asyncio.create_task(
        ToolCheck(tool).execute({"command": "sh -c 'echo $$ > pid; sleep 30'"})
    )
    pidfile = tmp_path / "pid"
    await wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 5, "the command")
    pid = int(pidfile.read_text())
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await wait_for(lambda: not alive(pid), 5, "the cancelled command to be killed")


async def test_output_is_cut_and_the_cut_is_counted(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("a" * 10_000)
    tool = shell_tool(cwd=tmp_path, allowed_commands=["cat"], max_output_chars=100)
    out = await ToolCheck(tool).execute({"command": "cat big.txt"})
    assert out == f"exit code 0\n--- stdout ---\n{'a' * 100}\n[output cut: 9900 more characters]"
    (tmp_path / "small.txt").write_text("b" * 100)
    assert "cut" not in await ToolCheck(tool).execute({"command": "cat small.txt"})


async def test_the_worker_environment_does_not_leak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-123")
    tool = shell_tool(cwd=tmp_path, allowed_commands=["env"], env={"EXTRA_VAR": "1"})
    out = await ToolCheck(tool).execute({"command": "env"})
    assert "EXTRA_VAR=1" in out and "PATH=" in out
    assert "OPENAI_API_KEY" not in out and "sk-secret" not in out


async def test_a_dry_run_runs_nothing(tmp_path: Path) -> None:
    victim = tmp_path / "x"
    victim.write_text("keep me")
    tool = shell_tool(cwd=tmp_path, allowed_commands=["rm"], dry_run=True)
    out = await ToolCheck(tool).execute({"command": "rm x"})
    assert out == f"dry run: would run ['rm', 'x'] in {tmp_path.resolve()}"
    assert victim.exists()
    request = await ToolCheck(tool).request({"command": "rm x"})
    assert request is not None and "dry run" in request.message


async def test_a_missing_program_is_reported(tmp_path: Path) -> None:
    tool = shell_tool(cwd=tmp_path, allowed_commands=["no-such-program-hitl"])
    out = await ToolCheck(tool).execute({"command": "no-such-program-hitl"})
    assert out.startswith("refused: 'no-such-program-hitl' is not installed on the worker")


async def test_on_approval_decides_without_a_person(tmp_path: Path) -> None:
    asked: list[str] = []

    def reviewer(ctx: Any, call: ApprovalCall) -> ToolApproved | ToolDenied | None:
        asked.append(call.params["command"])
        if call.params["command"].startswith("ls"):
            return ToolApproved(reason="read-only")
        if call.params["command"].startswith("cat"):
            return ToolDenied(message="no reading files")
        return None

    tool = shell_tool(cwd=tmp_path, allowed_commands=["ls", "cat", "echo"], on_approval=reviewer)
    check = ToolCheck(tool)
    approved = await check.decide({"command": "ls -la"})
    assert (approved.outcome, approved.source) == ("approved", "policy")
    assert approved.request is not None and approved.request.preview_label == "Command"
    rejected = await check.decide({"command": "cat secrets"})
    assert (rejected.outcome, rejected.message) == ("rejected", "no reading files")
    assert (await check.decide({"command": "echo hi"})).outcome == "waits"
    off_list = await check.decide({"command": "rm -rf x"})
    assert off_list.outcome == "rejected" and "not an allowed command" in (off_list.message or "")
    assert asked == ["ls -la", "cat secrets", "echo hi"], "the allow-list is checked first"
    person = ToolCheck(shell_tool(cwd=tmp_path, allowed_commands=["ls"]))
    assert (await person.decide({"command": "ls"})).outcome == "waits"
    assert (await person.decide({"command": "rm x"})).outcome == "rejected"


def test_the_factories_check_their_configuration(tmp_path: Path) -> None:
    for bad in (
        {"cwd": tmp_path / "missing", "allowed_commands": ["ls"]},
        {"cwd": tmp_path, "allowed_commands": "ls"},
        {"cwd": tmp_path, "allowed_commands": ["/bin/ls"]},
        {"cwd": tmp_path, "allowed_commands": ["ls"], "timeout": 0},
    ):
        with pytest.raises(UserError):
            shell_tool(**bad)
    with pytest.raises(UserError):
        apply_patch_tool(root=tmp_path / "missing")
    with pytest.raises(UserError):
        apply_patch_tool(root=tmp_path, max_patch_bytes=0)


# --- patches -------------------------------------------------------------------------------------

CREATE = "--- /dev/null\n+++ b/sub/dir/new.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n"


def test_a_patch_creates_a_file_and_its_folders(tmp_path: Path) -> None:
    result = apply_patch(tmp_path, CREATE)
    assert (tmp_path / "sub/dir/new.txt").read_text() == "hello\nworld\n"
    assert result.summary() == "applied the patch: created sub/dir/new.txt (+2 -0)"
    assert oct((tmp_path / "sub/dir/new.txt").stat().st_mode & 0o777) == "0o644"


def test_a_patch_modifies_a_file_even_when_its_lines_moved(tmp_path: Path) -> None:
    old = "".join(f"line {i}\n" for i in range(1, 31))
    new = old.replace("line 5\n", "line five\n").replace("line 25\n", "line 25\nextra\n")
    patch = diff("f.txt", old, new)
    target = tmp_path / "f.txt"
    target.write_text("header 1\nheader 2\nheader 3\n" + old)  # three lines above the hunks
    target.chmod(0o755)
    result = apply_patch(tmp_path, patch)
    assert target.read_text() == "header 1\nheader 2\nheader 3\n" + new
    assert result.summary() == "applied the patch: modified f.txt (+2 -1)"
    assert target.stat().st_mode & 0o777 == 0o755, "the file's mode is kept"


def test_a_patch_deletes_a_file_only_when_it_matches(tmp_path: Path) -> None:
    gone = tmp_path / "old.txt"
    gone.write_text("a\nb\n")
    patch = "--- a/old.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n"
    assert apply_patch(tmp_path, patch).summary() == "applied the patch: deleted old.txt (+0 -2)"
    assert not gone.exists()
    gone.write_text("a\nb\nc\n")
    with pytest.raises(PatchError, match="the deletion leaves 1 lines"):
        apply_patch(tmp_path, patch)
    assert gone.read_text() == "a\nb\nc\n"


async def test_every_file_or_none(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    (tmp_path / "b.txt").write_text("red\ngreen\nblue\n")
    good = diff("a.txt", "one\ntwo\nthree\n", "one\n2\nthree\n")
    bad = diff("b.txt", "red\nYELLOW\nblue\n", "red\nyellow\nblue\n")  # b.txt has no YELLOW
    with pytest.raises(PatchError, match=r"b\.txt: hunk 1 .* line 2 is 'green'"):
        apply_patch(tmp_path, good + bad)
    out = await ToolCheck(apply_patch_tool(root=tmp_path)).execute({"patch": good + bad})
    assert out.startswith("patch not applied: b.txt") and out.endswith("Nothing was changed.")
    assert (tmp_path / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert (tmp_path / "b.txt").read_text() == "red\ngreen\nblue\n"


def test_paths_stay_inside_the_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "passwd").symlink_to(outside / "secret.txt")
    escapes = {
        "../x": "--- /dev/null\n+++ b/../x\n@@ -0,0 +1 @@\n+pwned\n",
        "/etc/passwd": "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-root\n+pwned\n",
        "/tmp/abs-hitl-test": "--- /dev/null\n+++ /tmp/abs-hitl-test\n@@ -0,0 +1 @@\n+pwned\n",
        "link/evil.txt": "--- /dev/null\n+++ b/link/evil.txt\n@@ -0,0 +1 @@\n+pwned\n",
        "passwd": "--- a/passwd\n+++ b/passwd\n@@ -1 +1 @@\n-secret\n+pwned\n",
    }
    for path, patch in escapes.items():
        with pytest.raises(PatchError, match=r"(inside|outside) the root") as refused:
            apply_patch(root, patch)
        assert str(refused.value).startswith(repr(path))
    assert not (tmp_path / "x").exists() and not (outside / "evil.txt").exists()
    assert (outside / "secret.txt").read_text() == "secret\n"
    assert not Path("/tmp/abs-hitl-test").exists()


async def test_an_applied_patch_is_recognized_on_a_retry(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    (tmp_path / "gone.txt").write_text("bye\n")
    patch = diff("a.txt", "one\ntwo\nthree\n", "one\n2\nthree\n")
    patch += "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n" + CREATE
    check = ToolCheck(apply_patch_tool(root=tmp_path))
    first = await check.execute({"patch": patch})
    assert first.startswith("applied the patch: modified a.txt (+1 -1), deleted gone.txt")
    again = await check.execute({"patch": patch})
    assert again.startswith("already applied: a.txt, gone.txt, sub/dir/new.txt")
    assert (tmp_path / "a.txt").read_text() == "one\n2\nthree\n"
    assert (tmp_path / "sub/dir/new.txt").read_text() == "hello\nworld\n"
    assert apply_patch(tmp_path, patch).already_applied
    # A crash between two writes: the retry finishes the job.
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    result = apply_patch(tmp_path, patch)
    assert [f.path for f in result.changed] == ["a.txt"] and len(result.unchanged) == 2
    assert (tmp_path / "a.txt").read_text() == "one\n2\nthree\n"


def test_no_newline_at_end_of_file(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("a\nb")
    change = (
        "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n"
        "+c\n\\ No newline at end of file\n"
    )
    apply_patch(tmp_path, change)
    assert target.read_bytes() == b"a\nc"
    add_newline = "--- a/f.txt\n+++ b/f.txt\n@@ -2 +2 @@\n-c\n\\ No newline at end of file\n+c\n"
    apply_patch(tmp_path, add_newline)
    assert target.read_bytes() == b"a\nc\n"
    assert apply_patch(tmp_path, add_newline).already_applied
    stale = "--- a/f.txt\n+++ b/f.txt\n@@ -2 +2 @@\n-c\n\\ No newline at end of file\n+d\n"
    with pytest.raises(PatchError, match="end-of-file newline differs"):
        apply_patch(tmp_path, stale)  # it says c is the last line, without a newline
    assert target.read_bytes() == b"a\nc\n"


async def test_patches_over_the_size_limit_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\n")
    patch = diff("a.txt", "one\n", "x" * 300 + "\n")
    tool = apply_patch_tool(root=tmp_path, max_patch_bytes=200)
    out = await ToolCheck(tool).execute({"patch": patch})
    assert out == f"refused: the patch is {len(patch)} bytes, over the limit of 200"
    assert (tmp_path / "a.txt").read_text() == "one\n"
    assert (await ToolCheck(tool).decide({"patch": patch})).outcome == "rejected"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("please fix the bug", "no file header"),
        ("--- a/x\n+++ b/x\n", "at least one hunk"),
        ("--- a/x\n+++ b/x\n@@ -1 +1 @\n-a\n+b\n", "malformed hunk header"),
        ("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n", "needs 3 old and 3 new lines"),
        ("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+c\n", "outside any hunk"),
        ("--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n", "renames are not supported"),
        ("@@ -1 +1 @@\n-a\n+b\n", "before any"),
        (
            "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-b\n+c\n",
            "one section",
        ),
    ],
)
def test_malformed_patches_are_refused(text: str, problem: str) -> None:
    with pytest.raises(PatchError, match=problem):
        parse_patch(text)


def test_git_headers_and_prefixes(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("a = 1\n")
    git = (
        "Here is the fix:\n\ndiff --git a/x.py b/x.py\nindex 83db48f..bf269f4 100644\n"
        "--- a/x.py\t2024-01-01 00:00:00\n+++ b/x.py\t2024-01-02 00:00:00\n"
        "@@ -1 +1 @@\n-a = 1\n+a = 2\n"
    )
    [patch] = parse_patch(git)
    assert (patch.old_path, patch.new_path, patch.action) == ("x.py", "x.py", "modify")
    apply_patch(tmp_path, git)
    plain = "--- x.py\n+++ x.py\n@@ -1 +1 @@\n-a = 2\n+a = 3\n"  # no a/ b/ prefixes
    apply_patch(tmp_path, plain)
    assert (tmp_path / "x.py").read_text() == "a = 3\n"


async def test_the_patch_request_shows_the_diff_and_the_files(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    patch = diff("a.txt", "one\ntwo\n", "one\n2\n") + CREATE
    tool = apply_patch_tool(root=tmp_path)
    check = ToolCheck(tool)
    assert tool.retry_safe and await check.needs_approval({"patch": patch})
    request = await check.request({"patch": patch})
    assert request is not None
    assert (request.title, request.preview, request.preview_label, request.primary_label) == (
        "Apply a patch to 2 files",
        patch,
        "Diff",
        "Apply",
    )
    assert "- modify a.txt (+1 -1)\n- create sub/dir/new.txt (+2 -0)" in request.message
    assert "refused" not in request.message
    stale = diff("a.txt", "one\nTWO\n", "one\n2\n")
    warned = await check.request({"patch": stale})
    assert warned is not None and "It will be refused" in warned.message
    assert (await check.decide({"patch": patch})).outcome == "waits"
    denied = await check.decide({"patch": stale})
    assert denied.outcome == "rejected" and (denied.message or "").startswith("patch not applied")
    assert (tmp_path / "a.txt").read_text() == "one\ntwo\n", "deciding writes nothing"


async def test_on_approval_and_dry_run_for_patches(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    patch = diff("a.txt", "one\ntwo\n", "one\n2\n")

    def small_edits(ctx: Any, call: ApprovalCall) -> ToolApproved | None:
        return ToolApproved() if len(call.params["patch"]) < 500 else None

    approving = ToolCheck(apply_patch_tool(root=tmp_path, on_approval=small_edits))
    assert (await approving.decide({"patch": patch})).outcome == "approved"
    dry = ToolCheck(apply_patch_tool(root=tmp_path, dry_run=True))
    out = await dry.execute({"patch": patch})
    assert out == "dry run: the patch applies; it would modify a.txt (+1 -1)"
    assert (tmp_path / "a.txt").read_text() == "one\ntwo\n"
    assert apply_patch(tmp_path, patch, dry_run=True).dry_run
    assert (tmp_path / "a.txt").read_text() == "one\ntwo\n"
    assert os.listdir(tmp_path) == ["a.txt"], "no temporary files are left behind"
