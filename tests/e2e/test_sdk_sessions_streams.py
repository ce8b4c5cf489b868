"""The SDK's client-managed sessions and stream events, on the real dev server.

The seeds' code blocks (and the SDK examples the seeds point to) are ported by changing their
imports only; the durable variant parks a run, kills its worker, resumes it from another
process with another `SQLiteSession` object over the same file, and counts the session's items.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from hitl import (
    Agent,
    ItemHelpers,
    Runner,
    RunState,
    SQLiteSession,
    function_tool,
)
from hitl.worker.devserver import DevServer
from tests import sdk_ports
from tests.fake_openai import Reply, fake_openai, responses_stream
from tests.helpers import ROOT, WorkerProcess, queue_name, serving
from tests.sdk_ports import concierge, trace


@pytest.fixture
def seed_env(dev_server: DevServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """What the seeds' scripts take from the environment: the cluster and a queue of their own
    (no worker polls it, so `Runner.run` serves the agents in this process)."""
    tq = queue_name("sdk")
    monkeypatch.setenv("TEMPORAL_ADDRESS", dev_server.address)
    monkeypatch.setenv("HITL_TASK_QUEUE", tq)
    return tq


# ----------------------------------------------------------------------------- sessions


async def test_seed_002_sessions_block_runs_with_its_imports_changed(
    seed_env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """002, "Automatic conversation management with Sessions"."""
    monkeypatch.setenv("HITL_DEFAULT_MODEL", f"scripted:{sdk_ports.ASSISTANT_MODEL.name}")

    async def main():  # type: ignore[no-untyped-def]
        agent = Agent(name="Assistant", instructions="Reply very concisely.")

        # Create session instance
        session = SQLiteSession("conversation_123")

        thread_id = "thread_123"  # Example thread ID
        with trace(workflow_name="Conversation", group_id=thread_id):
            # First turn
            result = await Runner.run(
                agent, "What city is the Golden Gate Bridge in?", session=session
            )
            print(result.final_output)
            # San Francisco

            # Second turn - agent automatically remembers previous context
            result = await Runner.run(agent, "What state is it in?", session=session)
            print(result.final_output)
            # California

    await main()
    # The scripted model says "California" only when the first turn is in what it is sent.
    assert capsys.readouterr().out.splitlines() == ["San Francisco", "California"]


class ListSession:
    """The SDK's session protocol and nothing else: four coroutines over a list."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.items: list[Any] = []
        self.writes = 0

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return list(self.items[-limit:] if limit else self.items)

    async def add_items(self, items: list[Any]) -> None:
        self.writes += 1
        self.items.extend(items)

    async def pop_item(self) -> Any | None:
        return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        self.items.clear()


async def test_any_object_with_the_session_protocol_is_a_session(dev_client: Client) -> None:
    session = ListSession("custom")
    async with serving(dev_client, concierge) as tq:
        opts: dict[str, Any] = {"client": dev_client, "task_queue": tq, "serve": False}
        first = await Runner.run(concierge, "Hi, my name is Ada", session=session, **opts)
        paused = await Runner.run(concierge, "Please book a table", session=session, **opts)
        assert paused.interruptions[0].arguments == '{"name": "Ada"}', "run 2 saw run 1"
        assert session.writes == 1, "a paused run writes nothing yet"
        state = paused.to_state()
        state.approve(state.interruptions[0])
        done = await Runner.run(concierge, state, session=session, **opts)
        again = await Runner.run(concierge, state, session=session, **opts)
    assert first.final_output == "Nice to meet you, Ada"
    assert done.final_output == again.final_output == "Booked a table for Ada"
    assert session.writes == 2, "reading the finished run again wrote nothing"
    kinds = [i.get("role") or i.get("type") for i in session.items]
    assert kinds == [
        "user",
        "assistant",
        "user",
        "function_call",
        "function_call_output",
        "assistant",
    ]
    assert session.items == done.to_input_list()


