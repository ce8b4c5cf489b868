"""An `apply_patch_call` carrying `operations` (a list, as some Responses versions send and the
SDK reads) instead of one `operation`: the whole list is one call, approved once (a predicate
asks about each operation: any yes asks a person), and applied all or none. Hostile lists (too
many, a path out of the root, one bad operation among good ones, one file twice) are refused
before anyone is asked, and change nothing; an editor that cannot apply a list as one is
refused it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from hitl import (
    Agent,
    ApplyPatchOperation,
    ApplyPatchResult,
    ApplyPatchTool,
    RunConfig,
    RunContextWrapper,
    Runner,
)
from hitl.editor import WorkspaceEditor
from tests.helpers import history, serving, tool_activity_count
from tests.workflows.test_sdk_shell_patch import UPDATE, opts, script


def patch_list(call_id: str, *operations: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "apply_patch_call",
        "id": f"ap_{call_id}",
        "call_id": call_id,
        "operations": list(operations),
        "status": "completed",
    }


def create(path: str, text: str = "one") -> dict[str, Any]:
    return {"type": "create_file", "path": path, "diff": f"+{text}\n"}


def update(path: str, diff: str = UPDATE) -> dict[str, Any]:
    return {"type": "update_file", "path": path, "diff": diff}


def delete(path: str) -> dict[str, Any]:
    return {"type": "delete_file", "path": path}


def files(root: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(root.iterdir())}


async def test_a_list_of_operations_is_one_call_approved_once_and_applied_together(
    ts_env: WorkflowEnvironment, cache_size: int, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("first\nsecond\n")
    (tmp_path / "old.txt").write_text("bye\n")
    asked: list[str] = []

    def deletes(ctx: RunContextWrapper[Any], op: ApplyPatchOperation, call_id: str) -> bool:
        asked.append(f"{op.type}:{op.path}")
        return op.type == "delete_file"

    tool = ApplyPatchTool(editor=WorkspaceEditor(tmp_path), needs_approval=deletes)
    ops = [create("new.txt"), update("notes.txt"), delete("old.txt")]
    agent = Agent("Lists", tools=[tool], model=script("list", patch_list("p1", *ops)))
    async with serving(ts_env.client, agent, cache=cache_size) as tq:
        paused = await Runner.run(agent, "go", **opts(ts_env.client, tq))
        [item] = paused.interruptions
        assert item.raw_item["operations"] == ops
        assert item.request is not None and item.request.title == "Change 3 files"
        assert "- Delete old.txt" in item.request.message
        assert "*** Update File: notes.txt\n@@" in (item.request.preview or "")
        assert files(tmp_path) == {"notes.txt": "first\nsecond\n", "old.txt": "bye\n"}
        state = paused.to_state()
        state.approve(item)
        done = await Runner.run(agent, state, **opts(ts_env.client, tq))
        hist = await history(ts_env.client.get_workflow_handle(done.workflow_id))
    [out] = json.loads(done.final_output)
    assert out == {
        "type": "apply_patch_call_output",
        "call_id": "p1",
        "status": "completed",
        "output": "created new.txt; updated notes.txt; deleted old.txt",
    }
    assert files(tmp_path) == {"new.txt": "one", "notes.txt": "first\nSECOND\n"}
    assert asked[-1] == "delete_file:old.txt", "each operation was asked about"
    assert tool_activity_count(hist, "apply_patch") == 1, "one call, one activity"


async def test_hostile_lists_are_refused_before_anyone_is_asked_and_change_nothing(
    ts_env: WorkflowEnvironment, cache_size: int, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("first\nsecond\n")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    hostile = [
        patch_list("h1", *[create(f"f{n}.txt") for n in range(21)]),
        patch_list("h2", create("fine.txt"), create("../" + outside.name)),
        patch_list("h3", create("fine.txt"), update("notes.txt", "@@\n nope\n-x\n+y\n")),
        patch_list("h4", update("notes.txt"), delete("notes.txt")),
        patch_list("h5"),
        {"type": "apply_patch_call", "call_id": "h6", "operations": "delete everything"},
        patch_list("h7", create("fine.txt"), {"type": "rename_file", "path": "notes.txt"}),
    ]
    tool = ApplyPatchTool(editor=WorkspaceEditor(tmp_path), needs_approval=True)
    agent = Agent("Hostile lists", tools=[tool], model=script("hostile_lists", *hostile))
    async with serving(ts_env.client, agent, cache=cache_size) as tq:
        patient = RunConfig(max_consecutive_bad_turns=len(hostile) + 1)
        result = await Runner.run(
            agent, "go", max_turns=len(hostile) + 2, run_config=patient, **opts(ts_env.client, tq)
        )
        hist = await history(ts_env.client.get_workflow_handle(result.workflow_id))
    assert not result.interruptions, "no hostile list reached a person"
    answers = json.loads(result.final_output)
    assert [a["call_id"] for a in answers] == [f"h{n}" for n in range(1, 8)]
    assert all(a["status"] == "failed" for a in answers)
    texts = [a.get("output", "") for a in answers]
    assert "at most 20" in texts[0]
    assert "operation 2 of 2" in texts[1] and "stay inside the root" in texts[1]
    assert "operation 2 of 2" in texts[2] and "does not apply" in texts[2]
    assert "one operation per file" in texts[3]
    assert "at least 1" in texts[4]
    assert "operations" in texts[5] and "operations" in texts[6]
    assert tool_activity_count(hist, "apply_patch") == 0
    assert not outside.exists()
    assert files(tmp_path) == {"notes.txt": "first\nsecond\n"}


async def test_a_list_that_fails_when_applied_changes_nothing(
    ts_env: WorkflowEnvironment, cache_size: int, tmp_path: Path
) -> None:
    """No approval, so no check before the tool runs: the editor's transaction still applies
    the list all or none (the second operation's diff does not apply; the first is undone
    before it was ever written)."""
    (tmp_path / "notes.txt").write_text("first\nsecond\n")
    tool = ApplyPatchTool(editor=WorkspaceEditor(tmp_path))
    bad = patch_list("m1", create("fine.txt"), update("notes.txt", "@@\n nope\n-x\n+y\n"))
    agent = Agent("Mixed", tools=[tool], model=script("mixed", bad))
    async with serving(ts_env.client, agent, cache=cache_size) as tq:
        result = await Runner.run(agent, "go", **opts(ts_env.client, tq))
        hist = await history(ts_env.client.get_workflow_handle(result.workflow_id))
    [out] = json.loads(result.final_output)
    assert out["status"] == "failed" and "Nothing was changed" in out["output"]
    assert tool_activity_count(hist, "apply_patch") == 1
    assert files(tmp_path) == {"notes.txt": "first\nsecond\n"}


class OneAtATime:
    """An SDK-style editor: one operation per method call, no transaction over a list."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def create_file(self, op: ApplyPatchOperation) -> ApplyPatchResult:
        self.calls.append(op.path)
        return ApplyPatchResult("completed", f"created {op.path}")

    update_file = delete_file = create_file


async def test_an_editor_without_a_transaction_is_refused_a_list(
    ts_env: WorkflowEnvironment, cache_size: int
) -> None:
    editor = OneAtATime()
    tool = ApplyPatchTool(editor=editor)
    model = script("one_at_a_time", patch_list("o1", create("a.txt"), create("b.txt")))
    agent = Agent("One at a time", tools=[tool], model=model)
    async with serving(ts_env.client, agent, cache=cache_size) as tq:
        result = await Runner.run(agent, "go", **opts(ts_env.client, tq))
    [out] = json.loads(result.final_output)
    assert out["status"] == "failed" and "one operation per call" in out["output"]
    assert editor.calls == []
