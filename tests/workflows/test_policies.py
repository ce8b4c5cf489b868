"""Approval requests, two-key auto-approval, approver callbacks and user actions."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from hitl import (
    Agent,
    ApprovalCall,
    ModelReply,
    ModelRequest,
    RunConfig,
    RunContextWrapper,
    Runner,
    ScriptedModel,
    ToolApproved,
    ToolContext,
    ToolDenied,
    allow,
    function_tool,
)
from hitl.wire import RunStatus
from tests.helpers import Ledger, activity_count, record_effect, serving


def _record(ctx: ToolContext[object], tool: str) -> None:
    import os

    path = os.environ.get("HITL_TEST_LEDGER")
    if path:
        Ledger(Path(path)).record(ctx.idempotency_key, tool, ctx.tool_arguments)


@function_tool(needs_approval=True, auto_approve=True)
def archive(ctx: ToolContext[object], ticket: int) -> str:
    """Archive a ticket (allows auto-approval).

    Args:
        ticket: The ticket.
    """
    record_effect(ctx, "archive")
    return f"archived {ticket}"


@function_tool(needs_approval=True)
def purge(ctx: ToolContext[object], ticket: int) -> str:
    """Purge a ticket (never auto-approved).

    Args:
        ticket: The ticket.
    """
    record_effect(ctx, "purge")
    return f"purged {ticket}"


def both(req: ModelRequest) -> ModelReply:
    if not req.tool_results():
        return ModelReply.calls(("archive", {"ticket": 1}), ("purge", {"ticket": 1}))
    return ModelReply.say(", ".join(r.output or "" for r in req.tool_results()))


housekeeper = Agent(
    name="Housekeeper", tools=[archive, purge], model=ScriptedModel(both, "tests.policy.both")
)


@pytest.mark.parametrize(
    ("preset", "expected_pending"),
    [
        (False, ["archive", "purge"]),  # run key off: both wait (tool key on or off)
        (True, ["purge"]),  # both keys on for archive only
    ],
)
async def test_two_key_auto_approval_truth_table(
    ts_env: WorkflowEnvironment,
    cache_size: int,
    ledger: Ledger,
    preset: bool,
    expected_pending: list[str],
) -> None:
    """The four cases: (run preset, tool flag) in {off,on}^2; only on+on skips the person."""
    async with serving(ts_env.client, housekeeper, cache=cache_size) as tq:
        result = await Runner.run(
            housekeeper,
            "tidy ticket 1",
            run_config=RunConfig(auto_approve=preset),
            client=ts_env.client,
            task_queue=tq,
            serve=False,
        )
        assert sorted(i.name for i in result.interruptions) == expected_pending
        auto = [d for d in result.decisions if d.source == "auto_approval"]
        if preset:
            assert [(d.tool_name, d.kind) for d in auto] == [("archive", "approve")]
            assert [r[1] for r in ledger.rows()] == ["archive"], "auto-approved call ran"
        else:
            assert auto == [] and ledger.count() == 0
        state = result.to_state()
        for item in result.interruptions:
            state.approve(item)
        result = await Runner.run(
            housekeeper, state, client=ts_env.client, task_queue=tq, serve=False
        )
    assert result.final_output == "archived 1, purged 1"


@allow  # a RunConfig names it: workers must allow it (hitl.refs)
def approve_small_purges(ctx: RunContextWrapper[object], call: ApprovalCall) -> object:
    """A run-level approver: small tickets are approved, 13 is refused, others go to a person."""
    ticket = int(call.params["ticket"])
    if ticket == 13:
        return ToolDenied(message="Ticket 13 is under legal hold.", reason="legal hold")
    if ticket < 10:
        return ToolApproved(reason="small ticket")
    return None


def purge_three(req: ModelRequest) -> ModelReply:
    if not req.tool_results():
        return ModelReply.calls(
            ("purge", {"ticket": 5}), ("purge", {"ticket": 13}), ("purge", {"ticket": 42})
        )
    return ModelReply.say(" | ".join(r.output or "" for r in req.tool_results()))


purger = Agent(name="Purger", tools=[purge], model=ScriptedModel(purge_three, "tests.policy.p3"))


async def test_approver_callback_decides_or_defers(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    async with serving(ts_env.client, purger, cache=cache_size) as tq:
        result = await Runner.run(
            purger,
            "purge",
            run_config=RunConfig(approver=approve_small_purges),
            client=ts_env.client,
            task_queue=tq,
            serve=False,
        )
        assert [i.arguments for i in result.interruptions] == ['{"ticket": 42}'], "42 deferred"
        policy = {d.call_id: d for d in result.decisions}
        assert sorted((d.kind, d.reason, d.source) for d in policy.values()) == [
            ("approve", "small ticket", "policy"),
            ("reject", "legal hold", "policy"),
        ]
        assert all(d.approver == "policy:approve_small_purges" for d in policy.values())
        state = result.to_state()
        state.reject(result.interruptions[0], message="Keep 42.")
        result = await Runner.run(purger, state, client=ts_env.client, task_queue=tq, serve=False)
    assert result.final_output == "purged 5 | Ticket 13 is under legal hold. | Keep 42."
    assert [r[2] for r in ledger.rows()] == ['{"ticket": 5}']


def deny_all(ctx: RunContextWrapper[object], call: ApprovalCall) -> ToolDenied:
    return ToolDenied(message=f"{call.tool_name} is disabled by policy.")


@function_tool(needs_approval=True, approver=deny_all)
def wipe(ctx: ToolContext[object]) -> str:
    """Wipe everything."""
    record_effect(ctx, "wipe")
    return "wiped"


def wipe_once(req: ModelRequest) -> ModelReply:
    if not req.tool_results():
        return ModelReply.call("wipe")
    return ModelReply.say(req.tool_results()[0].output or "")


wiper = Agent(name="Wiper", tools=[wipe], model=ScriptedModel(wipe_once, "tests.policy.wipe"))


async def test_tool_level_approver_rejects_without_pausing(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    async with serving(ts_env.client, wiper) as tq:
        result = await Runner.run(wiper, "go", client=ts_env.client, task_queue=tq, serve=False)
    assert result.final_output == "wipe is disabled by policy."
    assert [(d.source, d.approver) for d in result.decisions] == [("policy", "policy:deny_all")]
    hist = await ts_env.client.get_workflow_handle(result.workflow_id).fetch_history()
    assert activity_count(hist, "execute_tool") == 0 and ledger.count() == 0


async def test_file_edit_preview_and_cancelled_action(
    ts_env: WorkflowEnvironment, cache_size: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hitl.examples.file_editor import agent as editor

    monkeypatch.setenv("HITL_WORKSPACE", str(tmp_path))
    (tmp_path / "notes.txt").write_text("hello world\nsecond line\n")
    async with serving(ts_env.client, editor, cache=cache_size) as tq:
        result = await Runner.run(
            editor,
            'In notes.txt, replace "world" with "there"',
            client=ts_env.client,
            task_queue=tq,
            serve=False,
        )
        handle = ts_env.client.get_workflow_handle(result.workflow_id)
        status = await handle.query("status", result_type=RunStatus)
        [pending] = status.pending
        assert pending.request is not None
        assert pending.request.title == "Edit notes.txt"
        assert pending.request.primary_label == "Apply changes"
        assert "-hello world\n+hello there\n" in (pending.request.preview or "")
        assert (tmp_path / "notes.txt").read_text().startswith("hello world"), "nothing written"
        assert result.interruptions[0].request == pending.request, "interruptions carry it too"

        state = result.to_state()
        state.reject(result.interruptions[0])  # no message: the tool words the cancellation
        result = await Runner.run(editor, state, client=ts_env.client, task_queue=tq, serve=False)
    assert (
        result.final_output == "The user cancelled the edit of notes.txt; the file was not changed."
    )
    assert (tmp_path / "notes.txt").read_text() == "hello world\nsecond line\n"
    hist = await ts_env.client.get_workflow_handle(result.workflow_id).fetch_history()
    assert activity_count(hist, "execute_tool") == 1, "only read_file ran as a tool activity"


async def test_file_edit_applies_only_when_approved(
    ts_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hitl.examples.file_editor import agent as editor

    monkeypatch.setenv("HITL_WORKSPACE", str(tmp_path))
    (tmp_path / "notes.txt").write_text("hello world\n")
    async with serving(ts_env.client, editor) as tq:
        result = await Runner.run(
            editor,
            'In notes.txt, replace "hello" with "goodbye"',
            client=ts_env.client,
            task_queue=tq,
            serve=False,
        )
        state = result.to_state()
        state.approve(result.interruptions[0])
        result = await Runner.run(editor, state, client=ts_env.client, task_queue=tq, serve=False)
    assert result.final_output == "Wrote 14 characters to notes.txt."
    assert (tmp_path / "notes.txt").read_text() == "goodbye world\n"


@function_tool(needs_approval=True, approvers=["finance-lead"])
def release_funds(ctx: ToolContext[object], amount: int) -> str:
    """Release funds.

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "release_funds")
    return f"released {amount}"


def release_once(req: ModelRequest) -> ModelReply:
    if not req.tool_results():
        return ModelReply.call("release_funds", {"amount": 900})
    return ModelReply.say(req.tool_results()[0].output or "")


treasurer = Agent(
    name="Treasurer", tools=[release_funds], model=ScriptedModel(release_once, "t.treasurer")
)


async def test_only_listed_approvers_may_decide(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    from hitl import NotAuthorizedError

    async with serving(ts_env.client, treasurer) as tq:
        result = await Runner.run(
            treasurer, "release", client=ts_env.client, task_queue=tq, serve=False
        )
        state = result.to_state()
        state.approve(result.interruptions[0], approver="intern")
        with pytest.raises(NotAuthorizedError, match="may not decide release_funds calls"):
            await Runner.run(treasurer, state, client=ts_env.client, task_queue=tq, serve=False)
        assert ledger.count() == 0
        state = result.to_state()
        state.approve(result.interruptions[0], approver="finance-lead")
        result = await Runner.run(
            treasurer, state, client=ts_env.client, task_queue=tq, serve=False
        )
    assert result.final_output == "released 900"
    assert [d.approver for d in result.decisions] == ["finance-lead"]
