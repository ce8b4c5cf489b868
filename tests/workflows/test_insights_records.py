"""What insights read of a run's decisions, over simulated days (time-skipping server): each
decision says when its call started waiting and when it escalated, so time to decision and
escalations count from the record alone, also when every task replays."""

from __future__ import annotations

from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from hitl import Runner
from hitl.insights import aggregate
from hitl.wire import DecisionInput, RunOutput
from tests.helpers import serving
from tests.workflows.test_escalation import DIRECTORY, desk


async def test_an_escalated_call_decided_a_day_later_counts_its_wait(
    ts_env: WorkflowEnvironment, cache_size: int
) -> None:
    client = ts_env.client
    async with serving(client, desk, directory=DIRECTORY, cache=cache_size) as tq:
        result = await Runner.run(desk, "refund", client=client, task_queue=tq, serve=False)
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        call_id = result.interruptions[0].call_id
        await ts_env.sleep(timedelta(days=1, hours=1))  # escalated to the leads after a day
        await handle.execute_update("approve", DecisionInput(call_id=call_id, approver="lee"))
        out = await handle.result()
    [d] = out.decisions
    assert d.requested_at is not None and d.escalated_at is not None
    assert d.requested_at < d.escalated_at < d.decided_at
    assert timedelta(days=1) < d.decided_at - d.requested_at < timedelta(days=2)
    fig = aggregate(out.decisions, [], d.requested_at, d.decided_at)
    assert fig.totals()["approved"] == fig.totals()["escalated"] == 1
    assert fig.by_approver["lee"] == [(d.decided_at - d.requested_at).total_seconds()]


async def test_an_expiry_counts_as_expired_and_escalated_not_as_a_persons_time(
    ts_env: WorkflowEnvironment, cache_size: int
) -> None:
    client = ts_env.client
    async with serving(client, desk, directory=DIRECTORY, cache=cache_size) as tq:
        result = await Runner.run(desk, "refund", client=client, task_queue=tq, serve=False)
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        await ts_env.sleep(timedelta(days=3, hours=1))
        out = await handle.result()
    [d] = out.decisions
    assert (d.kind, d.source) == ("expired", "deadline")
    assert d.requested_at is not None and d.escalated_at is not None
    fig = aggregate(out.decisions, [], d.requested_at, d.decided_at)
    assert fig.totals() == {"approved": 0, "rejected": 0, "expired": 1, "edited": 0,
                            "escalated": 1}  # fmt: skip
    assert fig.by_tool == {} and fig.sources == {"deadline": 1}
