"""The built-in shell and apply-patch tools inside real runs (dev server): the command or the
diff is what the person approves, a refused command never reaches a person, and a rejected
patch writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.client import Client

from hitl import Agent, ModelReply, ModelRequest, Runner, ScriptedModel
from hitl.approval import ToolApproved
from hitl.shell_tools import apply_patch_tool, shell_tool
from tests.helpers import history, serving, tool_activity_count

PATCH = """--- a/notes.txt
+++ b/notes.txt
@@ -1,2 +1,2 @@
 first
-second
+SECOND
"""


def calls(*steps: tuple[str, dict[str, Any]]) -> ScriptedModel:
    """A model that makes the given calls in order, then repeats the last output."""

    def script(req: ModelRequest) -> ModelReply:
        done = req.tool_results()
        if len(done) < len(steps):
            return ModelReply.call(*steps[len(done)])
        return ModelReply.say("\n".join(r.output or "" for r in done))

    return ScriptedModel(script, "tests.builtin")


async def test_a_command_runs_after_approval_and_a_refused_one_asks_nobody(
    dev_client: Client, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("hello")
    shell = shell_tool(cwd=tmp_path, allowed_commands=["cat"])
    agent = Agent(
        "Shell desk",
        tools=[shell],
        model=calls(("shell", {"command": "rm a.txt"}), ("shell", {"command": "cat a.txt"})),
    )
    async with serving(dev_client, agent) as tq:
        result = await Runner.run(agent, "go", client=dev_client, task_queue=tq, serve=False)
        # `rm` is off the allow-list: refused while planning, so only `cat` waits for a person.
        [item] = result.interruptions
        assert item.request is not None and item.request.preview is not None
        assert item.request.preview.endswith("$ cat a.txt")
        state = result.to_state()
        state.approve(item, approver="ops")
        result = await Runner.run(agent, state, client=dev_client, task_queue=tq, serve=False)
        hist = await history(dev_client.get_workflow_handle(result.workflow_id))
    assert "refused: 'rm' is not an allowed command" in str(result.final_output)
    assert "exit code 0" in str(result.final_output) and "hello" in str(result.final_output)
    assert (tmp_path / "a.txt").exists()
    assert tool_activity_count(hist, "shell") == 1, "the refused command ran no tool activity"
    refused = [d for d in result.decisions if d.kind == "reject"]
    assert [d.approver for d in refused] == ["policy:shell_tool[shell]"]


async def test_the_diff_is_the_preview_and_on_approval_can_decide(
    dev_client: Client, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("first\nsecond\n")

    def small_patches(ctx: Any, call: Any) -> ToolApproved | None:
        return ToolApproved(reason="one line") if call.params["patch"].count("\n+") <= 2 else None

    agent = Agent(
        "Patch desk",
        tools=[apply_patch_tool(root=tmp_path, on_approval=small_patches)],
        model=calls(("apply_patch", {"patch": PATCH})),
    )
    async with serving(dev_client, agent) as tq:
        result = await Runner.run(agent, "go", client=dev_client, task_queue=tq, serve=False)
    assert result.interruptions == [], "on_approval approved it without a pause"
    assert (tmp_path / "notes.txt").read_text() == "first\nSECOND\n"
    [decision] = result.decisions
    assert (decision.kind, decision.source) == ("approve", "policy")

    # Without a callback, a person sees the diff itself, and a rejection writes nothing.
    (tmp_path / "notes.txt").write_text("first\nsecond\n")
    agent = Agent(
        "Patch desk 2",
        tools=[apply_patch_tool(root=tmp_path)],
        model=calls(("apply_patch", {"patch": PATCH})),
    )
    async with serving(dev_client, agent) as tq:
        result = await Runner.run(agent, "go", client=dev_client, task_queue=tq, serve=False)
        [item] = result.interruptions
        assert item.request is not None and item.request.preview_label == "Diff"
        assert "-second\n+SECOND" in (item.request.preview or "")
        state = result.to_state()
        state.reject(item, message="Keep it lower case.", approver="ops")
        result = await Runner.run(agent, state, client=dev_client, task_queue=tq, serve=False)
    assert "Keep it lower case." in str(result.final_output)
    assert (tmp_path / "notes.txt").read_text() == "first\nsecond\n"
