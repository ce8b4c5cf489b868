"""What the ports of the SDK's code blocks import besides `hitl`, and their agents.

Importable by worker subprocesses (`--agents tests.sdk_ports:concierge`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from hitl import Agent, ModelReply, ModelRequest, ScriptedModel, function_tool


@contextlib.contextmanager
def trace(workflow_name: str, group_id: str | None = None, **_: Any) -> Iterator[None]:
    """Stands in for the SDK's `agents.trace`, which groups runs in the SDK's own tracing
    (hitl traces with OpenTelemetry on the worker): the ported blocks keep their `with`."""
    yield


# ----------------------------------------------------------------------------- seed 002 sessions


def assistant_script(req: ModelRequest) -> ModelReply:
    """Answers the seed's two questions; the second only with the first in its transcript."""
    users = [str(i.get("content")) for i in req.input if i.get("role") == "user"]
    text = req.last_user_text()
    if "Golden Gate" in text:
        return ModelReply.say("San Francisco")
    if "What state" in text and any("Golden Gate" in u for u in users):
        return ModelReply.say("California")
    return ModelReply.say("Which place do you mean?")


ASSISTANT_MODEL = ScriptedModel(assistant_script, "tests.sdk_ports.assistant")


# ----------------------------------------------------------------------------- a durable session


@function_tool(needs_approval=True)
def book_table(name: str) -> str:
    """Book a table.

    Args:
        name: Who the table is for.
    """
    return f"Booked a table for {name}"


def concierge_script(req: ModelRequest) -> ModelReply:
    """Remembers a name told in an earlier run (it must be in the transcript it is sent)."""
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
    name="Session concierge",
    tools=[book_table],
    model=ScriptedModel(concierge_script, "tests.sdk_ports.concierge"),
)


# ----------------------------------------------------------------------------- streaming


def weather_script(req: ModelRequest) -> ModelReply:
    """The SDK's streaming HITL example: both tools for the city asked about, then a summary."""
    results = req.tool_results()
    if not results:
        city = "Oakland" if "Oakland" in req.last_user_text() else "Berkeley"
        return ModelReply.calls(
            ("get_weather", {"city": city}), ("get_temperature", {"city": city})
        )
    return ModelReply.say(" ".join(r.output or "" for r in results))


WEATHER_MODEL = ScriptedModel(weather_script, "tests.sdk_ports.weather")


def jokes_script(req: ModelRequest) -> ModelReply:
    """Thinks (a reasoning item), asks `how_many_jokes`, then tells that many."""
    results = req.results_for("how_many_jokes")
    if not results:
        return ModelReply(
            items=[
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [{"type": "summary_text", "text": "Count first."}],
                },
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_jokes",
                    "name": "how_many_jokes",
                    "arguments": "{}",
                },
            ]
        )
    n = int(results[0].output or "0")
    return ModelReply.say(" ".join(f"Joke {i}." for i in range(1, n + 1)))


JOKES_MODEL = ScriptedModel(jokes_script, "tests.sdk_ports.jokes")


@function_tool
def how_many_jokes() -> int:
    """How many jokes to tell."""
    return 2


joker = Agent(name="Joker", tools=[how_many_jokes], model=JOKES_MODEL)
