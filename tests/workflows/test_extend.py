"""Moving an approval deadline later (`extend`), over simulated days (time-skipping server)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from hitl import Runner
from hitl.wire import DecisionInput, ExtendInput, Extension, RunOutput, RunStatus
from tests.agents import support_agent
from tests.helpers import Ledger, serving, tool_activity_count
from tests.workflows.test_invariants import refused_type
from tests.workflows.test_loop import wirer

TWO_DAYS = timedelta(days=2).total_seconds()


async def _parked(ts_env: WorkflowEnvironment, tq: str) -> tuple[object, str, RunStatus]:
    result = await Runner.run(wirer, "pay", client=ts_env.client, task_queue=tq, serve=False)
    handle = ts_env.client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
    status = await handle.query("status", result_type=RunStatus)
    return handle, result.interruptions[0].call_id, status


async def test_an_extended_call_outlives_its_first_deadline(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    async with serving(ts_env.client, wirer) as tq:
        handle, call_id, status = await _parked(ts_env, tq)
        first = status.pending[0].deadline
        assert first is not None
        ext: Extension = await handle.execute_update(  # type: ignore[attr-defined]
            "extend",
            ExtendInput(call_id=call_id, seconds=TWO_DAYS, approver="ops", reason="invoice due"),
            result_type=Extension,
        )
        assert (ext.previous, ext.deadline) == (first, first + timedelta(days=2))
        await ts_env.sleep(timedelta(days=1, hours=1))  # past the first deadline
        status = await handle.query("status", result_type=RunStatus)  # type: ignore[attr-defined]
        [pending] = status.pending
        assert (status.phase, pending.deadline) == ("awaiting_approval", ext.deadline)
        assert [(e.approver, e.reason) for e in pending.extensions] == [("ops", "invoice due")]
        await handle.execute_update("approve", DecisionInput(call_id=call_id))  # type: ignore[attr-defined]
        out = await handle.result()  # type: ignore[attr-defined]
    assert out.final_output == "wired 100"
    assert [(d.kind, d.source) for d in out.decisions] == [("approve", "person")]


async def test_an_extended_call_expires_at_its_new_deadline(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    async with serving(ts_env.client, wirer) as tq:
        handle, call_id, _ = await _parked(ts_env, tq)
        await handle.execute_update(  # type: ignore[attr-defined]
            "extend", ExtendInput(call_id=call_id, seconds=TWO_DAYS, approver="ops")
        )
        await ts_env.sleep(timedelta(days=3, hours=1))
        out = await handle.result()  # type: ignore[attr-defined]
        hist = await handle.fetch_history()  # type: ignore[attr-defined]
    # The extension outlives its call's turn (and the run): the audit still has it.
    assert [(a.kind, a.call_id, a.approver) for a in out.actions] == [("extend", call_id, "ops")]
    assert [(d.kind, d.source) for d in out.decisions] == [("expired", "deadline")]
    assert "expired" in out.final_output
    assert tool_activity_count(hist) == 0


async def test_extensions_that_cannot_apply_are_refused(ts_env: WorkflowEnvironment) -> None:
    client = ts_env.client
    async with serving(client, wirer, support_agent) as tq:
        handle, call_id, _ = await _parked(ts_env, tq)
        forever = await Runner.run(
            support_agent, "cancel order 3", client=client, task_queue=tq, serve=False
        )
        cases = [
            (handle, ExtendInput(call_id=call_id, seconds=0), "InvalidDecision"),
            (handle, ExtendInput(call_id=call_id, seconds=-5), "InvalidDecision"),
            (handle, ExtendInput(call_id="nope", seconds=60), "UnknownCall"),
            (
                client.get_workflow_handle(forever.workflow_id),
                ExtendInput(call_id=forever.interruptions[0].call_id, seconds=60),
                "NoDeadline",
            ),
        ]
        for target, payload, expected in cases:
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await target.execute_update("extend", payload)  # type: ignore[attr-defined]
            assert refused_type(err) == expected, payload
        status = await handle.query("status", result_type=RunStatus)  # type: ignore[attr-defined]
    assert status.pending[0].extensions == [], "nothing was changed"
