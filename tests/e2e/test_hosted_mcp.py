# ruff: noqa: E501  (the SDK examples are ported verbatim)
"""The SDK's hosted MCP approvals (seed 003 points to `examples/hosted_mcp/on_approval.py` and
`human_in_the_loop.py`), ported by changing their imports only, against the local OpenAI-wire
server: the provider's `mcp_approval_request` items come through the real `openai` client, and
the run's `mcp_approval_response` items go back in the next call's input. Then the durable
variant (park, kill the worker, approve from a saved state, resume on a new worker), a
rejection's reason, and hostile requests that must approve, ask and run nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from hitl import Agent, HostedMCPTool, Runner
from hitl.worker.devserver import DevServer
from tests.fake_openai import FakeOpenAI, Reply, fake_openai, response_body, responses_text
from tests.helpers import WorkerProcess, history, queue_name
from tests.hosted_mcp_agents import DEEPWIKI, approval_request, deepwiki, list_tools, mcp_call

RESPONSES = "/v1/responses"


@pytest.fixture
def wire(dev_server: DevServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """The seeds' environment: the cluster, a queue served in this process, the OpenAI wire."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", dev_server.address)
    monkeypatch.setenv("HITL_TASK_QUEUE", queue_name("hosted-mcp"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-hosted-mcp")
    with fake_openai() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        yield server


def queue(server: FakeOpenAI, rid: str, *items: dict[str, Any]) -> None:
    server.queue(RESPONSES, Reply(response_body(list(items), rid=rid)))


def sent_responses(server: FakeOpenAI) -> list[list[dict[str, Any]]]:
    """The `mcp_approval_response` items each model call sent, call by call."""
    return [
        [i for i in r.body["input"] if i.get("type") == "mcp_approval_response"]
        for r in server.requests_to(RESPONSES)
    ]


def streamed(rid: str, *items: dict[str, Any]) -> Reply:
    """A streamed Responses answer: its text as one delta, then the completed response."""
    body = response_body(list(items), rid=rid)
    text = "".join(
        str(part.get("text", "")) for i in items if i["type"] == "message" for part in i["content"]
    )
    events: list[dict[str, Any]] = [
        {"type": "response.created", "sequence_number": 0, "response": {**body, "output": []}}
    ]
    if text:
        events.append(
            {
                "type": "response.output_text.delta",
                "sequence_number": 1,
                "item_id": "msg_1",
                "output_index": len(items) - 1,
                "content_index": 0,
                "delta": text,
                "logprobs": [],
            }
        )
    events.append({"type": "response.completed", "sequence_number": 2, "response": body})
    return Reply({}, events=events)


@pytest.mark.parametrize("stream", [False, True], ids=["run", "run_streamed"])
async def test_sdk_hosted_mcp_on_approval_example_runs_with_its_imports_changed(
    wire: FakeOpenAI, capsys: pytest.CaptureFixture[str], stream: bool
) -> None:
    """`examples/hosted_mcp/on_approval.py`, both ways: the callback approves without an
    interruption."""
    first = (list_tools(), approval_request("mcpr_1"))
    second = (mcp_call("mcpr_1", "Rust"), responses_text("It is written in Rust."))
    if stream:
        wire.queue(RESPONSES, streamed("resp_1", *first), streamed("resp_2", *second))
    else:
        queue(wire, "resp_1", *first)
        queue(wire, "resp_2", *second)

    from typing import Literal

    from hitl import (
        Agent,
        HostedMCPTool,
        MCPToolApprovalFunctionResult,
        MCPToolApprovalRequest,
        Runner,
        RunResult,
        RunResultStreaming,
    )
    from tests.sdk_tool_agents import confirm_with_fallback

    def prompt_approval(request: MCPToolApprovalRequest) -> MCPToolApprovalFunctionResult:
        params: object = request.data.arguments or {}
        approved = confirm_with_fallback(
            f"Approve running tool (mcp: {request.data.name}, params: {json.dumps(params)})? (y/n) ",
            default=True,
        )
        result: MCPToolApprovalFunctionResult = {"approve": approved}
        if not approved:
            result["reason"] = "User denied"
        return result

    async def main(verbose: bool, stream: bool) -> None:
        require_approval: Literal["always"] = "always"
        agent = Agent(
            name="MCP Assistant",
            instructions=(
                "You must always use the MCP tools to answer questions. "
                "Use the DeepWiki hosted MCP server to answer questions and do not ask the user for "
                "additional configuration."
            ),
            tools=[
                HostedMCPTool(
                    tool_config={
                        "type": "mcp",
                        "server_label": "deepwiki",
                        "server_url": "https://mcp.deepwiki.com/mcp",
                        "allowed_tools": ["ask_question"],
                        "require_approval": require_approval,
                    },
                    on_approval_request=prompt_approval,
                )
            ],
        )

        question = "Which language is the repository openai/codex written in?"

        run_result: RunResult | RunResultStreaming
        if stream:
            run_result = Runner.run_streamed(agent, question)
            async for event in run_result.stream_events():
                if verbose:
                    print(event)
                elif (
                    event.type == "raw_response_event"
                    and event.data.type == "response.output_text.delta"
                ):
                    print(event.data.delta, end="", flush=True)
            if not verbose:
                print()
            print(f"Done streaming; final result: {run_result.final_output}")
        else:
            run_result = await Runner.run(agent, question)
            while run_result.interruptions:
                run_result = await Runner.run(agent, run_result.to_state())
            print(run_result.final_output)

        if verbose:
            for item in run_result.new_items:
                print(item)

    await main(verbose=False, stream=stream)

    out = capsys.readouterr().out
    assert "It is written in Rust." in out
    if stream:
        assert "Done streaming; final result: It is written in Rust." in out
    first, second = wire.requests_to(RESPONSES)
    [tool] = first.body["tools"]
    assert tool == {
        "type": "mcp",
        "server_label": "deepwiki",
        "server_url": "https://mcp.deepwiki.com/mcp",
        "allowed_tools": ["ask_question"],
        "require_approval": "always",
    }
    assert sent_responses(wire) == [
        [],
        [{"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}],
    ]
    kinds = [i.get("type") for i in second.body["input"]]
    assert kinds[1:] == ["mcp_list_tools", "mcp_approval_request", "mcp_approval_response"]


@pytest.mark.parametrize("stream", [False, True], ids=["run", "run_streamed"])
async def test_sdk_hosted_mcp_human_in_the_loop_example_runs_with_its_imports_changed(
    wire: FakeOpenAI, capsys: pytest.CaptureFixture[str], stream: bool
) -> None:
    """`examples/hosted_mcp/human_in_the_loop.py`, both ways (`Runner.run` and
    `Runner.run_streamed`): an interruption, approved, then resumed."""
    first = (list_tools(), approval_request("mcpr_7"))
    second = (mcp_call("mcpr_7", "Rust"), responses_text("Rust, mostly."))
    if stream:
        wire.queue(RESPONSES, streamed("resp_1", *first), streamed("resp_2", *second))
    else:
        queue(wire, "resp_1", *first)
        queue(wire, "resp_2", *second)

    from typing import Literal

    from hitl import (
        Agent,
        HostedMCPTool,
        ModelSettings,
        RunConfig,
        Runner,
        RunResult,
        RunResultStreaming,
    )
    from hitl.hosted_mcp import MCPToolChoice
    from tests.sdk_tool_agents import confirm_with_fallback

    asked: list[tuple[str | None, Any]] = []

    async def _drain_stream(
        result: RunResultStreaming,
        verbose: bool,
    ) -> RunResultStreaming:
        async for event in result.stream_events():
            if verbose:
                print(event)
            elif (
                event.type == "raw_response_event"
                and event.data.type == "response.output_text.delta"
            ):
                print(event.data.delta, end="", flush=True)
        if not verbose:
            print()
        return result

    def prompt_for_interruption(
        tool_name: str | None, arguments: str | dict[str, object] | None
    ) -> bool:
        asked.append((tool_name, arguments))
        params: object = {}
        if arguments:
            if isinstance(arguments, str):
                try:
                    params = json.loads(arguments)
                except json.JSONDecodeError:
                    params = arguments
            else:
                params = arguments
        try:
            return confirm_with_fallback(
                f"Approve running tool (mcp: {tool_name or 'unknown'}, params: {json.dumps(params)})? (y/n) ",
                default=True,
            )
        except (EOFError, KeyboardInterrupt):
            return False

    async def main(verbose: bool, stream: bool) -> None:
        require_approval: Literal["always"] = "always"
        agent = Agent(
            name="MCP Assistant",
            instructions=(
                "You must always use the MCP tools to answer questions. "
                "Use the DeepWiki hosted MCP server to answer questions and do not ask the user for "
                "additional configuration."
            ),
            model_settings=ModelSettings(
                tool_choice=MCPToolChoice(server_label="deepwiki", name="ask_question")
            ),
            tools=[
                HostedMCPTool(
                    tool_config={
                        "type": "mcp",
                        "server_label": "deepwiki",
                        "server_url": "https://mcp.deepwiki.com/mcp",
                        "require_approval": require_approval,
                    }
                )
            ],
        )
        resume_config = RunConfig(model_settings=ModelSettings(tool_choice="auto"))

        question = "Which language is the repository openai/codex written in?"

        run_result: RunResult | RunResultStreaming
        if stream:
            stream_result = Runner.run_streamed(agent, question, max_turns=100)
            stream_result = await _drain_stream(stream_result, verbose)
            while stream_result.interruptions:
                state = stream_result.to_state()
                for interruption in stream_result.interruptions:
                    approved = prompt_for_interruption(interruption.name, interruption.arguments)
                    if approved:
                        state.approve(interruption)
                    else:
                        state.reject(interruption)
                stream_result = Runner.run_streamed(
                    agent,
                    state,
                    max_turns=100,
                    run_config=resume_config,
                )
                stream_result = await _drain_stream(stream_result, verbose)
            print(f"Done streaming; final result: {stream_result.final_output}")
            run_result = stream_result
        else:
            run_result = await Runner.run(agent, question, max_turns=100)
            while run_result.interruptions:
                state = run_result.to_state()
                for interruption in run_result.interruptions:
                    approved = prompt_for_interruption(interruption.name, interruption.arguments)
                    if approved:
                        state.approve(interruption)
                    else:
                        state.reject(interruption)
                run_result = await Runner.run(
                    agent,
                    state,
                    max_turns=100,
                    run_config=resume_config,
                )
            print(run_result.final_output)

        if verbose:
            for item in run_result.new_items:
                print(item)

    await main(verbose=not stream, stream=stream)  # (streamed: the deltas are printed)

    out = capsys.readouterr().out
    assert "Rust, mostly." in out
    if stream:
        assert "Done streaming; final result: Rust, mostly." in out
    [(name, arguments)] = asked
    assert name == "hosted_mcp_deepwiki"
    assert json.loads(str(arguments))["name"] == "ask_question"
    first = wire.requests_to(RESPONSES)[0].body
    assert first["tool_choice"] == {
        "type": "mcp",
        "server_label": "deepwiki",
        "name": "ask_question",
    }
    assert sent_responses(wire)[1] == [
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_7", "approve": True}
    ]


async def test_a_rejection_sends_approve_false_with_its_reason(wire: FakeOpenAI) -> None:
    """A person's rejection (the SDK's `rejection_message`) and a callback's `reason` each
    reach the provider as `approve: false` with that reason; the provider runs nothing."""
    queue(wire, "resp_1", approval_request("mcpr_a"))
    queue(wire, "resp_2", responses_text("Understood, not asking."))
    agent = Agent(name="Rejected", model="gpt-test", tools=[HostedMCPTool(tool_config=DEEPWIKI)])
    paused = await Runner.run(agent, "ask deepwiki")
    [item] = paused.interruptions
    assert item.raw_item == {"type": "mcp_approval_request", **approval_request("mcpr_a")}
    state = paused.to_state()
    state.reject(item, rejection_message="not on a Friday")
    done = await Runner.run(agent, state)
    assert done.final_output == "Understood, not asking."

    queue(wire, "resp_3", approval_request("mcpr_b"))
    queue(wire, "resp_4", responses_text("Denied by policy."))
    denying = Agent(
        name="Denying",
        model="gpt-test",
        tools=[
            HostedMCPTool(
                tool_config=DEEPWIKI,
                on_approval_request=lambda r: {"approve": False, "reason": "User denied"},
            )
        ],
    )
    result = await Runner.run(denying, "ask deepwiki")
    assert not result.interruptions and result.final_output == "Denied by policy."
    assert [r for r in sent_responses(wire) if r] == [
        [
            {
                "type": "mcp_approval_response",
                "approval_request_id": "mcpr_a",
                "approve": False,
                "reason": "not on a Friday",
            }
        ],
        [
            {
                "type": "mcp_approval_response",
                "approval_request_id": "mcpr_b",
                "approve": False,
                "reason": "User denied",
            }
        ],
    ]


async def test_hostile_approval_requests_approve_ask_and_run_nothing(wire: FakeOpenAI) -> None:
    """An unknown `server_label`, malformed and oversized requests, and ids used twice (in one
    output, and again in a later turn) are refused: the approving callback never sees them,
    no one is asked, and each answerable one is answered `approve: false` with why."""
    seen: list[str] = []

    def approve_all(request: Any) -> dict[str, Any]:
        seen.append(request.data.id)
        return {"approve": True}

    agent = Agent(
        name="Guarded",
        model="gpt-test",
        tools=[HostedMCPTool(tool_config=DEEPWIKI, on_approval_request=approve_all)],
    )
    malformed = {**approval_request("mcpr_bad"), "name": {"not": "a string"}}
    queue(
        wire,
        "resp_1",
        approval_request("mcpr_ok"),
        approval_request("mcpr_ok", question="the same id again"),
        approval_request("mcpr_evil", label="evil"),
        malformed,
        approval_request("mcpr_big", question="x" * 70_000),
        {**approval_request("ignored"), "id": None},
    )
    queue(wire, "resp_2", approval_request("mcpr_ok"))  # an id answered already
    queue(wire, "resp_3", responses_text("Done."))
    result = await Runner.run(agent, "ask")
    assert result.final_output == "Done." and not result.interruptions
    assert seen == ["mcpr_ok"], "only the well-formed request reached the callback"
    first, second = sent_responses(wire)[1:]
    answers = {r["approval_request_id"]: r for r in first}
    assert set(answers) == {"mcpr_ok", "mcpr_evil", "mcpr_bad", "mcpr_big"}
    assert answers["mcpr_ok"]["approve"] is True
    for rid, why in [
        ("mcpr_evil", "not found"),
        ("mcpr_bad", "must be strings"),
        ("mcpr_big", "too large"),
    ]:
        assert answers[rid]["approve"] is False and why in answers[rid]["reason"], answers[rid]
    [again] = second[len(first) :]  # (each call sends the whole transcript)
    assert again["approve"] is False and "already used" in again["reason"]


async def test_a_parked_hosted_mcp_approval_survives_its_worker(
    dev_server: DevServer, dev_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Park on a hosted server's request, kill the worker, approve from a saved state on a new
    worker: the next model call carries the approval (in its input, and in the run's history
    as that call's input), and the secret of the tool's config is in neither history."""
    tq = queue_name("hosted-mcp-durable")
    with fake_openai() as server:
        queue(server, "resp_1", list_tools(), approval_request("mcpr_d"))
        queue(server, "resp_2", mcp_call("mcpr_d", "Rust"), responses_text("Rust."))
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test-durable"}
        opts: dict[str, Any] = {"client": dev_client, "task_queue": tq, "serve": False}
        agents = "tests.hosted_mcp_agents:deepwiki"
        worker = WorkerProcess(dev_server.address, tq, agents, env).start()
        try:
            paused = await Runner.run(deepwiki, "Which language is openai/codex in?", **opts)
            [item] = paused.interruptions
            saved = paused.to_state().to_string()
        finally:
            worker.kill()
        assert len(server.requests_to(RESPONSES)) == 1

        from hitl import RunState

        with WorkerProcess(dev_server.address, tq, agents, env):
            state = await RunState.from_string(deepwiki, saved)
            state.approve(state.interruptions[0])
            done = await Runner.run(deepwiki, state, **opts)
        assert done.final_output == "Rust."
        first, second = server.requests_to(RESPONSES)
    assert first.body["tools"][0]["authorization"] == "Bearer sk-hosted-secret"
    approval = {"type": "mcp_approval_response", "approval_request_id": "mcpr_d", "approve": True}
    assert approval in second.body["input"]
    kinds = [i.get("type") for i in done.to_input_list()]
    assert {"mcp_list_tools", "mcp_approval_request", "mcp_call"} <= set(kinds)

    events = (await history(dev_client.get_workflow_handle(item.workflow_id))).events
    models = [
        e.activity_task_scheduled_event_attributes
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"
    ]
    assert len(models) == 2
    later = b"".join(p.data for p in models[1].input.payloads)
    assert b'"mcp_approval_response"' in later and b'"mcpr_d"' in later
    everything = b"".join(e.SerializeToString() for e in events)
    assert b"sk-hosted-secret" not in everything
    assert b'"server_url"' in everything, "the public config is pinned in history"

    from hitl.cli.verify import render, verify_run

    report = await verify_run(dev_client, item.workflow_id)  # `hitl verify`
    assert report.ok, render([report])
    [call] = report.calls
    assert (call.call_id, call.tool) == (item.call_id, "hosted_mcp_deepwiki")
