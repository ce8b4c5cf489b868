"""A real run's history leaves out derived fields, and reads back the same (issue 31).

The tool activity's input names neither its run nor its key (the activity knows both), nor its
call and tool besides its decision's; the memo names no run for the run's own calls; the
update answer, the memo and the result leave out agent names equal to agent ids. What reads
them (the activity, the tool's key, our clients) gets what it got before.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from hitl import Runner
from hitl.client import data_converter
from hitl.wire import (
    INBOX_MEMO,
    RESOLVED_LEVEL,
    ExecuteToolInput,
    InboxMemo,
    ResolvedRun,
    RunOutput,
    SettledStatus,
)
from tests.agents import local_support_agent, support_agent
from tests.helpers import Ledger, serving

CONV = data_converter(codec=None).payload_converter
AGENT = "Support agent"


def payloads(hist: WorkflowHistory, event_type: int) -> list[Payload]:
    """The first payload of every event of this type (inputs, results, the inbox memo)."""
    out: list[Payload] = []
    for e in hist.events:
        if e.event_type != event_type:
            continue
        if event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = e.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "execute_tool":
                out.append(attrs.input.payloads[0])
        elif event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            out.append(
                e.workflow_execution_update_completed_event_attributes.outcome.success.payloads[0]
            )
        elif event_type == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
            memo = e.workflow_properties_modified_event_attributes.upserted_memo.fields
            out.append(memo[INBOX_MEMO])
        elif event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            out.append(e.workflow_execution_completed_event_attributes.result.payloads[0])
        elif event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            details = e.marker_recorded_event_attributes.details
            if "result" in details:
                out.append(details["result"].payloads[0])
    return out


def stored(p: Payload) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(p.data)
    return data


async def approved_run(env: WorkflowEnvironment, cache: int) -> tuple[str, WorkflowHistory]:
    async with serving(env.client, support_agent, cache=cache) as tq:
        result = await Runner.run(
            support_agent, "cancel order 7", client=env.client, task_queue=tq, serve=False
        )
        state = result.to_state()
        state.approve(result.interruptions[0])
        result = await Runner.run(
            support_agent, state, client=env.client, task_queue=tq, serve=False
        )
        assert result.final_output == "cancel_order: Cancelled order 7"
        hist = await env.client.get_workflow_handle(result.workflow_id).fetch_history()
    return result.workflow_id, hist


async def test_the_tool_input_leaves_out_what_the_activity_derives(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    wid, hist = await approved_run(ts_env, cache_size)
    [payload] = payloads(hist, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    data = stored(payload)
    # The run, key and agent are the activity's to derive; call and tool, its decision's.
    assert not {"workflow_id", "idempotency_key", "agent_id", "call_id", "tool_name"} & set(data)
    assert {"call_id", "tool_name"} <= set(data["decision"]), data
    inp = CONV.from_payloads([payload], [ExecuteToolInput])[0].located(wid)
    assert (inp.agent_id, inp.workflow_id) == (AGENT, wid)
    assert inp.idempotency_key == f"{wid}:{inp.call_id}"
    assert inp.decision is not None
    assert (inp.decision.call_id, inp.decision.tool_name) == (inp.call_id, "cancel_order")
    # The key the tool was given, byte for byte the rule's (`workflow_id:call_id`).
    assert [r[0] for r in ledger.rows()] == [f"{wid}:{inp.call_id}"]


async def test_answers_memo_and_result_leave_out_agent_names(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    _, hist = await approved_run(ts_env, cache_size)
    answers = payloads(hist, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED)
    paused = [a for a in answers if stored(a).get("pending")]
    assert paused, "the run's first answer lists the pending call"
    for answer in paused:
        assert all("agent_name" not in p for p in stored(answer)["pending"])
        status = CONV.from_payloads([answer], [SettledStatus])[0]
        assert [(p.agent_id, p.agent_name) for p in status.pending] == [(AGENT, AGENT)]
    memos = [m for m in payloads(hist, EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED)]
    listed = [stored(m)["calls"] for m in memos if stored(m).get("calls")]
    assert listed, "the paused run's memo lists its call"
    assert all("agent_name" not in c and "workflow_id" not in c for c in listed[0])
    memo = CONV.from_payloads([memos[0]], [InboxMemo])[0]
    assert [(c.agent_name, c.workflow_id) for c in memo.calls] == [(AGENT, None)]
    [done] = payloads(hist, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)
    data = stored(done)
    assert "last_agent_name" not in data
    out = CONV.from_payloads([done], [RunOutput])[0]
    assert out.last_agent_name == AGENT
    # The run's items travel with the answer that saw it finish (the result leaves them out).
    with_items = [a for a in answers if stored(a).get("new_items")]
    assert with_items, "Runner.run's last answer carries the items since the pause"
    assert all("agent_name" not in i for a in with_items for i in stored(a)["new_items"])
    items = [
        i for a in with_items for i in CONV.from_payloads([a], [SettledStatus])[0].new_items or []
    ]
    assert {(i.agent_id, i.agent_name) for i in items} == {(AGENT, AGENT)}
    # The graph pinned at the start (the `resolve_agent` marker): agents named as their ids.
    [pinned] = [
        m for m in payloads(hist, EventType.EVENT_TYPE_MARKER_RECORDED) if b'"graph"' in m.data
    ]
    assert "name" not in stored(pinned)["graph"]["agents"][AGENT]
    graph = CONV.from_payloads([pinned], [ResolvedRun])[0].graph
    assert (graph.agents[AGENT].id, graph.agents[AGENT].name) == (AGENT, AGENT)


async def test_a_local_tool_gets_the_key_its_run_and_call_give(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """A local activity's input is not in history, but it is built the same way: the activity
    fills in its run and key (`activity.info()` of a local activity names its workflow)."""
    async with serving(ts_env.client, local_support_agent) as tq:
        done = await Runner.run(
            local_support_agent,
            "Please email the customer",
            client=ts_env.client,
            task_queue=tq,
            serve=False,
        )
    [call_id] = {i.call_id for i in done.new_items if i.type == "tool_call_item"}
    keys = {a.key for a in ledger.attempts("send_email")}
    assert keys == {f"{done.workflow_id}:{call_id}"}


async def test_the_pinned_resolution_stores_its_level_not_what_it_implies(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    _, hist = await approved_run(ts_env, cache_size)
    [pinned] = [
        m for m in payloads(hist, EventType.EVENT_TYPE_MARKER_RECORDED) if b'"graph"' in m.data
    ]
    data = stored(pinned)
    assert data["level"] == RESOLVED_LEVEL
    implied = {"search_attributes", "outcomes_attribute", "inbox_memo", "run_call_ids"}
    assert not (implied | {"inbox_rounds"}) & set(data), data
    resolved = CONV.from_payloads([pinned], [ResolvedRun])[0]
    assert (resolved.inbox_memo, resolved.run_call_ids, resolved.inbox_rounds) == (True,) * 3
    attributes = resolved.attributes
    assert attributes is not None
    assert resolved.search_attributes == bool(attributes)
    assert resolved.outcomes_attribute == ("HitlOutcomes" in attributes)
    # What the flags mean happened: the run named its call itself (`run_call_ids`).
    answers = payloads(hist, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED)
    ids = [p["call_id"] for a in answers for p in stored(a).get("pending", [])]
    assert ids and all(i.startswith("t1.") for i in ids), ids
