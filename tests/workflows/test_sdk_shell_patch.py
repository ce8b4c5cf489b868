"""`ShellTool` and `ApplyPatchTool` in runs: the Responses `shell_call` / `apply_patch_call`
items from a (scripted) model, the same approval gate as every tool, and the output items the
model is answered with. Every hostile payload is refused before anyone is asked, and changes
nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from hitl import (
    Agent,
    ApplyPatchOperation,
    ApplyPatchTool,
    ModelReply,
    ModelRequest,
    RunConfig,
    RunContextWrapper,
    Runner,
    ScriptedModel,
    ShellTool,
    ToolApprovalItem,
)
from hitl.editor import WorkspaceEditor
from hitl.sdk_tools import AllowListShellExecutor, ShellActionRequest
from tests.helpers import history, serving, tool_activity_count

UPDATE = "@@\n first\n-second\n+SECOND\n"


def shell_call(call_id: str, *commands: str, **action: Any) -> dict[str, Any]:
    return {
        "type": "shell_call",
        "id": f"sh_{call_id}",
        "call_id": call_id,
        "action": {"commands": list(commands), **action},
        "status": "completed",
    }


def patch_call(call_id: str, **operation: Any) -> dict[str, Any]:
    return {
        "type": "apply_patch_call",
        "id": f"ap_{call_id}",
        "call_id": call_id,
        "operation": operation,
        "status": "completed",
    }


def outputs(req: ModelRequest) -> list[dict[str, Any]]:
    return [i for i in req.input if str(i.get("type", "")).endswith("_call_output")]


def script(name: str, *items: dict[str, Any]) -> ScriptedModel:
    """Makes `items` (one call per turn), then answers with every output item it was sent."""

    def fn(req: ModelRequest) -> ModelReply:
        done = outputs(req)
        if len(done) < len(items):
            return ModelReply.raw(items[len(done)])
        return ModelReply.say(json.dumps(done))

    return ScriptedModel(fn, f"tests.sdk_shell_patch.{name}")


def opts(client: Any, tq: str) -> dict[str, Any]:
    return {"client": client, "task_queue": tq, "serve": False}


async def test_a_shell_call_waits_for_a_person_and_is_answered_with_its_output_item(
    ts_env: WorkflowEnvironment, cache_size: int, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    shell = ShellTool(executor=AllowListShellExecutor(tmp_path, ["cat"]), needs_approval=True)
    agent = Agent("Shell desk", tools=[shell], model=script("one", shell_call("c1", "cat a.txt")))
    async with serving(ts_env.client, agent, cache=cache_size) as tq:
        paused = await Runner.run(agent, "go", **opts(ts_env.client, tq))
        [item] = paused.interruptions
        assert item.raw_item["type"] == "shell_call"
        assert item.raw_item["action"]["commands"] == ["cat a.txt"]
        assert item.request is not None and item.request.preview == "$ cat a.txt"
        state = paused.to_state()
        state.approve(item)
        done = await Runner.run(agent, state, **opts(ts_env.client, tq))
    [out] = json.loads(done.final_output)
    assert out["type"] == "shell_call_output" and out["call_id"] == "c1"
    assert out["output"] == [
        {"stdout": "hello\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
    ]
    assert [i["type"] for i in done.to_input_list()[1:3]] == ["shell_call", "shell_call_output"]


async def test_on_approval_approves_or_rejects_without_an_interruption(
    ts_env: WorkflowEnvironment, cache_size: int, tmp_path: Path
) -> None:
    seen: list[list[str]] = []

    def on_approval(ctx: RunContextWrapper[Any], item: ToolApprovalItem) -> dict[str, Any]:
        commands = item.raw_item["action"]["commands"]
        seen.append(commands)
        if "ls" in commands:
            return {"approve": True}
        return {"approve": False, "reason": "no cat today"}

    shell = ShellTool(
        executor=AllowListShellExecutor(tmp_path, ["ls", "cat"]),
        needs_approval=True,
        on_approval=on_approval,
    )
    model = script("auto", shell_call("c1", "ls"), shell_call("c2", "cat x"))
    agent = Agent("Auto desk", tools=[shell], model=model)
    async with serving(ts_env.client, agent, cache=cache_size) as tq:
        result = await Runner.run(agent, "go", **opts(ts_env.client, tq))
        hist = await history(ts_env.client.get_workflow_handle(result.workflow_id))
    assert not result.interruptions
    first, second = json.loads(result.final_output)
    assert first["output"][0]["outcome"] == {"type": "exit", "exit_code": 0}
    # The SDK's answer to a rejected shell call: the reason as stderr, exit code 1.
    assert second["output"] == [
        {"stdout": "", "stderr": "no cat today", "outcome": {"type": "exit", "exit_code": 1}}
    ]
    assert tool_activity_count(hist, "shell") == 1, "the rejected call ran nothing"
    assert [d.approver for d in result.decisions] == ["policy:ShellTool[shell]"] * 2


async def test_a_patch_is_applied_once_approved_and_a_rejection_reaches_the_model(
    ts_env: WorkflowEnvironment, cache_size: int, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("first\nsecond\n")
    asked: list[str] = []

    def risky(ctx: RunContextWrapper[Any], op: ApplyPatchOperation, call_id: str) -> bool:
        asked.append(f"{op.type}:{op.path}")
        return op.type != "create_file"

    tool = ApplyPatchTool(editor=WorkspaceEditor(tmp_path), needs_approval=risky)
    model = script(
        "patch",
        patch_call("p1", type="create_file", path="new.txt", diff="+one\n+two\n"),
        patch_call("p2", type="update_file", path="notes.txt", diff=UPDATE),
        patch_call("p3", type="delete_file", path="notes.txt"),
    )
    agent = Agent("Patch desk", tools=[tool], model=model)
    async with serving(ts_env.client, agent, cache=cache_size) as tq:
        paused = await Runner.run(agent, "go", **opts(ts_env.client, tq))
        [item] = paused.interruptions
        assert item.raw_item["operation"]["path"] == "notes.txt"
        assert item.request is not None and item.request.title == "Update notes.txt"
        assert item.request.preview == UPDATE
        state = paused.to_state()
        state.approve(item)
        paused = await Runner.run(agent, state, **opts(ts_env.client, tq))
        [item] = paused.interruptions
        state = paused.to_state()
        state.reject(item, message="keep the notes")
        done = await Runner.run(agent, state, **opts(ts_env.client, tq))
    created, updated, deleted = json.loads(done.final_output)
    assert created == {
        "type": "apply_patch_call_output",
        "call_id": "p1",
        "status": "completed",
        "output": "created new.txt",
    }
    assert updated["status"] == "completed" and updated["output"] == "updated notes.txt"
    assert deleted == {
        "type": "apply_patch_call_output",
        "call_id": "p3",
        "status": "failed",
        "output": "keep the notes",
    }
    assert (tmp_path / "new.txt").read_text() == "one\ntwo"
    assert (tmp_path / "notes.txt").read_text() == "first\nSECOND\n"
    assert "create_file:new.txt" in asked


async def test_hostile_payloads_are_refused_before_anyone_is_asked_and_change_nothing(
    ts_env: WorkflowEnvironment, cache_size: int, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("first\nsecond\n")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    hostile = [
        patch_call("h1", type="create_file", path="../" + outside.name, diff="+pwned\n"),
        patch_call("h2", type="update_file", path="/etc/passwd", diff=UPDATE),
        patch_call("h3", type="rename_file", path="notes.txt", diff=UPDATE),
        patch_call("h4", type="update_file", path="notes.txt", diff="@@\n nope\n-x\n+y\n"),
        patch_call("h5", type="update_file", path="notes.txt"),
        patch_call("h6", type="create_file", path="big.txt", diff="+" + "x" * 200_000),
        {"type": "apply_patch_call", "call_id": "h7", "operation": "delete everything"},
        shell_call("h8", "rm -rf /"),
        shell_call("h9", *["ls"] * 500),
        {"type": "shell_call", "call_id": "h10", "action": {"commands": "ls"}},
    ]
    patch = ApplyPatchTool(editor=WorkspaceEditor(tmp_path), needs_approval=True)
    shell = ShellTool(executor=AllowListShellExecutor(tmp_path, ["ls"]), needs_approval=True)
    agent = Agent("Hostile", tools=[patch, shell], model=script("hostile", *hostile))
    async with serving(ts_env.client, agent, cache=cache_size) as tq:
        # (Every turn is a mistake of the model's; the run would stop after three in a row.)
        patient = RunConfig(max_consecutive_bad_turns=len(hostile) + 1)
        result = await Runner.run(
            agent, "go", max_turns=len(hostile) + 2, run_config=patient, **opts(ts_env.client, tq)
        )
        hist = await history(ts_env.client.get_workflow_handle(result.workflow_id))
    assert not result.interruptions, "no hostile call reached a person"
    answers = json.loads(result.final_output)
    assert [a["call_id"] for a in answers] == [f"h{n}" for n in range(1, 11)]
    patches, shells = answers[:7], answers[7:]
    assert all(a["status"] == "failed" for a in patches)
    texts = [a.get("output", "") for a in patches]
    assert "stay inside the root" in texts[0] and "stay inside the root" in texts[1]
    assert "operation.type" in texts[2] and "needs a diff" in texts[4]
    assert "does not apply" in texts[3]
    assert "too large" in texts[5]
    assert "operation" in texts[6]
    errors = [a["output"][0] for a in shells]
    assert all(e["outcome"] == {"type": "exit", "exit_code": 1} for e in errors)
    assert "'rm' is not an allowed command" in errors[0]["stderr"]
    assert "at most 20" in errors[1]["stderr"]
    assert "list" in errors[2]["stderr"]
    assert tool_activity_count(hist, "apply_patch") == tool_activity_count(hist, "shell") == 0
    assert not outside.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "first\nsecond\n"


async def test_a_predicate_sees_the_sdk_action_and_a_call_it_frees_runs_at_once(
    ts_env: WorkflowEnvironment, cache_size: int, tmp_path: Path
) -> None:
    seen: list[ShellActionRequest] = []

    async def only_rm(ctx: RunContextWrapper[Any], action: ShellActionRequest, cid: str) -> bool:
        seen.append(action)
        return any(c.startswith("rm") for c in action.commands)

    shell = ShellTool(
        executor=AllowListShellExecutor(tmp_path, ["echo"]),
        needs_approval=only_rm,
    )
    model = script("free", shell_call("c1", "echo hi", "echo there", max_output_length=5))
    agent = Agent("Free", tools=[shell], model=model)
    async with serving(ts_env.client, agent, cache=cache_size) as tq:
        result = await Runner.run(agent, "go", **opts(ts_env.client, tq))
    [out] = json.loads(result.final_output)
    assert [e["stdout"] for e in out["output"]] == ["hi\n", "th"], "5 characters in all"
    assert out["max_output_length"] == 5
    assert seen and seen[0].commands == ["echo hi", "echo there"]