async def test_session_input_callback_chooses_what_the_run_starts_from(
    dev_client: Client,
) -> None:
    # The SDK's `RunConfig(session_input_callback=...)`: here it runs on the client, before the
    # run starts; the session keeps every turn whatever the run was given.
    from hitl import RunConfig, UserError

    async def forget(history: list[Any], new: list[Any]) -> list[Any]:
        return new  # the run starts from nothing of the session

    def last_turn(history: list[Any], new: list[Any]) -> list[Any]:
        return [*history[-2:], *new]

    session = ListSession("callback")
    async with serving(dev_client, concierge) as tq:
        opts: dict[str, Any] = {"client": dev_client, "task_queue": tq, "serve": False}
        await Runner.run(concierge, "Hi, my name is Ada", session=session, **opts)
        await Runner.run(concierge, "Hi, my name is Bob", session=session, **opts)
        kept = RunConfig(session_input_callback=last_turn)
        paused = await Runner.run(
            concierge, "Please book a table", session=session, run_config=kept, **opts
        )
        assert paused.interruptions[0].arguments == '{"name": "Bob"}', "only the last turn"
        assert [i.get("content") for i in paused.input if i.get("role") == "user"] == [
            "Hi, my name is Bob",
            "Please book a table",
        ]
        blank = RunConfig(session_input_callback=forget)
        forgot = await Runner.run(
            concierge, "Please book a table", session=session, run_config=blank, **opts
        )
        assert forgot.interruptions[0].arguments == '{"name": "nobody"}'
        state = forgot.to_state()
        state.approve(state.interruptions[0])
        done = await Runner.run(concierge, state, session=session, **opts)
        assert done.final_output == "Booked a table for nobody"
        bad = RunConfig(session_input_callback=lambda history, new: history)
        with pytest.raises(UserError, match="must keep the new input items"):
            await Runner.run(concierge, "Book again", session=session, run_config=bad, **opts)
    users = [i.get("content") for i in session.items if i.get("role") == "user"]
    assert users == ["Hi, my name is Ada", "Hi, my name is Bob", "Please book a table"], (
        "every finished turn is in the session once; the paused one is not written yet"
    )


RESUME = """
import asyncio, sys
from hitl import Runner, RunState, SQLiteSession
from tests.sdk_ports import concierge

async def main():
    state_path, db, queue = sys.argv[1:]
    state = await RunState.from_string(concierge, open(state_path).read())
    for item in state.interruptions:
        state.approve(item)
    session = SQLiteSession("ticket-7", db)
    result = await Runner.run(concierge, state, session=session, task_queue=queue, serve=False)
    print(result.final_output)

asyncio.run(main())
"""


