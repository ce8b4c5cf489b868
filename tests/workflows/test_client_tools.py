"""Callback tools (`@client_tool`): the code runs on the client that started the run.

- The call passes the approval gate first; then `Runner.run` on the client runs the function
  and answers; the worker never runs it; it holds across a worker restart.
- The run checks the client's result against the tool's output type before accepting it.
- A client that never answers becomes an error the model reads, when `answer_timeout` runs out.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from hitl import Agent, ModelReply, ModelRequest, Runner, ScriptedModel, client_tool
from hitl.limits import MIN_CONTINUE_AS_NEW_EVENTS
from hitl.stream import stream_events
from hitl.wire import AnswerInput, RunConfigSpec, RunInput, RunOutput, RunStatus
from tests.helpers import serving, wait_for

RAN_ON_CLIENT: list[str] = []


def photo_script(req: ModelRequest) -> ModelReply:
    """Ask for the file's size on the user's laptop, then report what came back."""
    done = req.results_for("file_size")
    if not done:
        return ModelReply.call("file_size", {"path": "~/Pictures/cat.jpg"})
    return ModelReply.say(f"size: {done[-1].output}")


@client_tool(needs_approval=True, answer_timeout=60)
def file_size(path: str) -> int:
    """The size of a file on the user's machine.

    Args:
        path: The file.
    """
    RAN_ON_CLIENT.append(path)
    return 2048


laptop = Agent(
    name="Laptop helper",
    tools=[file_size],
    model=ScriptedModel(photo_script, "tests.client_tools.photo"),
)


def tool_activities(hist: Any) -> int:
    return sum(
        1
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "execute_tool"
    )


async def test_an_approved_client_call_runs_on_the_client_across_a_worker_restart(
    ts_env: WorkflowEnvironment,
) -> None:
    RAN_ON_CLIENT.clear()
    client = ts_env.client
    async with serving(client, laptop, cache=0) as tq:
        result = await Runner.run(
            laptop, "how big is my cat photo?", client=client, task_queue=tq, serve=False
        )
        [item] = result.interruptions
        assert item.kind == "approval", "the gate comes first"
        hist = await client.get_workflow_handle(result.workflow_id).fetch_history()
        assert tool_activities(hist) == 0 and RAN_ON_CLIENT == []
    # Another worker (a restart, a deploy); the client approves and serves the call.
    async with serving(client, laptop, task_queue=tq):
        state = result.to_state()
        state.approve(item)
        result = await Runner.run(laptop, state, client=client, task_queue=tq, serve=False)
        [action] = (await _status(client, result.workflow_id)).actions
    assert result.final_output == "size: 2048"
    assert RAN_ON_CLIENT == ["~/Pictures/cat.jpg"], "once, here on the client"
    assert (action.kind, action.outcome, action.content) == ("answer", "accept", {"output": 2048})


def _accepted(hist: Any) -> int:
    accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    return sum(1 for e in hist.events if e.event_type == accepted)


async def _status(client: Any, wid: str) -> RunStatus:
    status: RunStatus = await client.get_workflow_handle(wid).query("status", result_type=RunStatus)
    return status


async def _parked_at_client(ts_env: WorkflowEnvironment, tq: str) -> Any:
    """A run (started without a client that serves the tool) waiting on the client's answer."""
    handle = await ts_env.client.start_workflow(
        "AgentRun",
        RunInput(agent=laptop.name, input="how big is my cat photo?"),
        id=f"client-{tq}",
        task_queue=tq,
        result_type=RunOutput,
    )
    status = await _wait_pending(handle, "approval")
    await handle.execute_update("approve", {"call_id": status.pending[0].call_id})
    return handle, await _wait_pending(handle, "input")


async def _wait_pending(handle: Any, kind: str) -> RunStatus:
    for _ in range(200):
        status: RunStatus = await handle.query("status", result_type=RunStatus)
        if status.pending and status.pending[0].kind == kind:
            return status
        await handle.fetch_history()  # (one round trip; the run moves on its own)
    raise AssertionError(f"the run never waited for {kind}")


