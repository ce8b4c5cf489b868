"""`call_model` over the real `openai` client against a local OpenAI wire-format server."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

import hitl.activities.openai_model
from hitl import (
    Agent,
    ModelProviderError,
    ModelSettings,
    OpenAIModel,
    RunConfig,
    Runner,
    UserError,
    function_tool,
)
from hitl.wire import RunStatus
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
GATEWAY_ENV = "HITL_TEST_GATEWAY_KEY"
GATEWAY_SECRET = "gw-CANARY-3e8b41d07a"
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
    """(attempt, last failure message) of each call_model activity that started.

    The time-skipping server leaves `last_failure` empty; the attempt number is what it records.
    """
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


def decoded_history(raw: str) -> str:
    """A history's JSON plus every payload in it decoded (payload data is base64 there)."""
    return raw + payload_texts(raw)


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
        assert [(i.call_id, i.model_call_id, i.arguments) for i in result.interruptions] == [
            ("t1.1", "call_a", '{"order_id": 7}')
        ]
        assert result.interruptions[0].raw_item["call_id"] == "call_a"
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


def model_inputs(hist: object) -> list[dict[str, object]]:
    """The decoded input of each call_model activity scheduled, in order."""
    out = []
    for e in hist.events:  # type: ignore[attr-defined]
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = e.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "call_model":
                out.append(json.loads(attrs.input.payloads[0].data))
    return out


