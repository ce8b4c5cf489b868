"""The approval flow on the time-skipping server: pause, decide, resume (seeds' semantics)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from hitl import (
    Agent,
    AlreadyDecidedError,
    ModelReply,
    ModelRequest,
    RunConfig,
    Runner,
    RunState,
    ScriptedModel,
    UnknownCallError,
)
from hitl.wire import DecisionInput, DecisionRecord, RunStatus
from tests.agents import cancel_order, support_agent, weather_agent
from tests.helpers import (
    Ledger,
    activity_count,
    event_count,
    local_markers,
    serving,
    state_events,
    tool_activity_count,
)


async def test_parked_for_three_days_then_approved(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, support_agent, cache=cache_size) as tq:
        result = await Runner.run(
            support_agent, "Please cancel order 7", client=client, task_queue=tq, serve=False
        )
        assert [i.name for i in result.interruptions] == ["cancel_order"]
        assert result.final_output is None
        assert ledger.count() == 0, "nothing runs before a decision"

        await ts_env.sleep(timedelta(days=3))
        handle = client.get_workflow_handle(result.workflow_id)
        status = await handle.query("status", result_type=RunStatus)
        assert status.phase == "awaiting_approval"
        assert [p.call_id for p in status.pending] == [result.interruptions[0].call_id]

        state = result.to_state()
        state.approve(result.interruptions[0])
        result = await Runner.run(support_agent, state, client=client, task_queue=tq, serve=False)

    assert result.interruptions == []
    assert result.final_output == "cancel_order: Cancelled order 7"
    assert [r[1] for r in ledger.rows()] == ["cancel_order"]
    hist = await handle.fetch_history()
    assert tool_activity_count(hist) == 1
    decision = result.decisions[0]
    assert decision.kind == "approve" and decision.source == "person"
    assert (decision.decided_at - result.status.decisions[0].decided_at) == timedelta(0)


async def test_a_pause_reaches_runner_run_with_its_items_and_no_query(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """`Runner.run` gets a small paused run's items with the `wait` answer (recorded in history)
    instead of asking the `snapshot` query; a large one is read by query, with the same result."""
    import json

    from hitl.limits import TRANSCRIPT_INLINE_BYTES
    from hitl.wire import RunSnapshot

    client = ts_env.client
    big = "Please cancel order 7. " + "Some context. " * (TRANSCRIPT_INLINE_BYTES // 14)
    async with serving(client, support_agent) as tq:
        small = await Runner.run(
            support_agent, "Please cancel order 7", client=client, task_queue=tq, serve=False
        )
        large = await Runner.run(support_agent, big, client=client, task_queue=tq, serve=False)
        answers = {}
        for r in (small, large):
            handle = client.get_workflow_handle(r.workflow_id)
            snap = await handle.query("snapshot", result_type=RunSnapshot)
            assert [i.type for i in r.new_items] == [i.type for i in snap.new_items]
            assert r.to_input_list() == snap.input_items + [i.raw_item for i in snap.new_items]
            assert [i.call_id for i in r.interruptions] == [p.call_id for p in snap.status.pending]
            hist = await handle.fetch_history()
            (done,) = [
                e.workflow_execution_update_completed_event_attributes
                for e in hist.events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
            ]
            answers[r is small] = json.loads(done.outcome.success.payloads[0].data)
    assert [i["type"] for i in answers[True]["new_items"]] == ["tool_call_item"]
    assert answers[True]["input_items"] == [{"role": "user", "content": "Please cancel order 7"}]
    assert "new_items" not in answers[False], "a large transcript stays out of history"
    assert ledger.count() == 0


async def test_calls_are_planned_with_the_model_call(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """The model call's activity plans the calls it returns (predicates, the approval request):
    no `plan_tools` local activity and no marker of its own; an edit is still planned apart."""
    import json

    client = ts_env.client
    async with serving(client, support_agent) as tq:
        result = await Runner.run(
            support_agent, "Please cancel order 7", client=client, task_queue=tq, serve=False
        )
        (item,) = result.interruptions
        assert item.request is not None and "cancel_order" in item.request.title
        handle = client.get_workflow_handle(result.workflow_id)
        before = await handle.fetch_history()
        state = result.to_state()
        state.approve(item, arguments={"order_id": 8})
        done = await Runner.run(support_agent, state, client=client, task_queue=tq, serve=False)
        after = await handle.fetch_history()

    def kinds(hist: object) -> list[str]:
        return [
            json.loads(m.details["data"].payloads[0].data)["activity_type"]
            for m in local_markers(hist)  # type: ignore[arg-type]
        ]

    assert kinds(before) == ["resolve_agent", "call_model"]
    (model,) = [
        m for m in local_markers(before) if b"call_model" in m.details["data"].payloads[0].data
    ]
    plans = json.loads(model.details["result"].payloads[0].data)["plans"]
    assert [(p["call_id"], p["needs_approval"]) for p in plans] == [(item.model_call_id, True)]
    assert item.call_id == "t1.1", "the run names its calls itself"
    assert kinds(after).count("plan_tools") == 1, "the edited arguments are planned apart"
    assert str(done.final_output).endswith("Cancelled order 8")
    assert [json.loads(r[2]) for r in ledger.rows()] == [{"order_id": 8}]


async def test_reject_schedules_no_tool_activity(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, support_agent, cache=cache_size) as tq:
        result = await Runner.run(
            support_agent, "cancel order 9", client=client, task_queue=tq, serve=False
        )
        state = result.to_state()
        state.reject(result.interruptions[0], message="Order 9 is already shipped.")
        result = await Runner.run(support_agent, state, client=client, task_queue=tq, serve=False)

    assert result.final_output == "cancel_order: Order 9 is already shipped."
    outputs = [i.raw_item for i in result.new_items if i.type == "tool_call_output_item"]
    assert outputs[0]["output"] == "Order 9 is already shipped."
    assert ledger.count() == 0
    hist = await client.get_workflow_handle(result.workflow_id).fetch_history()
    assert activity_count(hist, "execute_tool") == 0


async def test_reject_without_message_uses_default_text(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, support_agent) as tq:
        result = await Runner.run(
            support_agent, "cancel order 3", client=client, task_queue=tq, serve=False
        )
        state = result.to_state()
        state.reject(result.interruptions[0])
        result = await Runner.run(support_agent, state, client=client, task_queue=tq, serve=False)
    assert result.final_output == "cancel_order: Tool execution was not approved."


async def test_partial_resolution_runs_approved_calls_first(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, support_agent, cache=cache_size) as tq:
        result = await Runner.run(
            support_agent,
            "cancel order 5 and email a refund notice",
            client=client,
            task_queue=tq,
            serve=False,
        )
        names = sorted(i.name for i in result.interruptions)
        assert names == ["cancel_order", "send_email"], "both calls of the turn are visible"
        cancel = next(i for i in result.interruptions if i.name == "cancel_order")

        state = result.to_state()
        state.approve(cancel)
        result = await Runner.run(support_agent, state, client=client, task_queue=tq, serve=False)

        # The approved call ran; the other still waits, and the model was not asked again.
        assert [i.name for i in result.interruptions] == ["send_email"]
        assert [r[1] for r in ledger.rows()] == ["cancel_order"]
        assert result.status.turn == 1

        state = result.to_state()
        state.approve(result.interruptions[0])
        result = await Runner.run(support_agent, state, client=client, task_queue=tq, serve=False)

    assert sorted(r[1] for r in ledger.rows()) == ["cancel_order", "send_email"]
    assert result.status.turn == 2, "one model call for the turn, one after all outputs"
    assert "cancel_order: Cancelled order 5" in result.final_output


async def test_predicate_decides_per_call(ts_env: WorkflowEnvironment, ledger: Ledger) -> None:
    client = ts_env.client
    async with serving(client, support_agent) as tq:
        # No refund in the subject: the predicate says no approval is needed.
        result = await Runner.run(
            support_agent, "email them an update", client=client, task_queue=tq, serve=False
        )
    assert result.interruptions == []
    assert result.final_output == "send_email: Sent 'About your order'"
    assert [r[1] for r in ledger.rows()] == ["send_email"]


async def test_unknown_and_conflicting_decisions_are_refused(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, support_agent, cache=cache_size) as tq:
        # Two calls need approval, so the run stays paused after the first decision.
        result = await Runner.run(
            support_agent,
            "cancel order 11 and email a refund notice",
            client=client,
            task_queue=tq,
            serve=False,
        )
        handle = client.get_workflow_handle(result.workflow_id)
        cancel = next(i for i in result.interruptions if i.name == "cancel_order")
        email = next(i for i in result.interruptions if i.name == "send_email")
        before = state_events(await handle.fetch_history())

        with pytest.raises(WorkflowUpdateFailedError) as unknown:
            await handle.execute_update("approve", DecisionInput(call_id="zzz"))
        assert unknown.value.cause.type == "UnknownCall"  # type: ignore[union-attr]
        assert "unknown call id 'zzz'" in str(unknown.value.cause)
        with pytest.raises(WorkflowUpdateFailedError) as bad:
            await handle.execute_update("approve", {"call_id": 123, "always": "maybe"})
        assert bad.value.cause.type == "InvalidDecision"  # type: ignore[union-attr]
        assert "call_id: Input should be a valid string" in str(bad.value.cause)
        with pytest.raises(WorkflowUpdateFailedError) as typo:
            await handle.execute_update("approve", {"call_id": cancel.call_id, "aprover": "x"})
        assert "aprover: Extra inputs are not permitted" in str(typo.value.cause)
        # (The Java test server records empty workflow tasks for rejected updates; the dev
        # server records nothing at all, which tests/e2e asserts.)
        assert state_events(await handle.fetch_history()) == before, "refusals change nothing"
        status = await handle.query("status", result_type=RunStatus)
        assert status.decisions == [] and len(status.pending) == 2

        first = await handle.execute_update(
            "reject", DecisionInput(call_id=cancel.call_id, approver="alice"), id="u-1"
        )
        again = await handle.execute_update(
            "reject", DecisionInput(call_id=cancel.call_id, approver="alice"), id="u-2"
        )
        assert first == again, "the same decision twice is idempotent"
        with pytest.raises(WorkflowUpdateFailedError) as conflict:
            await handle.execute_update(
                "approve", DecisionInput(call_id=cancel.call_id, approver="bob")
            )
        assert conflict.value.cause.type == "AlreadyDecided"  # type: ignore[union-attr]
        assert "already decided: reject by alice" in str(conflict.value.cause)

        # Typed errors through the Python API too; a refused batch changes nothing.
        state = result.to_state()
        with pytest.raises(UnknownCallError):
            state.approve("nope")
        state.approve(cancel)
        state.approve(email)
        with pytest.raises(AlreadyDecidedError):
            await Runner.run(support_agent, state, client=client, task_queue=tq, serve=False)
        status = await handle.query("status", result_type=RunStatus)
        assert [p.call_id for p in status.pending] == [email.call_id]

        state = await RunState.from_string(support_agent, result.to_state().to_string())
        state.reject(email, message="Do not email.")
        done = await Runner.run(support_agent, state, client=client, task_queue=tq, serve=False)
        assert done.final_output == (
            "cancel_order: Tool execution was not approved.; send_email: Do not email."
        )
        hist = await handle.fetch_history()
        assert activity_count(hist, "execute_tool") == 0
        with pytest.raises(RPCError):  # the run is closed: the server refuses
            await handle.execute_update("approve", DecisionInput(call_id=cancel.call_id))
    assert ledger.count() == 0
    accepted = event_count(hist, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
    # wait (start) + reject + reject again (idempotent) + decide: refusals were never accepted
    assert accepted == 4


async def test_handoff_then_approval_in_second_agent(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    """The JS seed: a handoff to a data agent whose tool needs approval only for SF."""
    client = ts_env.client
    async with serving(client, weather_agent, cache=cache_size) as tq:
        result = await Runner.run(
            weather_agent,
            "What is the weather in Oakland and San Francisco?",
            client=client,
            task_queue=tq,
            serve=False,
        )
        assert [(i.agent.name, i.name, i.arguments) for i in result.interruptions] == [
            ("Data agent", "get_weather", '{"location": "San Francisco"}')
        ]
        assert result.last_agent.name == "Data agent"
        # Oakland needed no approval and already ran (partial resolution).
        assert [r[2] for r in ledger.rows()] == ['{"location": "Oakland"}']
        while result.interruptions:
            state = await RunState.from_string(weather_agent, result.to_state().to_string())
            for item in result.interruptions:
                state.approve(item)
            result = await Runner.run(
                weather_agent, state, client=client, task_queue=tq, serve=False
            )
    assert result.final_output == (
        "The weather in Oakland is sunny The weather in San Francisco is sunny"
    )
    kinds = [i.type for i in result.new_items]
    assert kinds[:2] == ["handoff_call_item", "handoff_output_item"]
    assert ledger.count() == 2


def one_by_one(req: ModelRequest) -> ModelReply:
    """Cancel the orders named in the request one per turn, then report."""
    wanted = [int(n) for n in re.findall(r"\d+", req.last_user_text())]
    done = req.results_for("cancel_order")
    if len(done) < len(wanted):
        return ModelReply.call("cancel_order", {"order_id": wanted[len(done)]})
    return ModelReply.say(" | ".join(r.output or "" for r in done))


sequential_agent = Agent(
    name="Sequential canceller",
    tools=[cancel_order],
    model=ScriptedModel(one_by_one, "tests.sequential"),
)


async def test_always_approve_covers_later_turns(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, sequential_agent, cache=cache_size) as tq:
        result = await Runner.run(
            sequential_agent, "cancel 1, 2 and 3", client=client, task_queue=tq, serve=False
        )
        assert len(result.interruptions) == 1
        state = result.to_state()
        state.approve(result.interruptions[0], always_approve=True)
        result = await Runner.run(
            sequential_agent, state, client=client, task_queue=tq, serve=False
        )
    assert result.interruptions == []
    assert result.final_output == "Cancelled order 1 | Cancelled order 2 | Cancelled order 3"
    assert [d.source for d in result.decisions] == ["person", "always_rule", "always_rule"]
    assert ledger.count("cancel_order") == 3


async def test_always_reject_covers_later_turns(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, sequential_agent) as tq:
        result = await Runner.run(
            sequential_agent, "cancel 4 and 5", client=client, task_queue=tq, serve=False
        )
        state = result.to_state()
        state.reject(result.interruptions[0], always_reject=True, message="No cancellations.")
        result = await Runner.run(
            sequential_agent, state, client=client, task_queue=tq, serve=False
        )
    assert result.final_output == "No cancellations. | Tool execution was not approved."
    assert [d.kind for d in result.decisions] == ["reject", "reject"]
    assert ledger.count() == 0


async def test_continue_as_new_carries_decisions_and_rules(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    client = ts_env.client
    config = RunConfig(continue_as_new_after_events=12, max_turns=20)
    async with serving(client, sequential_agent, cache=cache_size) as tq:
        result = await Runner.run(
            sequential_agent,
            "cancel 1, 2, 3 and 4",
            run_config=config,
            client=client,
            task_queue=tq,
            serve=False,
        )
        first_run = result.run_id
        first_call = result.interruptions[0]
        state = result.to_state()
        state.approve(first_call)
        result = await Runner.run(
            sequential_agent, state, client=client, task_queue=tq, serve=False
        )
        # The second call waits in a new run of the same workflow id.
        assert result.interruptions and result.run_id != first_run
        handle = client.get_workflow_handle(result.workflow_id)
        # A late duplicate of a decision from the earlier run is deduplicated by call id...
        [sent] = (await handle.query("status", result_type=RunStatus)).decisions
        again = await handle.execute_update(
            "approve",
            DecisionInput(call_id=first_call.call_id, approver=sent.approver),
            result_type=DecisionRecord,
        )
        assert again.source == "person" and again.call_id == first_call.call_id
        # ...and a conflicting one is still refused.
        with pytest.raises(WorkflowUpdateFailedError) as conflict:
            await handle.execute_update("reject", DecisionInput(call_id=first_call.call_id))
        assert conflict.value.cause.type == "AlreadyDecided"  # type: ignore[union-attr]

        state = result.to_state()
        state.approve(result.interruptions[0], always_approve=True)
        result = await Runner.run(
            sequential_agent, state, client=client, task_queue=tq, serve=False
        )

    assert result.final_output == " | ".join(f"Cancelled order {n}" for n in range(1, 5))
    assert [d.source for d in result.decisions] == [
        "person",
        "person",
        "always_rule",
        "always_rule",
    ]
    assert ledger.count() == 4
    assert result.status.turn == 5
    assert len(result.to_input_list()) == 1 + 4 * 2 + 1
