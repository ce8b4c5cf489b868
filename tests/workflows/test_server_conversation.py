"""Server-managed conversation state (`RunConfig(auto_previous_response_id=True)`): each model
call sends only what is new since the previous response, the response id survives a pause of
days (and, with the replay-every-task worker, a cold worker), and a provider that lost the
response gets the whole transcript again. Over the real `openai` client against a local
OpenAI wire-format server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import openai
import pytest
from temporalio.testing import WorkflowEnvironment

from hitl import ConversationLostError, ModelProviderError, RunConfig, Runner
from tests.fake_openai import (
    FakeOpenAI,
    Reply,
    error_body,
    fake_openai,
    response_body,
    responses_call,
    responses_text,
)
from tests.helpers import payload_texts, serving
from tests.workflows.test_openai import CANARY_KEY, KEY_ENV, RESPONSES, make_agent

SERVER = RunConfig(auto_previous_response_id=True)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    monkeypatch.setenv(KEY_ENV, CANARY_KEY)
    with fake_openai() as server:
        yield server


def turns(n: int) -> list[Reply]:
    """`n` lookups, one per response, then a final answer."""
    calls = [
        Reply(response_body([responses_call("lookup", {"order_id": k}, f"c{k}")], rid=f"r{k}"))
        for k in range(n)
    ]
    return [*calls, Reply(response_body([responses_text("done")], rid=f"r{n}"))]


def sent_bytes(fake: FakeOpenAI) -> list[int]:
    return [len(json.dumps(r.body["input"])) for r in fake.requests_to(RESPONSES)]


@pytest.mark.parametrize("server", [True, False], ids=["server-state", "client-state"])
async def test_each_call_sends_only_what_is_new(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI, server: bool
) -> None:
    agent = make_agent(fake)
    n = 20
    fake.queue(RESPONSES, *turns(n))
    config = SERVER if server else RunConfig()
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(
            agent, "look up 20 orders", client=ts_env.client, task_queue=tq, serve=False,
            run_config=config, max_turns=30,
        )  # fmt: skip
    assert result.final_output == "done"
    requests = fake.requests_to(RESPONSES)
    assert len(requests) == n + 1
    sizes = sent_bytes(fake)
    print(f"\n{'server' if server else 'client'} state, bytes of input per call: {sizes}")
    if not server:
        assert all("previous_response_id" not in r.body for r in requests)
        assert sizes == sorted(sizes) and sizes[-1] > 10 * sizes[1], "the transcript grows"
        return
    assert "previous_response_id" not in requests[0].body
    for k, r in enumerate(requests[1:]):
        assert r.body["previous_response_id"] == f"r{k}"
        # Only the tool's output: the model's own call is on the server already.
        assert r.body["input"] == [
            {
                "type": "function_call_output",
                "call_id": f"c{k}",
                "output": f"order {k}: espresso machine",
            }
        ]
    assert max(sizes[1:]) - min(sizes[1:]) < 10, "flat: it does not grow with the turns"


async def test_the_response_id_survives_a_pause_of_days(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    agent = make_agent(fake)
    fake.queue(
        RESPONSES,
        Reply(response_body([responses_call("cancel_order", {"order_id": 7}, "ca")], rid="r0")),
        Reply(response_body([responses_text("Order 7 is cancelled.")], rid="r1")),
    )
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(
            agent, "cancel order 7", client=ts_env.client, task_queue=tq, serve=False,
            run_config=SERVER,
        )  # fmt: skip
        await ts_env.sleep(timedelta(days=3))
        state = result.to_state()
        state.approve(result.interruptions[0])
        result = await Runner.run(agent, state, client=ts_env.client, task_queue=tq, serve=False)
    assert result.final_output == "Order 7 is cancelled."
    _, second = fake.requests_to(RESPONSES)
    assert second.body["previous_response_id"] == "r0"
    assert second.body["input"] == [
        {"type": "function_call_output", "call_id": "ca", "output": "Cancelled order 7"}
    ]


async def test_a_lost_response_gets_the_whole_transcript(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    agent = make_agent(fake)
    gone = error_body("Previous response with id 'r0' not found.", "previous_response_not_found")
    fake.queue(
        RESPONSES,
        Reply(response_body([responses_call("lookup", {"order_id": 1}, "c1")], rid="r0")),
        Reply(gone, status=400),
        Reply(response_body([responses_text("Order 1 is an espresso machine.")], rid="r2")),
    )
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(
            agent, "what is order 1", client=ts_env.client, task_queue=tq, serve=False,
            run_config=SERVER,
        )  # fmt: skip
    assert result.final_output == "Order 1 is an espresso machine."
    _, refused, whole = fake.requests_to(RESPONSES)
    assert refused.body["previous_response_id"] == "r0"
    assert "previous_response_id" not in whole.body
    assert [i.get("type", i.get("role")) for i in whole.body["input"]] == [
        "user",
        "function_call",
        "function_call_output",
    ]


# ----------------------------------------------------------------------------- Runner arguments


def texts(items: list[dict[str, Any]]) -> list[str]:
    """The user and assistant texts of a conversation, in order."""
    out = []
    for item in items:
        content = item.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if item.get("role") in ("user", "assistant"):
            out.append(str(content))
    return out


async def test_previous_response_id_continues_an_earlier_run(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    """`previous_response_id=result.last_response_id`: the next run sends only its new turn and
    its calls chain inside the run; the model sees the whole conversation (the fake provider's)."""
    agent = make_agent(fake)
    fake.queue(
        RESPONSES,
        Reply(response_body([responses_text("Hello Ada.")], rid="a0")),
        Reply(response_body([responses_call("lookup", {"order_id": 3}, "c3")], rid="b0")),
        Reply(response_body([responses_text("Order 3 is an espresso machine.")], rid="b1")),
    )
    async with serving(ts_env.client, agent) as tq:
        opts: dict[str, Any] = {"client": ts_env.client, "task_queue": tq, "serve": False}
        first = await Runner.run(agent, "user: I am Ada", auto_previous_response_id=True, **opts)
        assert first.last_response_id == "a0"
        second = await Runner.run(
            agent, "user: what is order 3", previous_response_id=first.last_response_id, **opts
        )
    assert second.final_output == "Order 3 is an espresso machine."
    assert second.last_response_id == "b1"
    _, ask, tool_output = fake.requests_to(RESPONSES)
    assert ask.body["previous_response_id"] == "a0"
    assert ask.body["input"] == [{"role": "user", "content": "user: what is order 3"}]
    assert texts(ask.context) == ["user: I am Ada", "Hello Ada.", "user: what is order 3"]
    assert tool_output.body["previous_response_id"] == "b0"
    assert [i["type"] for i in tool_output.body["input"]] == ["function_call_output"]
    # The run's own transcript is its turn only; the provider holds the earlier one.
    assert texts(second.to_input_list())[0] == "user: what is order 3"


async def test_conversation_id_sends_only_what_the_conversation_lacks(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    agent = make_agent(fake)
    client = openai.AsyncOpenAI(api_key=CANARY_KEY, base_url=fake.base_url)
    conv_id = (await client.conversations.create()).id
    await client.close()
    fake.queue(
        RESPONSES,
        Reply(response_body([responses_call("lookup", {"order_id": 5}, "c5")], rid="x0")),
        Reply(response_body([responses_text("Order 5 is an espresso machine.")], rid="x1")),
        Reply(response_body([responses_text("You asked about order 5.")], rid="x2")),
    )
    async with serving(ts_env.client, agent) as tq:
        opts: dict[str, Any] = {"client": ts_env.client, "task_queue": tq, "serve": False}
        one = await Runner.run(agent, "what is order 5", conversation_id=conv_id, **opts)
        two = await Runner.run(agent, "what did I ask", conversation_id=conv_id, **opts)
    assert (one.final_output, two.final_output) == (
        "Order 5 is an espresso machine.",
        "You asked about order 5.",
    )
    assert (one.last_response_id, two.last_response_id) == ("x1", "x2")
    requests = fake.requests_to(RESPONSES)
    assert all(r.body["conversation"] == conv_id for r in requests)
    assert all("previous_response_id" not in r.body for r in requests)
    assert [[i.get("type", i.get("role")) for i in r.body["input"]] for r in requests] == [
        ["user"],
        ["function_call_output"],
        ["user"],
    ]
    assert texts(requests[2].context) == [
        "what is order 5",
        "Order 5 is an espresso machine.",
        "what did I ask",
    ]
    # Each item once: the conversation holds both runs, nothing sent twice.
    assert [i.get("type", i.get("role")) for i in fake.conversations[conv_id]] == [
        "user",
        "function_call",
        "function_call_output",
        "message",
        "user",
        "message",
    ]


# ----------------------------------------------------------------------------- durable runs


async def park_and_forget(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI, agent: Any, tq: str, **kw: Any
) -> Any:
    """Start a run that parks on `cancel_order`, let 31 days pass and the provider forget every
    response it stored, then approve and resume it."""
    opts: dict[str, Any] = {"client": ts_env.client, "task_queue": tq, "serve": False}
    paused = await Runner.run(agent, "cancel order 7", **opts, **kw)
    assert paused.interruptions, "the run parks for approval"
    await ts_env.sleep(timedelta(days=31))
    fake.forget()
    state = paused.to_state()
    state.approve(state.interruptions[0])
    return await Runner.run(agent, state, **opts)


async def test_a_parked_chain_the_provider_forgot_is_sent_again_whole(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    """A chain that began in the run (`auto_previous_response_id`): after the provider lost it,
    the run's transcript is the whole conversation, so it is sent again (a new chain)."""
    agent = make_agent(fake)
    fake.queue(
        RESPONSES,
        Reply(response_body([responses_call("cancel_order", {"order_id": 7}, "ca")], rid="r0")),
        Reply(response_body([responses_text("Order 7 is cancelled.")], rid="r1")),
    )
    async with serving(ts_env.client, agent) as tq:
        result = await park_and_forget(ts_env, fake, agent, tq, auto_previous_response_id=True)
        hist = await ts_env.client.get_workflow_handle(result.workflow_id).fetch_history()
    assert result.final_output == "Order 7 is cancelled."
    assert result.last_response_id == "r1"
    _, refused, whole = fake.requests_to(RESPONSES)
    assert (refused.status, refused.body["previous_response_id"]) == (400, "r0")
    assert "previous_response_id" not in whole.body
    assert [i.get("type", i.get("role")) for i in whole.body["input"]] == [
        "user",
        "function_call",
        "function_call_output",
    ]
    assert "r1" in fake.stored, "the new chain starts at the response it got"
    assert '"chain_restarted":true' in payload_texts(hist.to_json()).replace(" ", "")


async def test_a_parked_run_that_continued_a_forgotten_response_fails_clearly(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    """A run that continued an earlier response holds only its own turn: when the provider lost
    the chain while it waited, sending that turn alone would answer without the conversation.
    It fails as `ConversationLost` (the approved call did run; nothing else is sent)."""
    agent = make_agent(fake)
    fake.queue(
        RESPONSES,
        Reply(response_body([responses_text("Hi, I am the order desk.")], rid="e0")),
        Reply(response_body([responses_call("cancel_order", {"order_id": 7}, "ca")], rid="r0")),
    )
    async with serving(ts_env.client, agent) as tq:
        opts: dict[str, Any] = {"client": ts_env.client, "task_queue": tq, "serve": False}
        earlier = await Runner.run(agent, "hello", **opts)
        assert earlier.last_response_id == "e0"
        with pytest.raises(ConversationLostError, match="with id 'r0' not found; the run") as err:
            await park_and_forget(ts_env, fake, agent, tq, previous_response_id="e0")
    assert isinstance(err.value, ModelProviderError)
    assert "Start a new run with the earlier turns" in str(err.value)
    _, first, refused = fake.requests_to(RESPONSES)
    assert first.body["previous_response_id"] == "e0"
    assert refused.status == 400
    assert refused.body["previous_response_id"] == "r0"
    assert refused.body["input"] == [
        {"type": "function_call_output", "call_id": "ca", "output": "Cancelled order 7"}
    ]


async def test_a_lost_conversation_fails_clearly(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    agent = make_agent(fake)
    with pytest.raises(ConversationLostError, match="no longer has the run's conversation"):
        async with serving(ts_env.client, agent) as tq:
            await Runner.run(
                agent, "hi", conversation_id="conv_gone", client=ts_env.client, task_queue=tq,
                serve=False,
            )  # fmt: skip
    assert [r.status for r in fake.requests_to(RESPONSES)] == [404]
