"""Client-managed sessions (`SQLiteSession`, the SDK's protocol, writing a turn once) and the
translation of a run's events into the SDK's stream events, without a server."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hitl import (
    Agent,
    AgentUpdatedStreamEvent,
    HandoffCallItem,
    HandoffOutputItem,
    ItemHelpers,
    MessageOutputItem,
    RawResponsesStreamEvent,
    ReasoningItem,
    RunItemStreamEvent,
    RunResult,
    RunState,
    ScriptedModel,
    Session,
    SQLiteSession,
    TemporalSession,
    ToolApprovalItem,
    ToolCallItem,
    ToolCallOutputItem,
    UserError,
)
from hitl.model import ModelReply
from hitl.sdk_events import SdkEvents
from hitl.session import client_session, write_turn
from hitl.wire import RunEvent, RunItem, RunStatus

model = ScriptedModel(lambda req: ModelReply.say("x"), "tests.unit.sessions.noop")
helper = Agent(name="Helper", model=model)
root = Agent(name="Root", model=model, handoffs=[helper])


# ----------------------------------------------------------------------------- SQLiteSession


def test_sqlite_session_behaves_like_the_sdks(tmp_path: Path) -> None:
    async def go() -> None:
        s = SQLiteSession("conv")  # in memory by default
        assert await s.get_items() == [] and await s.pop_item() is None
        await s.add_items([{"role": "user", "content": str(n)} for n in range(5)])
        assert [i["content"] for i in await s.get_items()] == ["0", "1", "2", "3", "4"]
        assert [i["content"] for i in await s.get_items(limit=2)] == ["3", "4"], "latest, in order"
        assert (await s.pop_item()) == {"role": "user", "content": "4"}
        other = SQLiteSession("other")
        assert await other.get_items() == [], "sessions are apart (and so are memory databases)"
        await s.clear_session()
        assert await s.get_items() == []

        db = tmp_path / "conversations.db"
        kept = SQLiteSession("conv", db, session_settings={"limit": 1})
        await kept.add_items([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
        kept.close()
        again = SQLiteSession("conv", str(db))
        assert [i["content"] for i in await again.get_items()] == ["a", "b"], "kept in the file"
        assert [
            i["content"]
            for i in await SQLiteSession("conv", db, session_settings={"limit": 1}).get_items()
        ] == ["b"]

    asyncio.run(go())


def test_sqlite_session_keeps_the_sdks_tables(tmp_path: Path) -> None:
    """A database the SDK wrote reads here (same tables and columns); a bad row is skipped."""
    db = tmp_path / "sdk.db"
    asyncio.run(SQLiteSession("s", db).add_items([{"role": "user", "content": "hi"}]))
    conn = sqlite3.connect(db)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(agent_messages)")]
    assert cols == ["id", "session_id", "message_data", "created_at"]
    assert conn.execute("SELECT session_id FROM agent_sessions").fetchall() == [("s",)]
    conn.execute("INSERT INTO agent_messages (session_id, message_data) VALUES ('s', 'not json')")
    conn.commit()
    conn.close()
    session = SQLiteSession("s", db)
    assert asyncio.run(session.get_items()) == [{"role": "user", "content": "hi"}]
    assert asyncio.run(session.pop_item()) == {"role": "user", "content": "hi"}, "bad row dropped"


class ListSession:
    """The protocol and nothing else."""

    def __init__(self) -> None:
        self.session_id = "list"
        self.items: list[Any] = []

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return list(self.items[-limit:] if limit else self.items)

    async def add_items(self, items: list[Any]) -> None:
        self.items.extend(items)

    async def pop_item(self) -> Any | None:
        return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        self.items.clear()


def test_what_counts_as_a_client_managed_session() -> None:
    custom = ListSession()
    assert isinstance(custom, Session) and client_session(custom) is custom
    assert isinstance(SQLiteSession("x"), Session)
    assert client_session(None) is None
    assert client_session("ticket-1") is None, "an id names a Temporal session"
    assert client_session(TemporalSession("ticket-1")) is None
    with pytest.raises(UserError, match="Session protocol"):
        client_session(object())  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- writing a turn


def _result(history: int | None, *, paused: bool = False, input_known: bool = True) -> RunResult:
    past = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "ok"}]
    own = [{"role": "user", "content": "book it"}]
    produced = [
        RunItem(
            type="tool_call_item",
            agent_id="Root",
            agent_name="Root",
            raw_item={"type": "function_call", "call_id": "m1", "name": "book", "arguments": "{}"},
        ),
        RunItem(
            type="tool_call_output_item",
            agent_id="Root",
            agent_name="Root",
            raw_item={"type": "function_call_output", "call_id": "m1", "output": "booked"},
        ),
    ]
    pending = [
        ToolApprovalItem(
            call_id="c1", name="transfer_to_helper", arguments="{}", agent=root, agent_id="Root"
        )
    ]
    return RunResult(
        final_output=None if paused else "booked",
        interruptions=pending if paused else [],
        new_items=produced,
        input=[*past, *own] if input_known else [],
        last_agent=root,
        workflow_id="wf-1",
        run_id="r1",
        usage=RunStatus(workflow_id="wf-1", run_id="r1", phase="completed", agent="Root").usage,
        decisions=[],
        status=RunStatus(workflow_id="wf-1", run_id="r1", phase="completed", agent="Root"),
        root_agent=root,
        session_history=history,
    )


def test_a_completed_turn_is_written_once_and_a_paused_one_not_yet(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def go() -> ListSession:
        s = ListSession()
        s.items = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "ok"}]
        assert not await write_turn(s, _result(2, paused=True)), "a call without its output"
        assert not await write_turn(s, _result(None)), "not started from a client session"
        assert await write_turn(s, _result(2))
        await s.add_items([{"role": "user", "content": "later"}])
        assert not await write_turn(s, _result(2)), "read again (even after later turns)"
        with caplog.at_level(logging.WARNING, logger="hitl"):
            assert not await write_turn(ListSession(), _result(2, input_known=False))
        assert "was not updated" in caplog.text
        return s

    s = asyncio.run(go())
    assert [i.get("content") or i.get("type") for i in s.items] == [
        "earlier",
        "ok",
        "book it",
        "function_call",
        "function_call_output",
        "later",
    ]


def test_the_state_carries_how_many_items_came_from_the_session() -> None:
    result = _result(2, paused=True)
    state = result.to_state()
    assert state.session_history == 2
    data = json.loads(state.to_string())
    assert data["$schemaVersion"] == 4 and data["session_history"] == 2
    loaded = asyncio.run(RunState.from_json(root, data))
    assert loaded.session_history == 2
    assert "session_history" not in json.loads(_result(None, paused=True).to_state().to_string())
    for bad in (-1, "2", 2.5, True):
        with pytest.raises(UserError, match="session_history"):
            asyncio.run(RunState.from_json(root, {**data, "session_history": bad}))


# ----------------------------------------------------------------------------- SDK stream events


def _ev(kind: Any, agent: str = "Root", **fields: Any) -> RunEvent:
    return RunEvent(type=kind, agent=agent, **fields)


def test_run_events_become_the_sdks_stream_events() -> None:
    sdk = SdkEvents(root)
    call = {
        "type": "function_call",
        "call_id": "m1",
        "name": "transfer_to_helper",
        "arguments": "{}",
    }
    out = {"type": "function_call_output", "call_id": "m1", "output": "ok"}
    msg = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Hi there"}],
    }
    stream = [
        _ev("model_text_delta", text="Hi "),
        _ev(
            "reasoning",
            data={"item_type": "reasoning_item", "raw_item": {"type": "reasoning", "id": "rs"}},
        ),
        _ev(
            "tool_called",
            call_id="c1",
            tool="transfer_to_helper",
            data={"item_type": "handoff_call_item", "raw_item": call},
        ),
        _ev(
            "tool_finished",
            call_id="c1",
            text="ok",
            data={"item_type": "handoff_output_item", "raw_item": out},
        ),
        _ev("handoff", agent="Helper", data={"from": "Root", "to": "Helper"}),
        _ev(
            "approval_requested",
            agent="Helper",
            call_id="c2",
            tool="act",
            data={"arguments": '{"x": 1}', "agent_id": "Helper", "model_call_id": "m2"},
        ),
        _ev(
            "message",
            agent="Helper",
            text="Hi there",
            data={"item_type": "message_output_item", "raw_item": msg},
        ),
        _ev("final_output", agent="Helper", text="Hi there"),
    ]
    events = [e for ev in stream for e in sdk.translate(ev)]
    assert [type(e).__name__ for e in events] == [
        "AgentUpdatedStreamEvent",
        "RawResponsesStreamEvent",
        "RunItemStreamEvent",
        "RunItemStreamEvent",
        "RunItemStreamEvent",
        "AgentUpdatedStreamEvent",
        "RunItemStreamEvent",
        "RunItemStreamEvent",
    ]
    first, delta, reasoning, hcall, hout, updated, asked, message = events
    assert isinstance(asked, RunItemStreamEvent) and asked.name == "tool_approval_requested"
    assert asked.item.type == "tool_approval_item" and asked.item.agent is helper
    assert (asked.item.call_id, asked.item.name, asked.item.arguments) == ("c2", "act", '{"x": 1}')  # type: ignore[union-attr]
    assert isinstance(first, AgentUpdatedStreamEvent) and first.new_agent is root
    assert isinstance(delta, RawResponsesStreamEvent) and delta.type == "raw_response_event"
    from openai.types.responses import ResponseTextDeltaEvent

    assert isinstance(delta.data, ResponseTextDeltaEvent) and delta.data.delta == "Hi "
    assert isinstance(reasoning, RunItemStreamEvent) and reasoning.name == "reasoning_item_created"
    assert isinstance(reasoning.item, ReasoningItem) and reasoning.item.raw_item["id"] == "rs"
    assert isinstance(hcall, RunItemStreamEvent) and hcall.name == "handoff_requested"
    assert isinstance(hcall.item, HandoffCallItem) and hcall.item.type == "handoff_call_item"
    assert isinstance(hout, RunItemStreamEvent) and hout.name == "handoff_occured"
    assert isinstance(hout.item, HandoffOutputItem) and hout.item.raw_item == out
    assert isinstance(updated, AgentUpdatedStreamEvent) and updated.new_agent is helper
    assert isinstance(message, RunItemStreamEvent) and message.name == "message_output_created"
    assert isinstance(message.item, MessageOutputItem) and message.item.agent is helper
    assert ItemHelpers.text_message_output(message.item) == "Hi there"
    assert ItemHelpers.text_message_outputs([hcall.item, message.item]) == "Hi there"


def test_events_without_their_item_still_translate() -> None:
    """Runs recorded before events carried items, and items too large to ride on an event:
    the SDK item is built from the event's previews."""
    sdk = SdkEvents(root)
    called = sdk.translate(
        _ev(
            "tool_called",
            call_id="c1",
            tool="act",
            data={"arguments": '{"x": 1}', "model_call_id": "m1"},
        )
    )
    finished = sdk.translate(_ev("tool_finished", call_id="c1", text="done"))
    message = sdk.translate(_ev("message", text="All done"))
    assert isinstance(called[0], AgentUpdatedStreamEvent)
    call = called[1]
    assert isinstance(call, RunItemStreamEvent) and isinstance(call.item, ToolCallItem)
    assert call.item.raw_item == {
        "type": "function_call",
        "call_id": "m1",
        "name": "act",
        "arguments": '{"x": 1}',
    }
    assert call.item.call_id == "c1"
    out = finished[0]
    assert isinstance(out, RunItemStreamEvent) and isinstance(out.item, ToolCallOutputItem)
    assert (out.name, out.item.output) == ("tool_output", "done")
    assert ItemHelpers.text_message_output(message[0].item) == "All done"  # type: ignore[union-attr]
    assert sdk.translate(_ev("paused")) == [] and sdk.translate(_ev("approval_decided")) == []
