"""Checks that mutation testing found unguarded, on the time-skipping server.

Each test fails when the check it names is taken out of the code:

- approvals reset when another person edits a four-eyes call (`call.approvals = []` in
  `approvers.apply_edit`);
- an expired call's state is `expired` as the run shows it (`ApprovalBook.expire` and
  `workflows/calls.py`; the book alone is guarded in tests/unit/test_mutation_guards.py);
- at most 100 decisions in one `decide` (`MAX_DECISIONS_PER_UPDATE` in
  `Decisions.read_batch`);
- a notification of an edited four-eyes call holds no arguments (`notices.without_arguments`).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from hitl import (
    Agent,
    CallbackNotifier,
    ModelReply,
    ModelRequest,
    Runner,
    ScriptedModel,
    ToolContext,
    function_tool,
)
from hitl.wire import (
    DecideInput,
    DecisionInput,
    DecisionRecord,
    DecisionRequest,
    NotifyInput,
    RunOutput,
    RunSnapshot,
    RunStatus,
    text_digest,
)
from tests.helpers import (
    Ledger,
    history,
    record_effect,
    serving,
    state_events,
    tool_activity_count,
    wait_for,
)
from tests.workflows.test_invariants import refused_type

FINANCE = ["ann", "bob", "cy"]


@function_tool(needs_approval=True, required_approvals=2, approvers=FINANCE)
def wire(ctx: ToolContext[object], amount: int) -> str:
    """Wire money (two of finance).

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "wire")
    return f"wired ${amount}"


@function_tool(needs_approval=True, approval_timeout=3600)
def hold(ctx: ToolContext[object], order: int) -> str:
    """Hold an order (the approval expires after an hour).

    Args:
        order: The order.
    """
    record_effect(ctx, "hold")
    return f"held {order}"


def wires(req: ModelRequest) -> ModelReply:
    done = req.results_for("wire")
    if not done:
        return ModelReply.call("wire", {"amount": 5000})
    return ModelReply.say(done[0].output or "")


def holds(req: ModelRequest) -> ModelReply:
    done = req.results_for("hold")
    if not done:
        return ModelReply.call("hold", {"order": 7})
    return ModelReply.say(done[0].output or "")


treasury = Agent(name="Guard treasury", tools=[wire], model=ScriptedModel(wires, "t.guard.wire"))
holder = Agent(name="Guard holder", tools=[hold], model=ScriptedModel(holds, "t.guard.hold"))


async def _park(client: Any, tq: str, agent: Agent[Any]) -> tuple[Any, Any]:
    result = await Runner.run(agent, "go", client=client, task_queue=tq, serve=False)
    [item] = result.interruptions
    return client.get_workflow_handle(result.workflow_id, result_type=RunOutput), item


async def _approve(handle: Any, d: DecisionInput) -> DecisionRecord:
    rec: DecisionRecord = await handle.execute_update("approve", d, result_type=DecisionRecord)
    return rec


async def test_another_persons_edit_resets_the_approvals_of_a_four_eyes_call(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, treasury) as tq:
        handle, item = await _park(client, tq, treasury)
        seen = text_digest(item.arguments)
        first = await _approve(handle, DecisionInput(call_id=item.call_id, approver="ann"))
        assert first.still_needed == 1
        edit = DecisionInput(
            call_id=item.call_id, approver="bob", seen_sha256=seen, arguments={"amount": 4000}
        )
        rec = await _approve(handle, edit)
        status: RunStatus = await handle.query("status", result_type=RunStatus)
        [pending] = status.pending
        assert [a.approver for a in pending.approvals] == ["bob"], "ann's was for $5000"
        assert rec.still_needed == 1, "ann's earlier approval does not count"
        assert status.phase == "awaiting_approval" and ledger.count("wire") == 0
        assert tool_activity_count(await history(handle)) == 0
        await _approve(handle, DecisionInput(call_id=item.call_id, approver="ann"))
        out = await handle.result()
    assert out.final_output.endswith("wired $4000") and ledger.count("wire") == 1


