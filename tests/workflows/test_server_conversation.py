"""Server-managed conversation state (`RunConfig(auto_previous_response_id=True)`): each model
call sends only what is new since the previous response, the response id survives a pause of
days (and, with the replay-every-task worker, a cold worker), and a provider that lost the
response gets the whole transcript again. Over the real `openai` client against a local
OpenAI wire-format server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from temporalio.testing import WorkflowEnvironment

from hitl import RunConfig, Runner
from tests.fake_openai import (
    FakeOpenAI,
    Reply,
    error_body,
    fake_openai,
    response_body,
    responses_call,
    responses_text,
)
from tests.helpers import serving
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
