"""`apply_policy` on the time-skipping server, with and without replay on every task: a parked
call the new version asks about differently waits for the new approvers, the run's later calls
are planned by the applied version, and the apply is one accepted update in history."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from hitl import Runner
from hitl.cli.policy_admin import apply_update
from hitl.policy import parse_policy
from hitl.wire import DecisionInput, DecisionRecord, PolicyChange, RunOutput, RunStatus
from tests.e2e.test_policy_apply import ADA_ID, ADA_KEY, DIRECTORY, NEW, apply_events
from tests.e2e.test_verify import offline as verified
from tests.helpers import Ledger, queue_name, serving, tool_activity_count
from tests.workflows.test_policy_runs import POLICY, desk


async def test_an_apply_re_evaluates_a_parked_turn(
    ts_env: WorkflowEnvironment, ledger: Ledger, cache_size: int, tmp_path: Path
) -> None:
    """Refund $5,000 parks under version 1 (two of ann, bob, cy); the apply re-asks it of bob,
    dee and eve; once dee and eve approve it runs, and the model's next call (refund $30,000)
    is denied by version 3's rule at planning: one tool activity in all."""
    client, tq = ts_env.client, queue_name()
    path = tmp_path / "desk-3.yaml"
    path.write_text(NEW)
    async with serving(
        client, desk, task_queue=tq, cache=cache_size, directory=DIRECTORY,
        policy=parse_policy(POLICY),
    ):  # fmt: skip
        run = await Runner.run(
            desk, "refund:7:5000 refund:8:30000", client=client, task_queue=tq, serve=False
        )
        handle = client.get_workflow_handle(run.workflow_id, result_type=RunOutput)
        [first] = run.interruptions
        now = datetime.fromtimestamp((await ts_env.get_current_time()).timestamp(), UTC)
        upd = apply_update(ADA_KEY, ADA_ID, "ada", run.workflow_id, str(path), "new limits", now)
        change = await handle.execute_update("apply_policy", upd, result_type=PolicyChange)
        [call] = change.calls
        assert (call.change, call.approvers) == ("asked", ["bob", "dee", "eve"])
        for who in ("dee", "eve"):
            await handle.execute_update(
                "approve", DecisionInput(call_id=first.call_id, approver=who),
                result_type=DecisionRecord,
            )  # fmt: skip
        status = await handle.query("status", result_type=RunStatus)
        out = await handle.result()
        hist = await handle.fetch_history()
        report = await verified(hist, client)
    assert status.policy is not None and status.policy.version == "3"
    assert "refunded $5000.0 on order 7" in out.final_output
    assert "Refunds above $20,000 now go to the finance director." in out.final_output
    assert tool_activity_count(hist) == 1 and ledger.count("refund") == 1
    assert apply_events(hist) == 1
    # `hitl verify` follows the apply: dee's and eve's approvals count (checked signature).
    [call] = report.calls
    assert report.ok and [a.approver for a in call.verdict.approvals] == ["dee", "eve"]
