"""Server-managed conversation settings that cannot go together are refused before anything
starts (`Runner.run`, `run_streamed`, `StartRequest.build`, and a start from the CLI)."""

from __future__ import annotations

from typing import Any

import pytest

from hitl import Agent, Runner, SQLiteSession, UserError
from hitl.limits import MAX_PROVIDER_ID_CHARS, conversation_problem
from hitl.starting import StartRequest

agent = Agent(name="Assistant", instructions="Reply very concisely.")
BOTH: dict[str, Any] = {"previous_response_id": "resp_1", "conversation_id": "conv_1"}


async def test_conversation_id_and_previous_response_id_are_exclusive() -> None:
    with pytest.raises(UserError, match="mutually exclusive"):
        await Runner.run(agent, "hi", **BOTH)
    streamed = Runner.run_streamed(agent, "hi", **BOTH)
    with pytest.raises(UserError, match="mutually exclusive"):
        async for _ in streamed.stream_events():
            pass
    with pytest.raises(UserError, match="mutually exclusive"):
        StartRequest.build(agent, "hi", **BOTH)


@pytest.mark.parametrize(
    "given",
    [
        {"previous_response_id": "resp_1"},
        {"conversation_id": "c"},
        {"auto_previous_response_id": True},
    ],
)
async def test_a_session_goes_with_none_of_them(given: dict[str, Any], tmp_path: Any) -> None:
    session = SQLiteSession("s", str(tmp_path / "s.db"))
    with pytest.raises(UserError, match="Session persistence cannot be combined"):
        await Runner.run(agent, "hi", session=session, **given)
    with pytest.raises(UserError, match="Session persistence cannot be combined"):
        StartRequest.build(agent, "hi", conversation="a-session", **given)


def test_ids_are_bounded_and_reach_the_run() -> None:
    long = "r" * (MAX_PROVIDER_ID_CHARS + 1)
    assert "previous_response_id must be 1 to" in str(conversation_problem(long, None))
    assert "conversation_id must be 1 to" in str(conversation_problem(None, ""))
    assert conversation_problem("resp_1", None) is None
    run = StartRequest.build(agent, "hi", previous_response_id="resp_1").run_input
    assert (run.previous_response_id, run.conversation_id) == ("resp_1", None)
    auto = StartRequest.build(agent, "hi", auto_previous_response_id=True).run_input
    assert auto.run_config.auto_previous_response_id, "the SDK's spelling sets the run's mode"