async def test_a_client_result_of_the_wrong_type_is_refused_and_changes_nothing(
    ts_env: WorkflowEnvironment,
) -> None:
    async with serving(ts_env.client, laptop) as tq:
        handle, status = await _parked_at_client(ts_env, tq)
        [call] = status.pending
        assert call.input_request is not None and call.input_request.server == "client"
        before = _accepted(await handle.fetch_history())
        for bad in ({"output": "big"}, {"output": 1, "extra": True}, {}):
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await handle.execute_update(
                    "answer", AnswerInput(call_id=call.call_id, content=bad)
                )
            cause = err.value.cause
            assert isinstance(cause, ApplicationError) and cause.type == "InvalidDecision"
        assert _accepted(await handle.fetch_history()) == before, "a refusal records nothing"
        assert (await _status(ts_env.client, handle.id)).actions == []
        await handle.execute_update(
            "answer", AnswerInput(call_id=call.call_id, content={"output": 7})
        )
        out = await handle.result()
        asks = [e async for e in stream_events(ts_env.client, handle.id) if e.type == "call_asks"]
    assert out.final_output == "size: 7"
    assert [(e.call_id, e.tool) for e in asks] == [(call.call_id, "file_size")], "announced"


async def test_a_client_that_never_answers_becomes_an_error_the_model_reads(
    ts_env: WorkflowEnvironment,
) -> None:
    async with serving(ts_env.client, laptop) as tq:
        handle, _ = await _parked_at_client(ts_env, tq)
        await ts_env.sleep(timedelta(seconds=61))
        out = await handle.result()
    assert out.final_output == (
        "size: Error: file_size did not run on the client (no answer within 60 seconds)."
    )
    hist = await handle.fetch_history()
    timers = [e for e in hist.events if e.event_type == EventType.EVENT_TYPE_TIMER_FIRED]
    assert timers, "the run's own durable timer ended the wait"
    assert json.dumps(out.final_output)


def phone_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("confirm_on_phone")
    if not done:
        return ModelReply.call("confirm_on_phone", {"question": "Ship the order?"})
    return ModelReply.say(f"confirmed: {done[-1].output}")


@client_tool(answer_timeout=7 * 86400)
def confirm_on_phone(question: str) -> bool:
    """Ask the user on their phone.

    Args:
        question: What to ask.
    """
    return True


phone = Agent(
    name="Phone helper",
    tools=[confirm_on_phone],
    model=ScriptedModel(phone_script, "tests.client_tools.phone"),
)


async def test_a_client_call_waits_days_across_continue_as_new_and_a_new_worker(
    ts_env: WorkflowEnvironment,
) -> None:
    """The call waits two days for the client while the run continues as new (its history
    grown by refused signals), then a client answers it on another worker."""
    from tests.workflows.test_compaction import grow_until_continued

    client = ts_env.client
    config = RunConfigSpec(continue_as_new_after_events=MIN_CONTINUE_AS_NEW_EVENTS)
    async with serving(client, phone, cache=0) as tq:
        handle = await client.start_workflow(
            "AgentRun",
            RunInput(agent=phone.name, input="ship it?", run_config=config),
            id=f"phone-{tq}",
            task_queue=tq,
            result_type=RunOutput,
        )

        async def waits_at_the_client() -> bool:  # (its answer timeout's timer is set)
            events = (await handle.fetch_history()).events
            return any(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED for e in events)

        await wait_for(waits_at_the_client, what="the call to wait for the client")
        before = await _wait_pending(handle, "input")
        await ts_env.sleep(timedelta(days=2))
        await grow_until_continued(client, handle.id)
    async with serving(client, phone, task_queue=tq):
        after = await _status(client, handle.id)
        assert after.run_id != before.run_id, "the run continued as new"
        [call] = after.pending
        assert (call.call_id, call.kind) == (before.pending[0].call_id, "input")
        assert call.input_request is not None and call.input_request.server == "client"
        await handle.execute_update(
            "answer", AnswerInput(call_id=call.call_id, content={"output": True})
        )
        out = await handle.result()
    assert out.final_output == "confirmed: true"
