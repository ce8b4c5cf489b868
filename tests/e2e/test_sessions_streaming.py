"""Sessions (conversations across runs) and event streaming, on the real dev server."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal

import pytest
from temporalio.client import Client

from hitl import (
    Agent,
    ModelReply,
    ModelRequest,
    Runner,
    RunState,
    ScriptedModel,
    TemporalSession,
    function_tool,
    stream_events,
)
from hitl.wire import RunEvent, RunOutput
from hitl.worker.devserver import DevServer
from tests.agents import support_agent, weather_agent
from tests.helpers import WorkerProcess, queue_name, serving, wait_for


@function_tool(needs_approval=True)
def book_table(name: str) -> str:
    """Book a table.

    Args:
        name: Who the table is for.
    """
    return f"Booked a table for {name}"


def concierge_script(req: ModelRequest) -> ModelReply:
    users = [i for i in req.input if i.get("role") == "user"]
    said = " ".join(str(u.get("content")) for u in users)
    name = re.search(r"my name is (\w+)", said)
    text = req.last_user_text()
    if "my name is" in text:
        return ModelReply.say(f"Nice to meet you, {name.group(1) if name else '?'}")
    if "book" in text:
        done = req.results_for("book_table")
        if not done:
            return ModelReply.call("book_table", {"name": name.group(1) if name else "nobody"})
        return ModelReply.say(done[0].output or "")
    booked = [str(i.get("output")) for i in req.input if i.get("type") == "function_call_output"]
    return ModelReply.say(f"I know {len(users)} user messages; {'; '.join(booked) or 'nothing'}")


concierge = Agent(
    name="Concierge",
    tools=[book_table],
    model=ScriptedModel(concierge_script, "tests.sessions.concierge"),
)


async def test_session_spans_three_runs_with_a_pause_in_the_middle(dev_client: Client) -> None:
    session = TemporalSession(f"conv-{queue_name()}", client=dev_client)
    async with serving(dev_client, concierge) as tq:
        session.task_queue = tq
        opts = {"client": dev_client, "task_queue": tq, "serve": False, "session": session}
        first = await Runner.run(concierge, "Hi, my name is Ada", **opts)  # type: ignore[arg-type]
        assert first.final_output == "Nice to meet you, Ada"

        second = await Runner.run(concierge, "Please book a table", **opts)  # type: ignore[arg-type]
        assert [i.name for i in second.interruptions] == ["book_table"]
        assert second.interruptions[0].arguments == '{"name": "Ada"}', "run 2 saw run 1"
        state = await RunState.from_string(concierge, second.to_state().to_string())
        state.approve(state.interruptions[0])
        resumed = await Runner.run(concierge, state, client=dev_client, task_queue=tq, serve=False)
        assert resumed.final_output == "Booked a table for Ada"

        third = await Runner.run(concierge, "What did you do?", **opts)  # type: ignore[arg-type]
        items = await session.get_items()
    assert third.final_output == "I know 3 user messages; Booked a table for Ada"
    roles = [i.get("role") or i.get("type") for i in items]
    assert roles == [
        "user",
        "assistant",  # run 1
        "user",
        "function_call",
        "function_call_output",
        "assistant",  # run 2 (resumed)
        "user",
        "assistant",  # run 3
    ]
    # Each run's own transcript starts from the session: to_input_list() is the conversation.
    assert len(third.to_input_list()) == len(items)


async def test_subscriber_sees_the_approval_request_before_deciding(dev_client: Client) -> None:
    async with serving(dev_client, support_agent) as tq:
        streamed = Runner.run_streamed(
            support_agent, "cancel order 4", client=dev_client, task_queue=tq, serve=False
        )
        events = [e async for e in streamed.run_events()]
        kinds = [e.type for e in events]
        assert kinds == ["tool_called", "approval_requested", "paused"]
        requested = events[1]
        assert (requested.tool, requested.call_id) == (
            "cancel_order",
            streamed.interruptions[0].call_id,
        )
        assert [e.offset for e in events] == [0, 1, 2]

        state = streamed.to_state()
        state.approve(streamed.interruptions[0], approver="dana")
        resumed = Runner.run_streamed(
            support_agent, state, client=dev_client, task_queue=tq, serve=False
        )
        after = [e async for e in resumed.run_events()]
    assert [e.type for e in after] == [
        "approval_decided",
        "resumed",
        "tool_started",
        "tool_finished",
        "message",
        "final_output",
    ]
    assert after[0].data["approver"] == "dana" and after[0].text == "approve"
    assert after[0].offset == 3, "the resumed stream continues where the first stopped"
    assert resumed.final_output == "cancel_order: Cancelled order 4"


async def test_reconnecting_subscriber_gets_every_event_once(dev_client: Client) -> None:
    async with serving(dev_client, support_agent) as tq:
        result = await Runner.run(
            support_agent,
            "cancel order 6 and email a refund notice",
            client=dev_client,
            task_queue=tq,
            serve=False,
        )
        wid = result.workflow_id
        # A subscriber reads a little, then its connection goes away.
        seen: list[RunEvent] = []
        async for event in stream_events(dev_client, wid):
            seen.append(event)
            if len(seen) == 3:
                break
        # The run moves on while nobody listens.
        state = result.to_state()
        for item in result.interruptions:
            state.approve(item)
        await Runner.run(support_agent, state, client=dev_client, task_queue=tq, serve=False)
        # Reconnect after the last event seen.
        last = seen[-1].offset
        assert last is not None
        async for event in stream_events(dev_client, wid, from_offset=last + 1):
            seen.append(event)
        everything = [e async for e in stream_events(dev_client, wid)]
        out = await dev_client.get_workflow_handle(wid, result_type=RunOutput).result()
    assert [e.offset for e in seen] == list(range(len(everything))), "no loss, no duplicates"
    assert [e.model_dump() for e in seen] == [e.model_dump() for e in everything]
    assert seen[-1].type == "final_output" and seen[-1].text == out.final_output
    assert sum(e.type == "approval_requested" for e in seen) == 2


async def test_model_text_deltas_stream_from_openai_compatible_servers(
    dev_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hitl import OpenAIModel
    from tests.fake_openai import Reply, chat_stream, fake_openai, responses_stream

    monkeypatch.setenv("HITL_TEST_STREAM_KEY", "sk-test-stream")
    with fake_openai() as fake:
        agents = [
            Agent(
                name=f"Talker ({api})",
                model=OpenAIModel(
                    "m", api=api, base_url=fake.base_url, api_key_env="HITL_TEST_STREAM_KEY"
                ),
            )
            for api in ("responses", "chat")
        ]
        fake.queue("/v1/responses", Reply({}, events=responses_stream(["Hel", "lo ", "there"])))
        fake.queue("/v1/chat/completions", Reply({}, events=chat_stream(["Good", "bye"])))
        async with serving(dev_client, *agents) as tq:
            outputs = []
            for agent in agents:
                streamed = Runner.run_streamed(
                    agent, "hi", client=dev_client, task_queue=tq, serve=False
                )
                events = [e async for e in streamed.run_events()]
                deltas = [e.text for e in events if e.type == "model_text_delta"]
                kinds = [e.type for e in events if e.type != "model_text_delta"]
                assert kinds == ["message", "final_output"]
                first_message = next(i for i, e in enumerate(events) if e.type == "message")
                assert all(e.type == "model_text_delta" for e in events[:first_message])
                outputs.append(("".join(d or "" for d in deltas), streamed.final_output))
        assert fake.requests_to("/v1/responses")[0].body["stream"] is True
        assert fake.requests_to("/v1/chat/completions")[0].body["stream"] is True
    assert outputs == [("Hello there", "Hello there"), ("Goodbye", "Goodbye")]


@pytest.mark.timeout(150)
async def test_a_stream_whose_poll_times_out_follows_the_run_again_from_its_offset(
    dev_server: DevServer, dev_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker that answers a closed run's stream query is paused (SIGSTOP) past the server's
    30 s query timeout: the stream polls again from the same offset and loses nothing."""
    caplog.set_level(logging.WARNING, logger="hitl.stream")
    tq = queue_name("stall")
    with WorkerProcess(dev_server.address, tq) as worker:
        assert worker.process is not None
        done = await Runner.run(
            weather_agent, "hi there", client=dev_client, task_queue=tq, serve=False
        )
        expected = [e async for e in stream_events(dev_client, done.workflow_id)]
        os.kill(worker.process.pid, signal.SIGSTOP)
        try:
            following = asyncio.create_task(_collect(dev_client, done.workflow_id))
            await wait_for(
                lambda: "following it again from offset 0" in caplog.text or following.done(),
                timeout=90,
                what="the stream's first poll to time out",
            )
        finally:
            os.kill(worker.process.pid, signal.SIGCONT)
        events = await asyncio.wait_for(following, 60)
    assert [e.model_dump() for e in events] == [e.model_dump() for e in expected]
    assert [e.offset for e in events] == list(range(len(expected)))
    assert events[-1].type == "final_output" and events[-1].text == done.final_output


async def _collect(client: Client, workflow_id: str) -> list[RunEvent]:
    return [e async for e in stream_events(client, workflow_id)]
