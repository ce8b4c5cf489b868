"""V4A diffs (`hitl.editor.apply_diff`, as the SDK's `agents.apply_diff`) and the hardened
`WorkspaceEditor`: confined to its root, atomic, and a retried operation changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from hitl.editor import ApplyPatchOperation, WorkspaceEditor, apply_diff
from hitl.items import call_output


def test_apply_diff_creates_updates_with_anchors_and_keeps_crlf() -> None:
    assert apply_diff("", "+a\n+b\n", mode="create") == "a\nb"
    src = "def f():\n    return 1\n\ndef g():\n    return 1\n"
    diff = "@@ def g():\n-    return 1\n+    return 2\n"
    assert apply_diff(src, diff) == "def f():\n    return 1\n\ndef g():\n    return 2\n"
    assert apply_diff("a\r\nb\r\n", "@@\n a\n-b\n+c\n") == "a\r\nc\r\n"
    with pytest.raises(ValueError, match="Invalid Context"):
        apply_diff("a\nb\n", "@@\n x\n-b\n+c\n")
    with pytest.raises(ValueError, match="Invalid Add File Line"):
        apply_diff("", "a\n", mode="create")


def test_the_editor_refuses_paths_out_of_its_root_and_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("s")
    (root / "link").symlink_to(tmp_path)
    editor = WorkspaceEditor(root)
    for path in ("../secret.txt", "/etc/passwd", "link/secret.txt", "", "a\0b"):
        result = editor.delete_file(ApplyPatchOperation("delete_file", path))
        assert result.status == "failed", path
    made = editor.create_file(ApplyPatchOperation("create_file", "../x.txt", "+x\n"))
    assert made.status == "failed" and "inside the root" in (made.output or "")
    assert (tmp_path / "secret.txt").exists() and not (tmp_path / "x.txt").exists()


def test_an_operation_already_applied_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "n.txt").write_text("first\nsecond\n")
    editor = WorkspaceEditor(tmp_path)
    op = ApplyPatchOperation("update_file", "n.txt", "@@\n first\n-second\n+SECOND\n")
    assert editor.update_file(op).output == "updated n.txt"
    again = editor.update_file(op)
    assert again.status == "completed" and (again.output or "").startswith("already applied")
    assert (tmp_path / "n.txt").read_text() == "first\nSECOND\n"
    moved = ApplyPatchOperation("update_file", "n.txt", "@@\n-first\n+1st\n", move_to="m/n.txt")
    assert editor.update_file(moved).status == "completed"
    assert not (tmp_path / "n.txt").exists()
    assert (tmp_path / "m" / "n.txt").read_text() == "1st\nSECOND\n"
    assert [p.name for p in (tmp_path / "m").iterdir()] == ["n.txt"], "no temporary files left"


def test_output_items_answer_a_rejection_as_the_sdk_does() -> None:
    assert call_output("shell_call", "c", "no") == {
        "type": "shell_call_output",
        "call_id": "c",
        "output": [{"stdout": "", "stderr": "no", "outcome": {"type": "exit", "exit_code": 1}}],
    }
    assert call_output("apply_patch_call", "p", "no") == {
        "type": "apply_patch_call_output",
        "call_id": "p",
        "status": "failed",
        "output": "no",
    }
    assert call_output(None, "f", "ok") == {
        "type": "function_call_output",
        "call_id": "f",
        "output": "ok",
    }
