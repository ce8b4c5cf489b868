"""The SDK's server-managed conversations (seed 002), on the real dev server.

The seed's two code blocks (`conversation_id`, `previous_response_id` with
`auto_previous_response_id`) are ported by changing their imports only; their `while True:
input()` loop is fed two questions and ended by `EOFError`. The model is the local OpenAI
wire-format server, which keeps the conversation as OpenAI does and answers the second
question only when the conversation it holds has the first: each turn sends only the new
question, so "California" proves the provider kept the rest.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI

from hitl import Agent, Runner
from hitl.worker.devserver import DevServer
from tests.fake_openai import FakeOpenAI, Reply, fake_openai, response_body, responses_text
from tests.helpers import queue_name

QUESTIONS = ["What city is the Golden Gate Bridge in?", "What state is it in?"]


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def concise(context: list[dict[str, Any]]) -> Reply:
    """The seed's concise assistant, answering from the whole conversation it holds."""
    users = [_text(i) for i in context if i.get("role") == "user"]
    n = sum(1 for i in context if i.get("role") == "assistant") + 1
    if "Golden Gate" in users[-1]:
        text = "San Francisco"
    elif "What state" in users[-1] and any("Golden Gate" in u for u in users):
        text = "California"
    else:
        text = "Which place do you mean?"
    return Reply(response_body([responses_text(text)], rid=f"resp_{n}"))


@pytest.fixture
def provider(dev_server: DevServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """What the seeds' scripts take from the environment: the cluster, a queue of their own (no
    worker polls it, so `Runner.run` serves the agent in this process) and OpenAI's variables,
    pointing at the local wire server; `input()` answers the two questions, then ends."""
    with fake_openai() as fake:
        fake.respond = concise
        monkeypatch.setenv("TEMPORAL_ADDRESS", dev_server.address)
        monkeypatch.setenv("HITL_TASK_QUEUE", queue_name("conv"))
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-seed-002")
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("HITL_DEFAULT_MODEL", "gpt-test")
        questions = iter(QUESTIONS)

        def typed(prompt: str = "") -> str:
            try:
                return next(questions)
            except StopIteration:
                raise EOFError from None

        # This module's `input`, not builtins': the workflow sandbox of an in-process worker
        # puts back the `builtins` it saw when it started (another test's patch).
        monkeypatch.setattr(sys.modules[__name__], "input", typed, raising=False)
        yield fake


def sent(fake: FakeOpenAI) -> list[list[str]]:
    """The texts each model call sent (not what the provider already held)."""
    return [[_text(i) for i in r.body["input"]] for r in fake.requests_to("/v1/responses")]


async def test_seed_002_conversation_id_block(
    provider: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    """002, "1. Using `conversation_id`"."""
    client = AsyncOpenAI()

    async def main():  # type: ignore[no-untyped-def]
        agent = Agent(name="Assistant", instructions="Reply very concisely.")

        # Create a server-managed conversation
        conversation = await client.conversations.create()
        conv_id = conversation.id

        while True:
            user_input = input("You: ")  # noqa: ASYNC250 (the seed's loop)
            result = await Runner.run(agent, user_input, conversation_id=conv_id)
            print(f"Assistant: {result.final_output}")

    with pytest.raises(EOFError):
        await main()
    await client.close()
    assert capsys.readouterr().out.splitlines() == [
        "Assistant: San Francisco",
        "Assistant: California",
    ]
    assert sent(provider) == [[q] for q in QUESTIONS]
    (conv_id,) = provider.conversations
    assert all(r.body["conversation"] == conv_id for r in provider.requests_to("/v1/responses"))
    assert len(provider.conversations[conv_id]) == 4


async def test_seed_002_previous_response_id_block(
    provider: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    """002, "2. Using `previous_response_id`"."""

    async def main():  # type: ignore[no-untyped-def]
        agent = Agent(name="Assistant", instructions="Reply very concisely.")

        previous_response_id = None

        while True:
            user_input = input("You: ")  # noqa: ASYNC250 (the seed's loop)

            # Setting auto_previous_response_id=True enables response chaining automatically
            # for the first turn, even when there's no actual previous response ID yet.
            result = await Runner.run(
                agent,
                user_input,
                previous_response_id=previous_response_id,
                auto_previous_response_id=True,
            )
            previous_response_id = result.last_response_id
            print(f"Assistant: {result.final_output}")

    with pytest.raises(EOFError):
        await main()
    assert capsys.readouterr().out.splitlines() == [
        "Assistant: San Francisco",
        "Assistant: California",
    ]
    assert sent(provider) == [[q] for q in QUESTIONS]
    first, second = provider.requests_to("/v1/responses")
    assert "previous_response_id" not in first.body
    assert second.body["previous_response_id"] == "resp_1"
