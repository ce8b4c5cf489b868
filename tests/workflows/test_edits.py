"""Edit, then approve: a person fixes a call's arguments instead of rejecting it
(time-skipping server). The refund desk's rule: refunds over $1,000 need two approvers."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest
from pydantic import AfterValidator
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from hitl import Agent, ModelReply, ModelRequest, Runner, ScriptedModel, ToolContext, function_tool
from hitl.wire import (
    DecideInput,
    DecisionInput,
    DecisionRecord,
    DecisionRequest,
    EditPreview,
    RunOutput,
    RunStatus,
)
from tests.helpers import Ledger, record_effect, serving, tool_activity_count
from tests.workflows.test_invariants import refused_type

FINANCE = ["ann", "bob"]


def two_over_a_thousand(ctx: Any, params: dict[str, Any], call_id: str) -> int:
    return 2 if params["amount"] > 1000 else 1


def known_order(order: int) -> int:
    if order <= 0:
        raise ValueError("no such order")
    return order


@function_tool(needs_approval=True, required_approvals=two_over_a_thousand, approvers=FINANCE)
def refund(
    ctx: ToolContext[object],
    order: Annotated[int, AfterValidator(known_order)],
    amount: int,
    note: str | None,
) -> str:
    """Refund an order.

    Args:
        order: The order.
        amount: Dollars.
        note: For the customer.
    """
    record_effect(ctx, "refund")
    return f"refunded ${amount} on order {order}"


@function_tool(needs_approval=True, allow_edits=False)
def close_account(ctx: ToolContext[object], account: str) -> str:
    """Close an account.

    Args:
        account: The account.
    """
    record_effect(ctx, "close_account")
    return f"closed {account}"


def script(req: ModelRequest) -> ModelReply:
    """`refund order:amount` or `close ACCOUNT`, then repeat what the tool said."""
    words = req.last_user_text().split()
    done = req.results_for("refund") + req.results_for("close_account")
    if done:
        return ModelReply.say(done[0].output or "")
    if words[0] == "close":
        return ModelReply.call("close_account", {"account": words[1]})
    order, amount = words[1].split(":")
    return ModelReply.call("refund", {"order": int(order), "amount": int(amount), "note": None})


desk = Agent(
    name="Edit desk", tools=[refund, close_account], model=ScriptedModel(script, "tests.edits")
)


async def _park(client: Any, tq: str, text: str) -> tuple[Any, str]:
    result = await Runner.run(desk, text, client=client, task_queue=tq, serve=False)
    [item] = result.interruptions
    return client.get_workflow_handle(result.workflow_id, result_type=RunOutput), item.call_id


async def _approve(handle: Any, d: DecisionInput) -> DecisionRecord:
    rec: DecisionRecord = await handle.execute_update("approve", d, result_type=DecisionRecord)
    return rec


async def test_an_edited_approval_runs_the_edited_arguments_and_says_so(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, desk) as tq:
        handle, call_id = await _park(client, tq, "refund 7:500")
        edit = DecisionInput(
            call_id=call_id,
            approver="ann",
            reason="the customer paid $400",
            arguments={"order": 7, "amount": 400, "note": "partial refund"},
        )
        first = await _approve(handle, edit)
        again = await _approve(handle, edit)
        out = await handle.result()
    assert first.still_needed == 0 and again == first, "the same edit again is a retry"
    assert json.loads(first.arguments or "") == {
        "order": 7,
        "amount": 400,
        "note": "partial refund",
    }
    assert json.loads(first.original_arguments or "") == {"order": 7, "amount": 500, "note": None}
    [row] = ledger.rows("refund")
    assert json.loads(row[2])["amount"] == 400, "the tool ran with the edited arguments"
    assert ledger.count("refund") == 1
    # The model is told: the output it reads names the editor and the arguments that ran.
    assert out.final_output.startswith("[Before approving, ann edited the arguments")
    assert '"amount":400' in out.final_output and "refunded $400 on order 7" in out.final_output
    [decision] = out.decisions
    assert (decision.arguments, decision.original_arguments) == (
        first.arguments,
        first.original_arguments,
    )


async def test_an_edit_that_crosses_the_limit_needs_the_second_approver(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """$500 needs one approver; edited to $1,500 it needs two: the editor's approval counts as
    one and the call keeps waiting, with the edited arguments shown, for someone else."""
    client = ts_env.client
    async with serving(client, desk) as tq:
        handle, call_id = await _park(client, tq, "refund 8:500")
        edited = {"order": 8, "amount": 1500, "note": None}
        rec = await _approve(
            handle, DecisionInput(call_id=call_id, approver="ann", arguments=edited)
        )
        assert (rec.still_needed, [a.approver for a in rec.approvals]) == (1, ["ann"])
        status = await handle.query("status", result_type=RunStatus)
        [pending] = status.pending
        assert json.loads(pending.arguments) == edited
        assert (pending.required_approvals, status.decisions) == (2, [])
        assert ledger.count() == 0 and tool_activity_count(await handle.fetch_history()) == 0
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await _approve(handle, DecisionInput(call_id=call_id, approver="ann", reason="twice"))
        assert refused_type(err) == "AlreadyDecided", "the editor cannot be the second approver"
        final = await _approve(handle, DecisionInput(call_id=call_id, approver="bob"))
        out = await handle.result()
    assert final.still_needed == 0
    assert [a.approver for a in final.approvals] == ["ann", "bob"]
    [row] = ledger.rows("refund")
    assert json.loads(row[2])["amount"] == 1500
    assert "refunded $1500 on order 8" in out.final_output


async def test_edits_that_cannot_be_taken_are_refused_and_change_nothing(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, desk) as tq:
        handle, call_id = await _park(client, tq, "refund 9:500")
        bad = {
            "a string amount": ({"order": 9, "amount": "lots", "note": None}, "InvalidDecision"),
            "a missing argument": ({"order": 9, "amount": 5}, "InvalidDecision"),
            "an unknown argument": (
                {"order": 9, "amount": 5, "note": None, "to": "me"},
                "InvalidDecision",
            ),
            "a float for an int": ({"order": 9, "amount": 5.5, "note": None}, "InvalidDecision"),
            "an order the tool's own check refuses": (
                {"order": 0, "amount": 5, "note": None},
                "EditRefused",
            ),
        }
        for what, (arguments, expected) in bad.items():
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await _approve(
                    handle, DecisionInput(call_id=call_id, approver="ann", arguments=arguments)
                )
            assert refused_type(err) == expected, what
        # An edit that makes the call need two people cannot come with `always` or without a
        # name: refused before the edit is taken (it once stayed applied).
        over = {"order": 9, "amount": 1500, "note": None}
        for who, always, expected in (
            ("ann", True, "InvalidDecision"),
            (None, False, "NotAuthorized"),
        ):
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await _approve(
                    handle,
                    DecisionInput(call_id=call_id, approver=who, always=always, arguments=over),
                )
            assert refused_type(err) == expected, (who, always)
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await handle.execute_update(
                "reject",
                DecisionInput(
                    call_id=call_id,
                    approver="bob",
                    arguments={"order": 9, "amount": 5, "note": None},
                ),
            )
        assert refused_type(err) == "InvalidDecision", "a rejection carries no edit"
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await handle.execute_update(
                "decide",
                DecideInput(
                    decisions=[
                        DecisionRequest(
                            kind="approve",
                            call_id=call_id,
                            approver="ann",
                            arguments={"order": 9, "amount": 5, "note": None},
                        )
                    ]
                ),
            )
        assert refused_type(err) == "InvalidDecision", "no edits inside a batch"
        await handle.signal(
            "approve",
            DecisionInput(
                call_id=call_id, approver="ann", arguments={"order": 9, "amount": 1, "note": None}
            ),
        )
        status = await handle.query("status", result_type=RunStatus)
        [pending] = status.pending
        assert json.loads(pending.arguments) == {"order": 9, "amount": 500, "note": None}
        assert status.decisions == [] and pending.approvals == []
        assert [r.error_type for r in status.refused] == ["InvalidDecision"], "the signal"

        handle2, call2 = await _park(client, tq, "close acct-1")
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await _approve(handle2, DecisionInput(call_id=call2, arguments={"account": "acct-2"}))
        assert refused_type(err) == "EditsNotAllowed"
        for h in (handle, handle2):
            await h.terminate("test over")
    assert ledger.count() == 0


async def test_a_run_state_approval_can_edit(ts_env: WorkflowEnvironment, ledger: Ledger) -> None:
    client = ts_env.client
    async with serving(client, desk) as tq:
        result = await Runner.run(desk, "refund 3:900", client=client, task_queue=tq, serve=False)
        state = result.to_state()
        [item] = state.get_interruptions()
        state.approve(item, approver="bob", arguments={"order": 3, "amount": 90, "note": None})
        result = await Runner.run(desk, state, client=client, task_queue=tq, serve=False)
    assert "refunded $90 on order 3" in result.final_output
    [decision] = result.decisions
    assert (decision.approver, json.loads(decision.original_arguments or "")["amount"]) == (
        "bob",
        900,
    )


def leads_over_a_thousand(ctx: Any, params: dict[str, Any], call_id: str) -> list[str]:
    return ["lee"] if params["amount"] > 1000 else ["ann", "bob"]


@function_tool(needs_approval=True, approvers=leads_over_a_thousand)
def credit(ctx: ToolContext[object], account: str, amount: int) -> str:
    """Credit an account.

    Args:
        account: The account.
        amount: Dollars.
    """
    record_effect(ctx, "credit")
    return f"credited ${amount} to {account}"


def credit_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("credit")
    if done:
        return ModelReply.say(done[0].output or "")
    return ModelReply.call("credit", {"account": "A-1", "amount": 500})


crediter = Agent(
    name="Credit desk", tools=[credit], model=ScriptedModel(credit_script, "tests.credit")
)


async def test_an_edit_past_a_limit_waits_for_the_higher_approver(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """Approvers named per call: $500 is for ann or bob, over $1,000 for lee only. ann's edit to
    $1,500 is taken, but her approval cannot carry it: it waits for lee."""
    client = ts_env.client
    async with serving(client, crediter) as tq:
        result = await Runner.run(crediter, "credit", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        status = await handle.query("status", result_type=RunStatus)
        assert status.pending[0].approvers == ["ann", "bob"]
        edited = {"account": "A-1", "amount": 1500}
        rec = await _approve(
            handle, DecisionInput(call_id=item.call_id, approver="ann", arguments=edited)
        )
        assert (rec.still_needed, rec.reason) == (1, "edited; now only lee may approve it")
        [pending] = (await handle.query("status", result_type=RunStatus)).pending
        assert (pending.approvers, json.loads(pending.arguments)) == (["lee"], edited)
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await _approve(handle, DecisionInput(call_id=item.call_id, approver="bob"))
        assert refused_type(err) == "NotAuthorized"
        assert ledger.count() == 0
        await _approve(handle, DecisionInput(call_id=item.call_id, approver="lee"))
        out = await handle.result()
    assert "credited $1500 to A-1" in out.final_output
    [decision] = out.decisions
    assert (decision.approver, json.loads(decision.original_arguments or "")["amount"]) == (
        "lee",
        500,
    )


# ----------------------------------------------------------------------------- edit previews


async def _preview(handle: Any, payload: dict[str, Any]) -> EditPreview:
    got: EditPreview = await handle.execute_update("preview_edit", payload, result_type=EditPreview)
    return got


async def test_an_edit_preview_shows_the_edited_call_and_changes_nothing(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """`preview_edit` plans the edited call as approving it would (its checks, how many people
    it needs) and answers; the call, its approvals and history of decisions stay as they were.
    Anything a decision could not do, a preview cannot either."""
    client = ts_env.client
    async with serving(client, desk) as tq:
        handle, call_id = await _park(client, tq, "refund 9:500")
        before: RunStatus = await handle.query("status", result_type=RunStatus)
        seen = before.pending[0].arguments_sha256
        big = {"order": 9, "amount": 1500, "note": None}
        shown = await _preview(
            handle, {"call_id": call_id, "arguments": big, "approver": "ann", "seen_sha256": seen}
        )
        assert shown.refusal is None and shown.required_approvals == 2
        assert json.loads(shown.arguments) == big
        unknown_order = {"order": -1, "amount": 5, "note": None}
        bad = await _preview(
            handle, {"call_id": call_id, "approver": "ann", "arguments": unknown_order}
        )
        assert bad.refusal is not None and "no such order" in bad.refusal
        after: RunStatus = await handle.query("status", result_type=RunStatus)
        assert after.pending == before.pending and after.decisions == []
        refusals = {
            "signed": {"call_id": call_id, "arguments": big, "signature": "x"},  # no signature
            "unknown": {"call_id": "t9.9", "arguments": big, "approver": "ann"},
            "outsider": {"call_id": call_id, "arguments": big, "approver": "eve"},
            "stale": {"call_id": call_id, "arguments": big, "approver": "ann",
                      "seen_sha256": "0" * 64},
            "misfit": {"call_id": call_id, "arguments": {"order": "x"}, "approver": "ann"},
        }  # fmt: skip
        for name, payload in refusals.items():
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await _preview(handle, payload)
            assert refused_type(err) is not None, name
        for _ in range(18):  # 2 taken: the limit is 20 per call
            await _preview(handle, {"call_id": call_id, "arguments": big, "approver": "ann"})
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await _preview(handle, {"call_id": call_id, "arguments": big, "approver": "ann"})
        assert refused_type(err) == "TooManyPreviews"
        # Deciding still works as before, and nothing ran on a preview's behalf.
        assert ledger.count("refund") == 0
        await _approve(handle, DecisionInput(call_id=call_id, approver="ann"))
        out = await handle.result()
    assert ledger.count("refund") == 1 and out.final_output == "refunded $500 on order 9"
