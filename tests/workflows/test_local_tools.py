"""Tools run as local activities (`function_tool(local_activity=True)`): same gate, fewer steps."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from hitl import Runner, UserError, function_tool
from tests.agents import local_support_agent, support_agent
from tests.helpers import Ledger, local_markers, serving, tool_activity_count


def tool_markers(hist: WorkflowHistory) -> list[Any]:
    """The `execute_tool` local activities a history recorded."""
    return local_markers(hist, "execute_tool")


def workflow_tasks(hist: WorkflowHistory) -> int:
    return sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in hist.events)


async def test_an_approved_local_tool_runs_in_the_decisions_workflow_task(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """Nothing runs before the decision; after it the call runs inside the workflow task that
    took the decision (no activity task, one workflow task fewer than the regular tool)."""
    client = ts_env.client
    hists = {}
    async with serving(client, support_agent, local_support_agent) as tq:
        for agent in (support_agent, local_support_agent):
            result = await Runner.run(
                agent, "Please cancel order 7", client=client, task_queue=tq, serve=False
            )
            (item,) = result.interruptions
            handle = client.get_workflow_handle(result.workflow_id)
            paused = await handle.fetch_history()
            assert tool_markers(paused) == [] and tool_activity_count(paused) == 0
            assert not [r for r in ledger.rows() if r[0].startswith(result.workflow_id)]
            state = result.to_state()
            state.approve(item)
            done = await Runner.run(agent, state, client=client, task_queue=tq, serve=False)
            assert done.final_output == "cancel_order: Cancelled order 7"
            hists[agent is local_support_agent] = await handle.fetch_history()

    regular, local = hists[False], hists[True]
    assert tool_activity_count(regular) == 1 and tool_markers(regular) == []
    assert tool_activity_count(local) == 0
    (marker,) = tool_markers(local)
    result = json.loads(marker.details["result"].payloads[0].data)
    assert result["output"] == "Cancelled order 7"
    assert workflow_tasks(local) == workflow_tasks(regular) - 1

    # The marker belongs to the workflow task that accepted the decision.
    events = list(local.events)
    at = next(
        i
        for i, e in enumerate(events)
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes is marker
    )
    task = max(
        i for i in range(at) if events[i].event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    )
    between = [e.event_type for e in events[task:at]]
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED in between
    keys = [row[0] for row in ledger.rows("cancel_order")]
    assert len(keys) == 2 and keys[1] == f"{done.workflow_id}:{item.call_id}"


async def test_a_rejected_local_tool_never_runs(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, local_support_agent) as tq:
        result = await Runner.run(
            local_support_agent, "cancel order 9", client=client, task_queue=tq, serve=False
        )
        state = result.to_state()
        state.reject(result.interruptions[0], message="Order 9 is already shipped.")
        done = await Runner.run(
            local_support_agent, state, client=client, task_queue=tq, serve=False
        )
        hist = await client.get_workflow_handle(done.workflow_id).fetch_history()

    assert done.final_output == "cancel_order: Order 9 is already shipped."
    assert ledger.count() == 0 and ledger.attempts() == []
    assert tool_markers(hist) == [] and tool_activity_count(hist) == 0


async def test_a_local_tool_is_retried_with_the_same_idempotency_key(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """An approval-free local tool runs in the model answer's workflow task; its failed first
    attempt is retried by the worker under the same key, and the model sees the second's result."""
    client = ts_env.client
    async with serving(client, local_support_agent) as tq:
        done = await Runner.run(
            local_support_agent,
            "Please email the customer",
            client=client,
            task_queue=tq,
            serve=False,
        )
        hist = await client.get_workflow_handle(done.workflow_id).fetch_history()

    assert done.interruptions == []
    assert done.final_output == "send_email: Sent 'About your order'"
    attempts = ledger.attempts("send_email")
    assert [a.attempt for a in attempts] == [1, 2]
    assert len({a.key for a in attempts}) == 1
    assert ledger.count("send_email") == 1
    (marker,) = tool_markers(hist)
    assert json.loads(marker.details["data"].payloads[0].data)["attempt"] == 2
    assert tool_activity_count(hist) == 0


def test_a_local_tool_must_be_retry_safe() -> None:
    async def pay(amount: int) -> str:
        """Pay.

        Args:
            amount: How much.
        """
        return "paid"

    with pytest.raises(UserError, match="local_activity=True needs retry_safe=True on 'pay'"):
        function_tool(local_activity=True, retry_safe=False)(pay)
    with pytest.raises(UserError, match="needs retry_safe=True"):  # however it is built
        dataclasses.replace(function_tool(local_activity=True)(pay), retry_safe=False)
    assert function_tool(local_activity=True)(pay).spec().local_activity is True
    assert function_tool(pay).spec().local_activity is False
