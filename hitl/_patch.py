"""Unified diffs: read them, check every hunk, and write every file or none.

`parse_patch` reads `diff -u` / `git diff` text into `FilePatch`es; `apply_patch` checks all of
them against the files (and against each other) before anything is written, then writes as a
transaction that undoes every step taken if one fails. Pure Python: no `patch` binary.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

MAX_HUNK_OFFSET = 100  # lines from its stated place a hunk may be found (an offset, no fuzz)


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