async def test_an_expired_call_is_shown_expired(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, holder) as tq:
        handle, _ = await _park(client, tq, holder)
        await ts_env.sleep(timedelta(hours=2))
        out = await handle.result()
        snap: RunSnapshot = await handle.query("snapshot", result_type=RunSnapshot)
    [decision] = out.decisions
    assert (decision.kind, decision.expired, decision.source) == ("expired", True, "deadline")
    assert out.final_output == "Approval for hold expired after 3600s without a decision."
    assert ledger.count("hold") == 0
    assert snap.status.phase == "completed"


async def test_an_expired_call_state_is_expired_while_its_turn_goes_on(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """The call's state, as the `snapshot` query shows it, once its deadline passed."""
    client = ts_env.client
    async with serving(client, two_holds) as tq:
        result = await Runner.run(two_holds, "go", client=client, task_queue=tq, serve=False)
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        short, long = sorted(result.interruptions, key=lambda i: i.name)
        await ts_env.sleep(timedelta(hours=2))
        snap: RunSnapshot = await handle.query("snapshot", result_type=RunSnapshot)
        assert snap.call_states[short.call_id] == "expired"
        assert snap.call_states[long.call_id] == "awaiting_approval"
        await _approve(handle, DecisionInput(call_id=long.call_id, approver="ops"))
        await handle.result()
    assert ledger.count("hold") == 0 and ledger.count("hold_long") == 1


@function_tool(needs_approval=True, approval_timeout=30 * 86400)
def hold_long(ctx: ToolContext[object], order: int) -> str:
    """Hold an order for a month.

    Args:
        order: The order.
    """
    record_effect(ctx, "hold_long")
    return f"held {order} for a month"


def both_holds(req: ModelRequest) -> ModelReply:
    if not req.results_for("hold"):
        return ModelReply.calls(("hold", {"order": 1}), ("hold_long", {"order": 2}))
    return ModelReply.say("done")


two_holds = Agent(
    name="Guard holds", tools=[hold, hold_long], model=ScriptedModel(both_holds, "t.guard.2")
)


async def test_a_decide_with_more_than_a_hundred_decisions_is_refused_and_changes_nothing(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, holder) as tq:
        handle, item = await _park(client, tq, holder)
        before = state_events(await history(handle))
        too_many = DecideInput(
            decisions=[DecisionRequest(kind="approve", call_id=item.call_id)] * 101, wait=False
        )
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await handle.execute_update("decide", too_many)
        assert refused_type(err) == "InvalidDecision"
        assert "101 decisions in one request; the limit is 100" in str(err.value.cause)
        status: RunStatus = await handle.query("status", result_type=RunStatus)
        assert [p.call_id for p in status.pending] == [item.call_id] and status.decisions == []
        assert state_events(await history(handle)) == before, "no decision in history"
        assert ledger.count("hold") == 0
        # A hundred are fine.
        enough = too_many.model_copy(update={"decisions": too_many.decisions[:100]})
        await handle.execute_update("decide", enough)
        await handle.result()
    assert ledger.count("hold") == 1


async def test_the_decided_note_of_an_edited_four_eyes_call_holds_no_arguments(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    heard: list[NotifyInput] = []
    client = ts_env.client
    async with serving(
        client, treasury, notifiers=[CallbackNotifier(heard.append, name="chat")]
    ) as tq:
        handle, item = await _park(client, tq, treasury)
        edit = DecisionInput(
            call_id=item.call_id,
            approver="ann",
            seen_sha256=text_digest(item.arguments),
            arguments={"amount": 4321},
        )
        await _approve(handle, edit)
        await _approve(handle, DecisionInput(call_id=item.call_id, approver="bob"))
        out = await handle.result()
        await wait_for(lambda: any(n.event == "decided" for n in heard), what="the decided note")
    assert out.final_output.endswith("wired $4321")
    [note] = [n for n in heard if n.event == "decided"]
    decision = note.decision
    assert decision is not None and [a.approver for a in decision.approvals] == ["ann", "bob"]
    assert decision.arguments is None and decision.original_arguments is None
    assert [a.arguments for a in decision.approvals] == [None, None]
    dumped = json.dumps([n.model_dump(mode="json") for n in heard])
    assert "amount" not in dumped, "no arguments anywhere in a note"
