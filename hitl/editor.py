"""The apply_patch editor: the SDK's operation format, V4A diffs, and a hardened editor.

An `ApplyPatchTool` hands each `apply_patch_call` operation (`create_file`, `update_file`,
`delete_file`, with a V4A diff) to an editor, as the OpenAI Agents SDK does (`agents.editor`).
`apply_diff` applies a V4A diff to text as the SDK's does. `WorkspaceEditor` is the editor to
use: paths stay inside its root, every operation is checked before anything is written (so
an approver and the person see whether it would apply), a write replaces the file atomically
(`hitl._patch`), and an operation already applied (a retried attempt) changes nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from hitl._patch import PatchError, _inside, _write_all
from hitl.errors import UserError

__all__ = [
    "ApplyDiffMode",
    "ApplyPatchEditor",
    "ApplyPatchOperation",
    "ApplyPatchOperationType",
    "ApplyPatchResult",
    "WorkspaceEditor",
    "apply_diff",
]

ApplyPatchOperationType = Literal["create_file", "update_file", "delete_file"]
ApplyDiffMode = Literal["default", "create"]


@dataclass
class ApplyPatchOperation:
    """One file operation the model asks for (the SDK's `ApplyPatchOperation`).

    Attributes:
        type: `create_file`, `update_file` or `delete_file`.
        path: The file, relative to the editor's root.
        diff: The V4A diff (`create_file`: every line `+`; `update_file`: hunks with context).
        ctx_wrapper: The run's context (the tool's `ToolContext`).
        move_to: For `update_file`: the path the updated file moves to.
    """

    type: ApplyPatchOperationType
    path: str
    diff: str | None = None
    ctx_wrapper: Any = None
    move_to: str | None = None


@dataclass
class ApplyPatchResult:
    """What an editor operation did (the SDK's `ApplyPatchResult`)."""

    status: Literal["completed", "failed"] | None = None
    output: str | None = None


@runtime_checkable
class ApplyPatchEditor(Protocol):
    """An editor applying operations on disk; each method may be sync or async."""

    def create_file(self, operation: ApplyPatchOperation) -> Any:
        """Create `operation.path`; returns `ApplyPatchResult | str | None`."""

    def update_file(self, operation: ApplyPatchOperation) -> Any:
        """Apply `operation.diff` to `operation.path`."""

    def delete_file(self, operation: ApplyPatchOperation) -> Any:
        """Delete `operation.path`."""


# ----------------------------------------------------------------------------- V4A diffs

_END_PATCH = "*** End Patch"
_END_FILE = "*** End of File"
_SECTION_ENDS = (_END_PATCH, "*** Update File:", "*** Delete File:", "*** Add File:")


@dataclass
class _Chunk:
    at: int  # index of the first original line it replaces
    deleted: list[str]
    inserted: list[str]


def apply_diff(input: str, diff: str, mode: ApplyDiffMode = "default") -> str:
    """Apply a V4A diff to `input` (the SDK's `agents.apply_diff`); `ValueError` if it cannot.

    `mode="create"`: the diff is a new file's lines, each starting with `+`. Otherwise hunks of
    ` ` context, `-` removed and `+` added lines, optionally introduced by `@@ <anchor line>`
    and closed by `*** End of File`. Context is matched exactly, then ignoring trailing, then
    surrounding whitespace. CRLF input keeps its line endings.
    """
    source = input if mode != "create" and "\n" in input else diff
    newline = "\r\n" if "\r\n" in source else "\n"
    lines = [line.rstrip("\r") for line in re.split(r"\r?\n", diff)]
    if lines and lines[-1] == "":
        lines.pop()
    if mode == "create":
        out = []
        for line in lines:
            if line.startswith(_SECTION_ENDS):
                break
            if not line.startswith("+"):
                raise ValueError(f"Invalid Add File Line: {line[:200]}")
            out.append(line[1:])
        return newline.join(out)
    text = input.replace("\r\n", "\n").split("\n")
    return _apply_chunks(text, _update_chunks(lines, text), newline)


def _update_chunks(lines: list[str], text: list[str]) -> list[_Chunk]:
    chunks: list[_Chunk] = []
    cursor = i = 0
    while i < len(lines) and not lines[i].startswith((*_SECTION_ENDS, _END_FILE)):
        anchors, headers = [], 0
        while i < len(lines) and (lines[i].startswith("@@ ") or lines[i] == "@@"):
            if lines[i][3:].strip():
                anchors.append(lines[i][3:])
            headers += 1
            i += 1
        if not headers and cursor != 0:
            raise ValueError(f"Invalid Line:\n{lines[i][:200] if i < len(lines) else ''}")
        for n, anchor in enumerate(anchors):
            cursor = _to_anchor(anchor, text, cursor, required=headers > 1, forward=n > 0)
        context, found, i, eof = _read_section(lines, i)
        at = _find(text, context, cursor, eof)
        if at < 0:
            shown = "\n".join(context)[:500]
            raise ValueError(f"Invalid {'EOF ' if eof else ''}Context {cursor}:\n{shown}")
        cursor = at + len(context)
        chunks += [_Chunk(c.at + at, c.deleted, c.inserted) for c in found]
    return chunks


def _to_anchor(anchor: str, text: list[str], cursor: int, required: bool, forward: bool) -> int:
    """The cursor after the line `anchor` names (exactly, else ignoring its whitespace)."""
    norms: Sequence[Callable[[str], str]] = (lambda s: s, str.strip)
    for norm in norms:
        want = norm(anchor)
        if not forward and any(norm(line) == want for line in text[:cursor]):
            return cursor
        for k in range(cursor, len(text)):
            if norm(text[k]) == want:
                return k + 1
    if required:
        raise ValueError(f"Invalid Anchor {cursor}:\n{anchor[:200]}")
    return cursor


def _read_section(lines: list[str], start: int) -> tuple[list[str], list[_Chunk], int, bool]:
    """One hunk's context (old lines), its chunks, where it ends, and whether at end of file."""
    context: list[str] = []
    chunks: list[_Chunk] = []
    deleted: list[str] = []
    inserted: list[str] = []
    mode = "keep"
    i = start
    while i < len(lines):
        raw = lines[i]
        if raw.startswith(("@@", *_SECTION_ENDS, _END_FILE)) or raw == "***":
            break
        if raw.startswith("***"):
            raise ValueError(f"Invalid Line: {raw[:200]}")
        line = raw or " "
        if line[0] not in "+- ":
            raise ValueError(f"Invalid Line: {line[:200]}")
        last, mode = mode, {"+": "add", "-": "delete", " ": "keep"}[line[0]]
        if mode == "keep" and last != "keep" and (deleted or inserted):
            chunks.append(_Chunk(len(context) - len(deleted), deleted, inserted))
            deleted, inserted = [], []
        if mode == "delete":
            deleted.append(line[1:])
            context.append(line[1:])
        elif mode == "add":
            inserted.append(line[1:])
        else:
            context.append(line[1:])
        i += 1
    if deleted or inserted:
        chunks.append(_Chunk(len(context) - len(deleted), deleted, inserted))
    if i < len(lines) and lines[i] == _END_FILE:
        return context, chunks, i + 1, True
    if i == start:
        raise ValueError(f"Nothing in this section: {lines[i][:200] if i < len(lines) else ''}")
    return context, chunks, i, False


def _find(text: list[str], context: list[str], start: int, eof: bool) -> int:
    """Where `context` is in `text` from `start` (at the very end first, for `eof`); else -1."""
    if not context:
        return start
    if eof and (end := _find_from(text, context, max(len(text) - len(context), 0))) >= 0:
        return end
    return _find_from(text, context, start)


def _find_from(text: list[str], context: list[str], start: int) -> int:
    norms: Sequence[Callable[[str], str]] = (lambda s: s, str.rstrip, str.strip)
    for norm in norms:
        want = [norm(line) for line in context]
        for k in range(start, len(text) - len(context) + 1):
            if all(norm(text[k + n]) == w for n, w in enumerate(want)):
                return k
    return -1


def _apply_chunks(text: list[str], chunks: list[_Chunk], newline: str) -> str:
    out: list[str] = []
    cursor = 0
    for chunk in chunks:
        if chunk.at > len(text) or chunk.at < cursor:
            raise ValueError(f"applyDiff: overlapping or misplaced chunk at line {chunk.at + 1}")
        out += text[cursor : chunk.at] + chunk.inserted
        cursor = chunk.at + len(chunk.deleted)
    return newline.join(out + text[cursor:])


def reverse_diff(diff: str) -> str:
    """The V4A diff that undoes `diff` (`+` and `-` lines swapped)."""
    swap = {"+": "-", "-": "+"}
    return "\n".join(
        swap[line[0]] + line[1:] if line[:1] in swap else line for line in diff.split("\n")
    )


# ----------------------------------------------------------------------------- the editor

MAX_PATH_CHARS = 1024


class WorkspaceEditor:
    """The hardened `ApplyPatchEditor`: operations on files under `root`, and nowhere else.

    Every operation is checked whole before anything is written: its paths must be relative
    and stay inside `root` (no `..`, no absolute paths, no symbolic link out), an update's diff
    must apply, a created file must not exist, files must be UTF-8 text within
    `max_file_bytes`. Writes are atomic (a temporary file renamed over the old one; a move
    writes the new file and removes the old as one transaction). An operation whose effect is
    already there (a retried attempt after a worker died) is answered as such and changes
    nothing. Problems are answered as `failed` results, not raised.

    Args:
        root: The folder operations apply to (an existing directory on the worker).
        dry_run: Check operations and say what they would do; write nothing.
        max_file_bytes: Larger files are neither read nor written.
    """

    def __init__(
        self, root: str | os.PathLike[str], *, dry_run: bool = False, max_file_bytes: int = 1 << 20
    ) -> None:
        self.root = Path(root).expanduser().resolve()
        if not self.root.is_dir() or max_file_bytes < 1:
            raise UserError(f"WorkspaceEditor: no directory {os.fspath(root)!r}")
        self.dry_run = dry_run
        self.max_file_bytes = max_file_bytes

    def create_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        """Create a file with the diff's lines."""
        return self._do(operation)

    def update_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        """Apply the diff to a file (and move it, with `move_to`)."""
        return self._do(operation)

    def delete_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        """Delete a file."""
        return self._do(operation)

    def check(self, operation: ApplyPatchOperation) -> str | None:
        """Why the operation would fail, or `None` (nothing is written)."""
        try:
            self._plan(operation)
        except PatchError as exc:
            return str(exc)
        return None

    def check_all(self, operations: Sequence[ApplyPatchOperation]) -> str | None:
        """Why the operations, applied as one, would fail, or `None` (nothing is written)."""
        try:
            self._plan_all(operations)
        except PatchError as exc:
            return str(exc)
        return None

    def apply_all(self, operations: Sequence[ApplyPatchOperation]) -> ApplyPatchResult:
        """Apply every operation or none: all are checked, then written as one transaction."""
        try:
            writes, done = self._plan_all(operations)
            if writes and not self.dry_run:
                _write_all(self.root, writes)
        except PatchError as exc:
            return _failed(exc)
        text = "; ".join(done)
        return ApplyPatchResult("completed", f"dry run: would {text}" if self.dry_run else text)

    def _plan_all(
        self, operations: Sequence[ApplyPatchOperation]
    ) -> tuple[list[tuple[Path, str | None, bool]], list[str]]:
        """Every operation's writes; each file may be touched by one operation only."""
        writes: list[tuple[Path, str | None, bool]] = []
        done: list[str] = []
        touched: dict[Path, int] = {}
        for n, op in enumerate(operations, 1):
            try:
                paths = [self._target(op.path)]
                if op.move_to is not None:
                    paths.append(self._target(op.move_to))
                for path in paths:
                    if touched.setdefault(path, n) != n:
                        raise PatchError(
                            f"operation {touched[path]} touches {op.path} too: "
                            "one operation per file per call"
                        )
                planned, what = self._plan(op)
            except PatchError as exc:
                raise PatchError(f"operation {n} of {len(operations)}: {exc}") from None
            writes += planned
            done.append(what)
        return writes, done

    def _do(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        try:
            writes, done = self._plan(operation)
            if writes and not self.dry_run:
                _write_all(self.root, writes)
        except PatchError as exc:
            return _failed(exc)
        return ApplyPatchResult("completed", f"dry run: would {done}" if self.dry_run else done)

    def _target(self, path: Any) -> Path:
        if not isinstance(path, str) or len(path) > MAX_PATH_CHARS:
            raise PatchError("the path must be a string of at most 1024 characters")
        return _inside(self.root, path)

    def _read(self, target: Path, path: str) -> str:
        if not target.is_file():
            raise PatchError(f"{path} does not exist (or is not a file)")
        if target.stat().st_size > self.max_file_bytes:
            raise PatchError(f"{path} is larger than {self.max_file_bytes} bytes")
        try:
            return target.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise PatchError(f"{path} is not UTF-8 text") from None

    def _sized(self, content: str, path: str) -> str:
        if len(content.encode("utf-8")) > self.max_file_bytes:
            raise PatchError(f"{path} would be larger than {self.max_file_bytes} bytes")
        return content

    def _plan(self, op: ApplyPatchOperation) -> tuple[list[tuple[Path, str | None, bool]], str]:
        """The writes an operation makes (target, content or `None` to delete, existed)."""
        target, path = self._target(op.path), op.path
        if op.type == "delete_file":
            self._read(target, path)
            return [(target, None, True)], f"deleted {path}"
        if not isinstance(op.diff, str):
            raise PatchError(f"{op.type} of {path} needs a diff")
        if op.type == "create_file":
            try:
                content = self._sized(apply_diff("", op.diff, mode="create"), path)
            except ValueError as exc:
                raise PatchError(f"the diff for {path} cannot be read: {exc}") from None
            if target.exists():
                if target.is_file() and self._read(target, path) == content:
                    return [], f"already applied: {path} already has this content"
                raise PatchError(f"{path} already exists")
            return [(target, content, False)], f"created {path}"
        if op.type != "update_file":
            raise PatchError(f"unknown operation {str(op.type)[:40]!r}")
        old = self._read(target, path)
        try:
            new = self._sized(apply_diff(old, op.diff), path)
        except ValueError as exc:
            try:
                apply_diff(old, reverse_diff(op.diff))
            except ValueError:
                raise PatchError(f"the diff does not apply to {path}: {exc}") from None
            if op.move_to is None:
                return [], f"already applied: {path} already has these changes"
            raise PatchError(f"the diff does not apply to {path}: {exc}") from None
        if op.move_to is None or op.move_to == path:
            return [(target, new, True)], f"updated {path}"
        dest = self._target(op.move_to)
        if dest == target or dest.exists():
            raise PatchError(f"cannot move {path} to {op.move_to}: it already exists")
        return [(dest, new, False), (target, None, True)], f"updated {path}, moved to {op.move_to}"


def _failed(exc: PatchError) -> ApplyPatchResult:
    unchanged = " Nothing was changed." if exc.nothing_changed else ""
    return ApplyPatchResult("failed", f"{exc}.{unchanged}")
