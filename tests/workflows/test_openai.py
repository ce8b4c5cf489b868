"""`call_model` over the real `openai` client against a local OpenAI wire-format server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from hitl import (
    Agent,
    ModelProviderError,
    ModelSettings,
    OpenAIModel,
    RunConfig,
    Runner,
    function_tool,
)
from tests.fake_openai import (
    FakeOpenAI,
    Reply,
    chat_body,
    error_body,
    fake_openai,
    response_body,
    responses_call,
    responses_text,
)
from tests.helpers import payload_texts, serving

KEY_ENV = "HITL_TEST_OPENAI_KEY"
CANARY_KEY = "sk-test-CANARY-5f2d9a7c1e"
RESPONSES = "/v1/responses"
CHAT = "/v1/chat/completions"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    monkeypatch.setenv(KEY_ENV, CANARY_KEY)
    with fake_openai() as server:
        yield server


@function_tool(needs_approval=True)
def cancel_order(order_id: int) -> str:
    """Cancel an order.

    Args:
        order_id: The order to cancel.
    """
    return f"Cancelled order {order_id}"


@function_tool
def lookup(order_id: int) -> str:
    """Look an order up.

    Args:
        order_id: The order.
    """
    return f"order {order_id}: espresso machine"


def make_agent(fake: FakeOpenAI, api: str = "responses", **kw: object) -> Agent[None]:
    return Agent(
        name=f"Desk ({api})",
        instructions="Help with orders.",
        tools=[cancel_order, lookup],
        model=OpenAIModel("gpt-test", api=api, base_url=fake.base_url, api_key_env=KEY_ENV),
        **kw,  # type: ignore[arg-type]
    )


def model_attempts(hist: object) -> list[tuple[int, str]]:
    """(attempt, last failure message) of each call_model activity that started."""
    out = []
    scheduled: dict[int, str] = {}
    for e in hist.events:  # type: ignore[attr-defined]
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = e.activity_task_started_event_attributes
            if scheduled.get(attrs.scheduled_event_id) == "call_model":
                out.append((attrs.attempt, attrs.last_failure.message))
    return out


async def test_responses_tool_call_approval_then_final_answer(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    agent = make_agent(fake, model_settings=ModelSettings(temperature=0.2))
    fake.queue(
        RESPONSES,
        Reply(response_body([responses_call("cancel_order", {"order_id": 7}, "call_a")])),
        Reply(response_body([responses_text("Order 7 is cancelled.")], rid="resp_2")),
    )
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(
            agent, "cancel order 7", client=ts_env.client, task_queue=tq, serve=False
        )
        assert [(i.call_id, i.arguments) for i in result.interruptions] == [
            ("call_a", '{"order_id": 7}')
        ]
        state = result.to_state()
        state.approve(result.interruptions[0])
        result = await Runner.run(agent, state, client=ts_env.client, task_queue=tq, serve=False)
    assert result.final_output == "Order 7 is cancelled."
    assert (result.usage.requests, result.usage.input_tokens, result.usage.output_tokens) == (
        2,
        20,
        10,
    )
    first, second = fake.requests_to(RESPONSES)
    assert first.headers["authorization"] == f"Bearer {CANARY_KEY}"
    assert first.body["instructions"] == "Help with orders."
    assert first.body["temperature"] == 0.2
    assert [t["name"] for t in first.body["tools"]] == ["cancel_order", "lookup"]
    assert first.body["tools"][0]["strict"] is True
    assert first.body["input"] == [{"role": "user", "content": "cancel order 7"}]
    assert second.body["input"][-1] == {
        "type": "function_call_output",
        "call_id": "call_a",
        "output": "Cancelled order 7",
    }
    # The client never retries on its own (max_retries=0): one HTTP request per attempt.
    assert (
        "x-stainless-retry-count" not in first.headers
        or first.headers["x-stainless-retry-count"] == "0"
    )


async def test_chat_completions_tool_call_then_final_answer(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    agent = make_agent(fake, api="chat")
    fake.queue(
        CHAT,
        Reply(chat_body(tool_calls=[("lookup", {"order_id": 9}, "call_x")])),
        Reply(chat_body(content="It is an espresso machine.", cid="chatcmpl-2")),
    )
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(
            agent, "what is order 9?", client=ts_env.client, task_queue=tq, serve=False
        )
    assert result.final_output == "It is an espresso machine."
    # The transcript stays in Responses items even over Chat Completions.
    assert [i.get("type", "message") for i in result.to_input_list()] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    second = fake.requests_to(CHAT)[1].body
    assert second["messages"][0] == {"role": "system", "content": "Help with orders."}
    assert second["messages"][2]["tool_calls"][0]["function"] == {
        "name": "lookup",
        "arguments": '{"order_id": 9}',
    }
    assert second["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_x",
        "content": "order 9: espresso machine",
    }
    assert result.usage.input_tokens == 40


async def test_parallel_tool_calls(ts_env: WorkflowEnvironment, fake: FakeOpenAI) -> None:
    agent = make_agent(fake)
    fake.queue(
        RESPONSES,
        Reply(
            response_body(
                [
                    responses_call("lookup", {"order_id": 1}, "c1"),
                    responses_call("lookup", {"order_id": 2}, "c2"),
                ]
            )
        ),
        Reply(response_body([responses_text("Two orders.")])),
    )
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(
            agent, "orders 1, 2", client=ts_env.client, task_queue=tq, serve=False
        )
    assert result.final_output == "Two orders."
    outputs = [
        i
        for i in fake.requests_to(RESPONSES)[1].body["input"]
        if i.get("type") == "function_call_output"
    ]
    assert [(o["call_id"], o["output"]) for o in outputs] == [
        ("c1", "order 1: espresso machine"),
        ("c2", "order 2: espresso machine"),
    ]


class Refund(BaseModel):
    order_id: int
    amount: float


async def test_structured_output_uses_json_schema(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    agent = make_agent(fake, output_type=Refund)
    fake.queue(
        RESPONSES,
        Reply(response_body([responses_text('{"order_id": 3, "amount": 19.5}')])),
        Reply(response_body([responses_text('{"order_id": "three"}')])),
    )
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(agent, "refund", client=ts_env.client, task_queue=tq, serve=False)
        assert result.final_output == Refund(order_id=3, amount=19.5)
        fmt = fake.requests_to(RESPONSES)[0].body["text"]["format"]
        assert fmt["type"] == "json_schema" and fmt["strict"] is True
        assert fmt["schema"]["required"] == ["order_id", "amount"]
        from hitl import ModelBehaviorError

        with pytest.raises(ModelBehaviorError, match="does not validate as Refund"):
            await Runner.run(agent, "refund", client=ts_env.client, task_queue=tq, serve=False)


async def test_rate_limit_retries_after_retry_after(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    agent = make_agent(fake)
    fake.queue(
        RESPONSES,
        Reply(
            error_body("Rate limit reached", "rate_limit_exceeded", "requests"),
            429,
            {"retry-after": "1"},
        ),
        Reply(response_body([responses_text("ok")])),
    )
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(agent, "hi", client=ts_env.client, task_queue=tq, serve=False)
    assert result.final_output == "ok"
    hist = await ts_env.client.get_workflow_handle(result.workflow_id).fetch_history()
    [(attempt, _)] = model_attempts(hist)
    assert attempt == 2, "the 429 was retried by Temporal, visibly"
    first, second = fake.requests_to(RESPONSES)
    assert second.at - first.at >= 0.9, "the retry waited for Retry-After"


async def test_server_error_retries_then_succeeds(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    agent = make_agent(fake, api="chat")
    fake.queue(
        CHAT,
        Reply(error_body("upstream exploded", kind="server_error"), 500),
        Reply(chat_body(content="recovered")),
    )
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(agent, "hi", client=ts_env.client, task_queue=tq, serve=False)
    assert result.final_output == "recovered"
    hist = await ts_env.client.get_workflow_handle(result.workflow_id).fetch_history()
    [(attempt, _)] = model_attempts(hist)
    assert attempt == 2


async def test_bad_request_is_not_retried(ts_env: WorkflowEnvironment, fake: FakeOpenAI) -> None:
    agent = make_agent(fake)
    fake.queue(
        RESPONSES,
        Reply(error_body("Invalid value for 'temperature'", "invalid_value"), 400),
        Reply(response_body([responses_text("should never be used")])),
    )
    async with serving(ts_env.client, agent) as tq:
        with pytest.raises(ModelProviderError) as err:
            await Runner.run(agent, "hi", client=ts_env.client, task_queue=tq, serve=False)
    assert "model 'gpt-test'" in err.value.message
    assert "request refused (400): Invalid value for 'temperature'" in err.value.message
    assert len(fake.requests_to(RESPONSES)) == 1


async def test_context_length_error_says_what_to_fix(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    agent = make_agent(fake)
    fake.queue(
        RESPONSES,
        Reply(
            error_body(
                "This model's maximum context length is 8192 tokens.", "context_length_exceeded"
            ),
            400,
        ),
    )
    async with serving(ts_env.client, agent) as tq:
        with pytest.raises(ModelProviderError, match="longer than the model's context window"):
            await Runner.run(agent, "hi", client=ts_env.client, task_queue=tq, serve=False)


async def test_malformed_arguments_then_recovery(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    agent = make_agent(fake)
    fake.queue(
        RESPONSES,
        Reply(response_body([responses_call("lookup", '{"order_id": ', "bad1")])),
        Reply(response_body([responses_call("lookup", {"order_id": 4}, "good1")])),
        Reply(response_body([responses_text("Order 4 found.")])),
    )
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(
            agent, "order 4", client=ts_env.client, task_queue=tq, serve=False
        )
    assert result.final_output == "Order 4 found."
    second_input = fake.requests_to(RESPONSES)[1].body["input"]
    assert second_input[-1]["call_id"] == "bad1"
    assert second_input[-1]["output"].startswith("Tool arguments are not valid JSON")


async def test_api_key_never_enters_history(ts_env: WorkflowEnvironment, fake: FakeOpenAI) -> None:
    agent = make_agent(fake)
    fake.queue(
        RESPONSES,
        Reply(
            error_body(
                f"Incorrect API key provided: {CANARY_KEY[:7]}***{CANARY_KEY[-4:]}",
                "invalid_api_key",
            ),
            401,
        ),
        Reply(response_body([responses_call("lookup", {"order_id": 1}, "k1")])),
        Reply(response_body([responses_text("done")])),
    )
    async with serving(ts_env.client, agent) as tq:
        with pytest.raises(ModelProviderError) as err:
            await Runner.run(
                agent,
                "hi",
                client=ts_env.client,
                task_queue=tq,
                serve=False,
                workflow_id="key-check-failed",
            )
        assert f"check {KEY_ENV} in the worker's environment" in err.value.message
        result = await Runner.run(agent, "hi", client=ts_env.client, task_queue=tq, serve=False)
        assert result.final_output == "done"
        for wid in ("key-check-failed", result.workflow_id):
            raw = (await ts_env.client.get_workflow_handle(wid).fetch_history()).to_json()
            texts = raw + payload_texts(raw)  # payload data is base64 in the JSON
            assert CANARY_KEY not in texts
            assert CANARY_KEY[:12] not in texts and CANARY_KEY[-6:] not in texts


def test_scrub_removes_keys() -> None:
    from activities.openai_model import scrub

    assert scrub(f"bad key {CANARY_KEY} and sk-abc***wxyz", CANARY_KEY) == (
        "bad key [redacted] and [redacted]"
    )


def test_chat_messages_group_parallel_calls() -> None:
    from activities.openai_model import to_chat_messages

    msgs = to_chat_messages(
        "sys",
        [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            responses_text("Let me check."),
            responses_call("lookup", {"order_id": 1}, "a"),
            responses_call("lookup", {"order_id": 2}, "b"),
            {"type": "function_call_output", "call_id": "a", "output": "1"},
            {"type": "function_call_output", "call_id": "b", "output": "2"},
        ],
    )
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool"]
    assert msgs[2]["content"] == "Let me check."
    assert [c["id"] for c in msgs[2]["tool_calls"]] == ["a", "b"]
    assert json.loads(msgs[2]["tool_calls"][1]["function"]["arguments"]) == {"order_id": 2}


async def test_run_config_model_overrides_agents(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    agent = make_agent(fake)
    fake.queue(CHAT, Reply(chat_body(content="from the run's model")))
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(
            agent,
            "hi",
            run_config=RunConfig(
                model=OpenAIModel("llama-run", base_url=fake.base_url, api_key_env=KEY_ENV)
            ),
            client=ts_env.client,
            task_queue=tq,
            serve=False,
        )
    assert result.final_output == "from the run's model"
    assert fake.requests_to(CHAT)[0].body["model"] == "llama-run"
