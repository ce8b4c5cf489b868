"""Agents with the SDK's `ShellTool` / `ApplyPatchTool`, importable by worker subprocesses
(`--agents tests.sdk_tool_agents:patcher`), and what the ported SDK examples import besides
`hitl` (their `examples.auto_mode` helpers)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from hitl import Agent, ApplyPatchTool, ModelReply, ModelRequest, ScriptedModel
from hitl.editor import ApplyPatchOperation, ApplyPatchResult, WorkspaceEditor


def is_auto_mode() -> bool:
    """Stands in for the SDK examples' `examples.auto_mode.is_auto_mode`: tests never prompt."""
    return True


def confirm_with_fallback(prompt: str, default: bool) -> bool:
    """Stands in for `examples.auto_mode.confirm_with_fallback`: the default, no prompt."""
    return default


# ----------------------------------------------------------------------------- a durable patch

PATCH_ROOT_ENV = "HITL_TEST_PATCH_ROOT"
LEDGER_NAME = ".edits.log"


class CountingEditor(WorkspaceEditor):
    """The hardened editor, counting every update it writes in a ledger file under its root."""

    def update_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        result = super().update_file(operation)
        if result.output and result.output.startswith("updated"):
            with open(self.root / LEDGER_NAME, "a") as ledger:
                ledger.write(f"{os.getpid()} {operation.path}\n")
        return result


def _root() -> Path:
    return Path(os.environ.get(PATCH_ROOT_ENV) or tempfile.gettempdir())


def patch_script(req: ModelRequest) -> ModelReply:
    """Asks to update notes.txt once; then reports what the tool answered."""
    done = [i for i in req.input if i.get("type") == "apply_patch_call_output"]
    if done:
        return ModelReply.say(f"{done[0].get('status')}: {done[0].get('output')}")
    operation: dict[str, Any] = {
        "type": "update_file",
        "path": "notes.txt",
        "diff": "@@\n first\n-second\n+SECOND\n",
    }
    return ModelReply.raw(
        {"type": "apply_patch_call", "call_id": "call_patch_1", "operation": operation}
    )


patcher = Agent(
    name="Durable patcher",
    tools=[
        ApplyPatchTool(
            editor=CountingEditor(_root()), needs_approval=True, description="Edit notes.txt."
        )
    ],
    model=ScriptedModel(patch_script, "tests.sdk_tool_agents.patcher", local_activity=False),
)
