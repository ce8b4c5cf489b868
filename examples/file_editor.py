"""File editor: an agent that edits text files, with a unified-diff preview before each write.

The two-phase tool of the Scripting app: `write_file`'s approval request renders the diff the
person approves (no side effects), and the write happens only when the primary button was
confirmed (`action.primary_confirmed`). A rejected write tells the model, in the tool's own
words, that nothing was written.

Files live under `HITL_WORKSPACE` (default `.hitl/workspace`); paths cannot escape it.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Any

from hitl import (
    Agent,
    ApprovalRequest,
    ModelReply,
    ModelRequest,
    ScriptedModel,
    UserAction,
    function_tool,
)


def workspace() -> Path:
    """The folder the agent may edit."""
    root = Path(os.environ.get("HITL_WORKSPACE", ".hitl/workspace")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return root


def resolve(path: str) -> Path:
    """A path inside the workspace (refuses `..` and absolute escapes)."""
    target = (workspace() / path).resolve()
    if workspace() not in target.parents and target != workspace():
        raise ValueError(f"{path!r} is outside the workspace")
    return target


@function_tool
def read_file(path: str) -> str:
    """Read a text file from the workspace.

    Args:
        path: Path relative to the workspace.
    """
    target = resolve(path)
    return target.read_text() if target.exists() else ""


def write_request(params: dict[str, Any]) -> ApprovalRequest:
    """Render the diff a person approves (reads only; writes nothing)."""
    target = resolve(params["path"])
    current = target.read_text() if target.exists() else ""
    diff = "".join(
        difflib.unified_diff(
            current.splitlines(keepends=True),
            str(params["content"]).splitlines(keepends=True),
            fromfile=f"a/{params['path']}",
            tofile=f"b/{params['path']}",
        )
    )
    verb = "modify" if target.exists() else "create"
    return ApprovalRequest(
        title=f"Edit {params['path']}",
        message=f"The assistant wants to {verb} {params['path']} in the workspace.",
        preview=diff or "(no changes)",
        preview_label="Diff",
        primary_label="Apply changes",
        secondary_label="Cancel",
    )


# called_on_rejection: a cancelled edit reaches the tool (primary_confirmed=False), which tells
# the model in its own words that the file was not changed.
@function_tool(needs_approval=True, approval_request=write_request, called_on_rejection=True)
def write_file(path: str, content: str, action: UserAction) -> str:
    """Write a text file in the workspace (replaces its content).

    Args:
        path: Path relative to the workspace.
        content: The complete new content.
    """
    if not action.primary_confirmed:
        return f"The user cancelled the edit of {path}; the file was not changed."
    target = resolve(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    return f"Wrote {len(content)} characters to {path}."


def editor_script(req: ModelRequest) -> ModelReply:
    """Offline stand-in: 'In notes.txt, replace "a" with "b"' -> read, then write."""
    text = req.last_user_text()
    match = re.search(r"[Ii]n (\S+), replace \"(.*?)\" with \"(.*?)\"", text)
    if not match:
        return ModelReply.say('Say: In <file>, replace "old" with "new".')
    path, old, new = match.groups()
    reads = req.results_for("read_file")
    writes = req.results_for("write_file")
    if not reads:
        return ModelReply.call("read_file", {"path": path})
    if not writes:
        current = reads[0].output or ""
        return ModelReply.call("write_file", {"path": path, "content": current.replace(old, new)})
    return ModelReply.say(writes[0].output or "")


agent: Agent[Any] = Agent(
    name="File editor",
    instructions="Edit files in the workspace as asked. Read a file before writing it.",
    tools=[read_file, write_file],
    model=os.environ.get("HITL_FILE_EDITOR_MODEL")
    or ScriptedModel(editor_script, "examples.file_editor"),
)