async def test_model_calls_name_the_pinned_agent_and_send_it_after_a_deploy_changed_it(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    # Model calls leave the agent's definition (instructions, tools, schemas) out of history:
    # the activity reads it from its registry when the digest matches. After a deploy that
    # changed the agent, the parked run's next call is refused there, and the run sends the
    # definition it pinned: the model still sees the instructions the run started with.
    client = ts_env.client
    v1 = make_agent(fake)
    v2 = make_agent(fake)
    v2.instructions = "Refund everything, ask nobody."
    fake.queue(
        RESPONSES,
        Reply(response_body([responses_call("cancel_order", {"order_id": 7}, "call_a")])),
        Reply(response_body([responses_text("Order 7 is cancelled.")], rid="resp_2")),
    )
    async with serving(client, v1, cache=0) as tq:
        result = await Runner.run(v1, "cancel order 7", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
    first_input = model_inputs(await client.get_workflow_handle(result.workflow_id).fetch_history())
    assert "definition" in first_input[0]
    assert not {"instructions", "tools", "model"} & set(first_input[0]), first_input[0]
    async with serving(client, v2, task_queue=tq):
        state = result.to_state()
        state.approve(item)
        result = await Runner.run(v2, state, client=client, task_queue=tq, serve=False)
    assert result.final_output == "Order 7 is cancelled."
    first, second = fake.requests_to(RESPONSES)
    assert first.body["instructions"] == second.body["instructions"] == "Help with orders."
    assert [t["name"] for t in second.body["tools"]] == ["cancel_order", "lookup"]
    hist = await client.get_workflow_handle(result.workflow_id).fetch_history()
    inputs = model_inputs(hist)
    assert ["definition" in i for i in inputs] == [True, True, False]
    assert inputs[2]["instructions"] == "Help with orders."
    failed = [
        e.activity_task_failed_event_attributes.failure.application_failure_info.type
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    assert failed == ["AgentNotServed"]
    # Runner.run's decision asked for a brief answer: the completed run said only that, and
    # its output is stored once, in the result.
    answers = [
        json.loads(
            e.workflow_execution_update_completed_event_attributes.outcome.success.payloads[0].data
        )
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
    ]
    assert answers[-1]["phase"] == "completed"
    assert not {"final_output", "decisions", "usage"} & set(answers[-1]), answers[-1]


async def test_a_stopped_worker_closes_the_model_clients_it_opened(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Left to the garbage collector, an open client's pool is closed on whatever event loop
    # runs then (a workflow's, during an eviction, which refuses); a long-running script that
    # serves agents in-process would also gather open pools, one per call.
    opened: list[openai.AsyncOpenAI] = []

    class Recording(openai.AsyncOpenAI):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            opened.append(self)

    monkeypatch.setattr(hitl.activities.openai_model, "AsyncOpenAI", Recording)
    agent = make_agent(fake)
    fake.queue(RESPONSES, Reply(response_body([responses_text("Hello.")])))
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(agent, "hi", client=ts_env.client, task_queue=tq, serve=False)
        assert result.final_output == "Hello."
        assert [c.is_closed() for c in opened] == [False]  # one client, reused while serving
    assert [c.is_closed() for c in opened] == [True]


async def test_a_short_transcript_travels_inline_a_long_one_by_reference(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI
) -> None:
    """A model activity gets a short run's transcript in its input (no transcript query, which
    would be a round trip through the server to the run); past `MODEL_INPUT_INLINE_BYTES` it
    gets a reference and reads the transcript by query, so history stays linear in turns."""
    from hitl.limits import MODEL_INPUT_INLINE_BYTES

    agent = make_agent(fake)
    long_text = "spell out every detail of order 8. " * (MODEL_INPUT_INLINE_BYTES // 30)
    fake.queue(
        RESPONSES,
        Reply(response_body([responses_call("lookup", {"order_id": 7}, "call_s")])),
        Reply(response_body([responses_text("Espresso machine.")], rid="resp_2")),
        Reply(response_body([responses_text("Order 8, in detail.")], rid="resp_3")),
    )
    async with serving(ts_env.client, agent) as tq:
        short = await Runner.run(
            agent, "what is order 7?", client=ts_env.client, task_queue=tq, serve=False
        )
        long = await Runner.run(agent, long_text, client=ts_env.client, task_queue=tq, serve=False)
        short_inputs = model_inputs(
            await ts_env.client.get_workflow_handle(short.workflow_id).fetch_history()
        )
        long_inputs = model_inputs(
            await ts_env.client.get_workflow_handle(long.workflow_id).fetch_history()
        )
    assert (short.final_output, long.final_output) == ("Espresso machine.", "Order 8, in detail.")
    # The short run: both calls carry the transcript, none a reference.
    assert [len(i["transcript"]) for i in short_inputs] == [1, 3]  # type: ignore[arg-type]
    assert all("transcript_ref" not in i for i in short_inputs)
    # The long one: a reference only, and the model still received the whole input.
    (only,) = long_inputs
    assert "transcript" not in only and only["transcript_ref"]["end"] == 1  # type: ignore[index]
    sent = fake.requests_to(RESPONSES)[-1].body["input"]
    assert sent == [{"role": "user", "content": long_text}]


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
    # 3 s, not 1 s: the retry policy's own first interval is 1 s, so only a wait well past it
    # shows that Retry-After was honoured. (Activity retry delays pass in real time on the
    # time-skipping server: nothing skips them.)
    agent = make_agent(fake)
    fake.queue(
        RESPONSES,
        Reply(
            error_body("Rate limit reached", "rate_limit_exceeded", "requests"),
            429,
            {"retry-after": "3"},
        ),
        Reply(response_body([responses_text("ok")])),
    )
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(agent, "hi", client=ts_env.client, task_queue=tq, serve=False)
    assert result.final_output == "ok"
    hist = await ts_env.client.get_workflow_handle(result.workflow_id).fetch_history()
    [(attempt, _)] = model_attempts(hist)
    assert attempt == 2, "the 429 was retried by Temporal, visibly"
    # Exactly one HTTP request per Temporal attempt: the client itself never retries.
    first, second = fake.requests_to(RESPONSES)
    assert second.at - first.at >= 2.9, "the retry waited for Retry-After"


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
    assert attempt == 2, "Temporal made the second attempt"
    # With the client's own retries on (openai's default max_retries=2), the 500 would have
    # been retried inside attempt 1: two requests, and history would show attempt 1.
    assert len(fake.requests_to(CHAT)) == 2


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
    prompt = "Where is parcel kestrel-77?"
    failed_id = f"key-check-failed-{uuid.uuid4().hex[:8]}"
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
                prompt,
                client=ts_env.client,
                task_queue=tq,
                serve=False,
                workflow_id=failed_id,
            )
        assert f"check {KEY_ENV} in the worker's environment" in err.value.message
        result = await Runner.run(agent, prompt, client=ts_env.client, task_queue=tq, serve=False)
        assert result.final_output == "done"
        for wid in (failed_id, result.workflow_id):
            raw = (await ts_env.client.get_workflow_handle(wid).fetch_history()).to_json()
            texts = decoded_history(raw)
            # Positive controls: the scan sees inside payloads (the prompt is only there in
            # base64), and the key's variable *name* is recorded where the key is not.
            assert prompt not in raw and prompt in texts
            assert KEY_ENV in payload_texts(raw)
            assert CANARY_KEY not in texts
            assert CANARY_KEY[:12] not in texts and CANARY_KEY[-6:] not in texts
    assert fake.requests_to(RESPONSES)[0].headers["authorization"] == f"Bearer {CANARY_KEY}"


def test_scrub_removes_keys() -> None:
    from hitl.activities.openai_model import scrub

    assert scrub(f"bad key {CANARY_KEY} and sk-abc***wxyz", CANARY_KEY) == (
        "bad key [redacted] and [redacted]"
    )


def test_chat_messages_group_parallel_calls() -> None:
    from hitl.activities.openai_model import to_chat_messages

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
    config = RunConfig(model=OpenAIModel("llama-run", base_url=fake.base_url, api_key_env=KEY_ENV))
    # A model that names an endpoint and a key variable the worker does not know is refused:
    # anyone who may start runs could otherwise send the worker's secrets anywhere.
    async with serving(ts_env.client, agent) as tq:
        with pytest.raises(UserError, match="'llama-run' names an endpoint or secret variables"):
            await Runner.run(
                agent, "hi", run_config=config, client=ts_env.client, task_queue=tq, serve=False
            )
    assert fake.requests_to(CHAT) == [], "no request left the worker"
    fake.queue(CHAT, Reply(chat_body(content="from the run's model")))
    async with serving(ts_env.client, agent, allow=[config]) as tq:
        result = await Runner.run(
            agent, "hi", run_config=config, client=ts_env.client, task_queue=tq, serve=False
        )
    assert result.final_output == "from the run's model"
    assert fake.requests_to(CHAT)[0].body["model"] == "llama-run"


AGENT_SETTINGS = ModelSettings(
    temperature=0.2,
    top_p=0.9,
    max_tokens=256,
    tool_choice="auto",
    parallel_tool_calls=False,
    reasoning_effort="low",
    extra_args={"service_tier": "flex"},
)
RUN_SETTINGS = ModelSettings(temperature=0.7, max_tokens=64)


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_run_settings_override_agent_settings_and_usage_adds_up(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI, api: str
) -> None:
    agent = make_agent(fake, api=api, model_settings=AGENT_SETTINGS)
    call = ("cancel_order", {"order_id": 5}, "call_s")
    if api == "responses":
        path = RESPONSES
        fake.queue(
            path,
            Reply(response_body([responses_call(*call)], usage=(11, 3))),
            Reply(response_body([responses_text("Cancelled.")], rid="resp_2", usage=(17, 4))),
        )
        wanted = {
            "temperature": 0.7,
            "top_p": 0.9,
            "max_output_tokens": 64,
            "tool_choice": "auto",
            "parallel_tool_calls": False,
            "reasoning": {"effort": "low"},
            "service_tier": "flex",
        }
    else:
        path = CHAT
        fake.queue(
            path,
            Reply(chat_body(tool_calls=[call], usage=(11, 3))),
            Reply(chat_body(content="Cancelled.", cid="chatcmpl-2", usage=(17, 4))),
        )
        wanted = {
            "temperature": 0.7,
            "top_p": 0.9,
            "max_tokens": 64,
            "tool_choice": "auto",
            "parallel_tool_calls": False,
            "reasoning_effort": "low",
            "service_tier": "flex",
        }
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(
            agent,
            "cancel order 5",
            run_config=RunConfig(model_settings=RUN_SETTINGS),
            client=ts_env.client,
            task_queue=tq,
            serve=False,
        )
        assert [i.model_call_id for i in result.interruptions] == ["call_s"]
        handle = ts_env.client.get_workflow_handle(result.workflow_id)
        status = await handle.query("status", result_type=RunStatus)
        assert status.phase == "awaiting_approval"
        paused = status.usage
        assert (paused.requests, paused.input_tokens, paused.output_tokens) == (1, 11, 3)
        assert paused.total_tokens == 14
        state = result.to_state()
        state.approve(result.interruptions[0])
        result = await Runner.run(agent, state, client=ts_env.client, task_queue=tq, serve=False)
    assert result.final_output == "Cancelled."
    usage = result.usage
    assert (usage.requests, usage.input_tokens, usage.output_tokens, usage.total_tokens) == (
        2,
        28,
        7,
        35,
    )
    requests = fake.requests_to(path)
    assert len(requests) == 2
    for request in requests:  # the run's override holds on every turn, also after the pause
        assert {k: request.body.get(k) for k in wanted} == wanted
        assert "extra_body" not in request.body, "extra_args merge into the body"


async def test_gateway_headers_query_and_timeout_reach_the_wire(
    ts_env: WorkflowEnvironment, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(GATEWAY_ENV, GATEWAY_SECRET)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agent: Agent[None] = Agent(
        name="Gateway desk",
        instructions="Help with orders.",
        model=OpenAIModel(
            "gpt-test",
            base_url=fake.base_url,
            timeout_seconds=45,
            default_headers_env={"api-key": GATEWAY_ENV},
            default_query={"api-version": "2024-10-21"},
        ),
    )
    fake.queue(CHAT, Reply(chat_body(content="via the gateway")))
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(agent, "hi", client=ts_env.client, task_queue=tq, serve=False)
    assert result.final_output == "via the gateway"
    [request] = fake.requests_to(CHAT)
    assert request.headers["api-key"] == GATEWAY_SECRET
    assert "authorization" not in request.headers, "no placeholder bearer token beside api-key"
    assert request.query == {"api-version": "2024-10-21"}
    # The client announces its read timeout: the spec's 45 s reached the worker's client.
    assert request.headers["x-stainless-read-timeout"] == "45.0"
    raw = (await ts_env.client.get_workflow_handle(result.workflow_id).fetch_history()).to_json()
    texts = decoded_history(raw)
    assert GATEWAY_ENV in texts and "2024-10-21" in texts  # recorded: names and query
    assert GATEWAY_SECRET not in texts  # never recorded: the header's value