async def test_a_parked_run_resumed_in_another_process_writes_its_turn_once(
    dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    """Park, kill the worker, resume from another process with another `SQLiteSession` over
    the same file, read the result again here: each item is in the session exactly once."""
    db, tq = tmp_path / "conversations.db", queue_name("sdk-durable")
    opts: dict[str, Any] = {"client": dev_client, "task_queue": tq, "serve": False}
    worker = WorkerProcess(dev_server.address, tq, agents="tests.sdk_ports:concierge").start()
    try:
        session = SQLiteSession("ticket-7", db)
        first = await Runner.run(concierge, "Hi, my name is Ada", session=session, **opts)
        assert first.final_output == "Nice to meet you, Ada"
        paused = await Runner.run(concierge, "Please book a table", session=session, **opts)
        assert paused.interruptions[0].arguments == '{"name": "Ada"}'
        saved = tmp_path / "state.json"
        saved.write_text(paused.to_state().to_string())
        assert len(await session.get_items()) == 2, "the parked turn is not written yet"
        session.close()
    finally:
        worker.kill()

    with WorkerProcess(dev_server.address, tq, agents="tests.sdk_ports:concierge"):
        resumed = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", RESUME, str(saved), str(db), tq],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT), "TEMPORAL_ADDRESS": dev_server.address},
        )
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip() == "Booked a table for Ada"

        # This process reads the finished run again (a retry after a crash, say).
        session = SQLiteSession("ticket-7", db)
        state = await RunState.from_string(concierge, saved.read_text())
        for item in state.interruptions:
            state.approve(item)
        again = await Runner.run(concierge, state, session=session, **opts)
        assert again.final_output == "Booked a table for Ada"

        third = await Runner.run(concierge, "What did you do?", session=session, **opts)
        items = await session.get_items()
    assert third.final_output == "I know 3 user messages; Booked a table for Ada"
    kinds = [i.get("role") or i.get("type") for i in items]
    assert kinds == [
        "user",
        "assistant",  # run 1
        "user",
        "function_call",
        "function_call_output",
        "assistant",  # run 2, written by the other process
        "user",
        "assistant",  # run 3
    ]
    texts = [json.dumps(i, sort_keys=True) for i in items]
    assert len(set(texts)) == len(texts), "no item twice"
    assert json.loads(saved.read_text())["session_history"] == 2


# ----------------------------------------------------------------------------- stream events


async def test_streaming_guide_run_item_events_block(
    seed_env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SDK's streaming guide, "Run item events and agent events" (002 links it)."""
    monkeypatch.setenv("HITL_DEFAULT_MODEL", f"scripted:{sdk_ports.JOKES_MODEL.name}")
    import random

    @function_tool
    def how_many_jokes() -> int:
        return random.randint(1, 10)

    async def main():  # type: ignore[no-untyped-def]
        agent = Agent(
            name="Joker",
            instructions="First call the `how_many_jokes` tool, then tell that many jokes.",
            tools=[how_many_jokes],
        )

        result = Runner.run_streamed(
            agent,
            input="Hello",
        )
        print("=== Run starting ===")

        async for event in result.stream_events():
            # We'll ignore the raw responses event deltas
            if event.type == "raw_response_event":
                continue
            # When the agent updates, print that
            elif event.type == "agent_updated_stream_event":
                print(f"Agent updated: {event.new_agent.name}")
                continue
            # When items are generated, print them
            elif event.type == "run_item_stream_event":
                if event.item.type == "tool_call_item":
                    print("-- Tool was called")
                elif event.item.type == "tool_call_output_item":
                    print(f"-- Tool output: {event.item.output}")
                elif event.item.type == "message_output_item":
                    print(f"-- Message output:\n {ItemHelpers.text_message_output(event.item)}")
                else:
                    pass  # Ignore other event types

        print("=== Run complete ===")

    await main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == [
        "=== Run starting ===",
        "Agent updated: Joker",
        "-- Tool was called",
        lines[3],
    ]
    n = int(lines[3].removeprefix("-- Tool output: "))
    assert lines[4:] == [
        "-- Message output:",
        " " + " ".join(f"Joke {i}." for i in range(1, n + 1)),
        "=== Run complete ===",
    ]


async def test_streaming_guide_raw_response_events_block(
    seed_env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SDK's streaming guide, "Raw response events", against the local OpenAI-wire server."""
    from openai.types.responses import ResponseTextDeltaEvent

    with fake_openai() as fake:
        monkeypatch.setenv("HITL_DEFAULT_MODEL", "gpt-test")
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-stream")
        fake.queue(
            "/v1/responses", Reply({}, events=responses_stream(["Why ", "did the ", "chicken..."]))
        )

        async def main():  # type: ignore[no-untyped-def]
            agent = Agent(
                name="Joker",
                instructions="You are a helpful assistant.",
            )

            result = Runner.run_streamed(agent, input="Please tell me 5 jokes.")
            async for event in result.stream_events():
                if event.type == "raw_response_event" and isinstance(
                    event.data, ResponseTextDeltaEvent
                ):
                    print(event.data.delta, end="", flush=True)

        await main()
        assert fake.requests_to("/v1/responses")[0].body["stream"] is True
    assert capsys.readouterr().out == "Why did the chicken..."


async def test_sdk_streaming_hitl_example_runs_with_its_imports_changed(
    seed_env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`examples/agent_patterns/human_in_the_loop_stream.py`, which 003 names for streaming
    approvals: stream, approve what is pending, resume with `run_streamed(agent, state)`."""
    monkeypatch.setenv("HITL_DEFAULT_MODEL", f"scripted:{sdk_ports.WEATHER_MODEL.name}")
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # the person at the terminal

    async def _needs_temperature_approval(_ctx, params, _call_id) -> bool:  # type: ignore[no-untyped-def]
        """Check if temperature tool needs approval."""
        return "Oakland" in params.get("city", "")

    @function_tool(
        # Dynamic approval: only require approval for Oakland
        needs_approval=_needs_temperature_approval
    )
    async def get_temperature(city: str) -> str:
        """Get the temperature for a given city.

        Args:
            city: The city to get temperature for.

        Returns:
            Temperature information for the city.
        """
        return f"The temperature in {city} is 20° Celsius"

    @function_tool
    async def get_weather(city: str) -> str:
        """Get the weather for a given city.

        Args:
            city: The city to get weather for.

        Returns:
            Weather information for the city.
        """
        return f"The weather in {city} is sunny."

    async def confirm(question: str) -> bool:
        loop = asyncio.get_event_loop()
        answer = await loop.run_in_executor(None, input, f"{question} (y/n): ")
        return answer.strip().lower() in ["y", "yes"]

    async def main():  # type: ignore[no-untyped-def]
        """Run the human-in-the-loop example."""
        main_agent = Agent(
            name="Weather Assistant",
            instructions=(
                "You are a helpful weather assistant. "
                "Answer questions about weather and temperature using the available tools."
            ),
            tools=[get_temperature, get_weather],
        )

        # Run the agent with streaming
        result = Runner.run_streamed(
            main_agent,
            "What is the weather and temperature in Oakland?",
        )
        async for _ in result.stream_events():
            pass  # Process streaming events silently or could print them

        # Handle interruptions
        while len(result.interruptions) > 0:
            print("\n" + "=" * 80)
            print("Human-in-the-loop: approval required for the following tool calls:")
            print("=" * 80)

            state = result.to_state()

            for interruption in result.interruptions:
                print("\nTool call details:")
                print(f"  Agent: {interruption.agent.name}")
                print(f"  Tool: {interruption.name}")
                print(f"  Arguments: {interruption.arguments}")

                confirmed = await confirm("\nDo you approve this tool call?")

                if confirmed:
                    print(f"✓ Approved: {interruption.name}")
                    state.approve(interruption)
                else:
                    print(f"✗ Rejected: {interruption.name}")
                    state.reject(interruption)

            # Resume execution with streaming
            print("\nResuming agent execution...")
            result = Runner.run_streamed(main_agent, state)
            async for _ in result.stream_events():
                pass  # Process streaming events silently or could print them

        print("\n" + "=" * 80)
        print("Final Output:")
        print("=" * 80)
        print(result.final_output)
        print("\nDone!")

    await main()
    out = capsys.readouterr().out
    assert "\nDo you approve this tool call? (y/n): ✓ Approved: get_temperature" in out
    assert "  Agent: Weather Assistant\n  Tool: get_temperature\n" in out
    assert '  Arguments: {"city": "Oakland"}' in out
    assert out.endswith(
        "Final Output:\n"
        + "=" * 80
        + "\nThe weather in Oakland is sunny. The temperature in Oakland is 20° Celsius\n\nDone!\n"
    )


async def test_stream_events_are_the_sdks_classes_and_names(dev_client: Client) -> None:
    """Handoffs, reasoning, tool calls, outputs and the approval a call waits for as the SDK
    names them; the run's own events (decisions, pauses) stay available from `run_events()`."""
    from hitl import (
        AgentUpdatedStreamEvent,
        HandoffCallItem,
        RunItemStreamEvent,
        ToolCallItem,
        ToolCallOutputItem,
    )
    from tests.agents import data_agent, weather_agent

    jokes = sdk_ports.joker
    async with serving(dev_client, weather_agent, jokes) as tq:
        opts: dict[str, Any] = {"client": dev_client, "task_queue": tq, "serve": False}
        streamed = Runner.run_streamed(weather_agent, "weather in San Francisco?", **opts)
        events = [e async for e in streamed.stream_events()]
        state = streamed.to_state()
        state.approve(state.interruptions[0])
        resumed = Runner.run_streamed(weather_agent, state, **opts)
        after = [e async for e in resumed.stream_events()]

        thinking = Runner.run_streamed(jokes, "Hello", **opts)
        joke_events = [e async for e in thinking.stream_events()]

        rich = Runner.run_streamed(weather_agent, "weather in San Francisco?", **opts)
        rich_kinds = [e.type for e in [e async for e in rich.run_events()]]

    def names(evs: list[Any]) -> list[str]:
        return [
            f"agent:{e.new_agent.name}" if e.type == "agent_updated_stream_event" else e.name
            for e in evs
            if e.type != "raw_response_event"
        ]

    assert names(events) == [
        "agent:Basic test agent",
        "handoff_requested",
        "handoff_occured",
        "agent:Data agent",
        "tool_called",
        "tool_approval_requested",
    ]
    # The call that waits, as the SDK's `ToolApprovalItem` (what `interruptions` will hold).
    asked = events[5]
    assert isinstance(asked, RunItemStreamEvent) and asked.item.type == "tool_approval_item"
    [waiting] = streamed.interruptions
    assert (asked.item.call_id, asked.item.name, asked.item.arguments) == (  # type: ignore[union-attr]
        waiting.call_id,
        waiting.name,
        waiting.arguments,
    )
    assert asked.item.agent is data_agent  # type: ignore[union-attr]
    assert isinstance(events[0], AgentUpdatedStreamEvent) and events[0].new_agent is weather_agent
    assert events[3].new_agent is data_agent  # type: ignore[union-attr]
    handoff = events[1]
    assert isinstance(handoff, RunItemStreamEvent) and isinstance(handoff.item, HandoffCallItem)
    assert handoff.item.raw_item["name"] == "transfer_to_data_agent"
    call = events[4]
    assert isinstance(call, RunItemStreamEvent) and isinstance(call.item, ToolCallItem)
    assert call.item.type == "tool_call_item" and call.item.agent is data_agent
    assert json.loads(call.item.raw_item["arguments"]) == {"location": "San Francisco"}
    assert call.item.call_id == streamed.interruptions[0].call_id

    assert names(after) == ["agent:Data agent", "tool_output", "message_output_created"]
    output = after[1]
    assert isinstance(output, RunItemStreamEvent) and isinstance(output.item, ToolCallOutputItem)
    assert output.item.output == "The weather in San Francisco is sunny"
    assert output.item.raw_item == resumed.new_items[-2].raw_item
    assert ItemHelpers.text_message_output(after[2].item) == resumed.final_output  # type: ignore[union-attr]

    assert names(joke_events)[:3] == ["agent:Joker", "reasoning_item_created", "tool_called"]
    reasoning = joke_events[1].item  # type: ignore[union-attr]
    assert reasoning.type == "reasoning_item" and reasoning.raw_item["id"] == "rs_1"

    assert rich_kinds[:4] == ["tool_called", "tool_finished", "handoff", "tool_called"]
    assert rich_kinds[-2:] == ["approval_requested", "paused"]
