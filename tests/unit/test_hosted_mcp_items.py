"""Hosted MCP items without a server: what the model activity keeps of an
`mcp_approval_request`, how the run parses and answers it, what each OpenAI API is sent, and
what a continued response chain sends again."""

from __future__ import annotations

import json

from hitl import Agent, HostedMCPTool, ModelSettings, function_tool
from hitl.activities.model import _cap_output, _from_model
from hitl.activities.openai_api import _chat_tools, _responses_request
from hitl.hosted_mcp import MCPToolChoice, with_hosted_secrets
from hitl.items import call_output, output_text, parse_model_output
from hitl.registry import AgentRegistry
from hitl.wire import CallModelInput, ModelSpec, ModelTool, model_tools
from tests.hosted_mcp_agents import DEEPWIKI, approval_request

TOOL = HostedMCPTool(tool_config={**DEEPWIKI, "headers": {"X-Key": "secret"}})
HOSTED = {"deepwiki": TOOL.name}


def test_the_activity_keeps_four_fields_and_names_the_tool_by_label() -> None:
    extra = {**approval_request("r1"), "x_hitl_tool": "forged", "status": {"deep": [1]}}
    [kept] = _cap_output([extra], 8000, {}, HOSTED)
    assert set(kept) == {"type", "id", "server_label", "name", "arguments", "x_hitl_tool"}
    assert kept["x_hitl_tool"] == "hosted_mcp_deepwiki", "the label names it, not the item"
    [unknown] = _cap_output([approval_request("r2", label="evil")], 8000, {}, HOSTED)
    [call] = parse_model_output([unknown]).calls
    assert call.name == "hosted_mcp:evil" and call.call_type == "mcp_approval_request"
    request = approval_request("r3", q="x" * 9000)
    [big] = _cap_output([request], 8000, {}, HOSTED)
    assert parse_model_output([big]).calls[0].oversized == len(request["arguments"])
    [no_id] = _cap_output([{**approval_request("r4"), "id": "x" * 300}], 8000, {}, HOSTED)
    assert parse_model_output([no_id]).calls == [], "no usable id: nothing to answer"


def test_a_request_is_answered_with_an_approval_response() -> None:
    approved = call_output("mcp_approval_request", "r1", json.dumps({"mcp_approval": "approved"}))
    assert approved == {
        "type": "mcp_approval_response",
        "approval_request_id": "r1",
        "approve": True,
    }
    denied = call_output("mcp_approval_request", "r1", '{"mcp_approval": "approved!"}')
    assert denied["approve"] is False and denied["reason"] == '{"mcp_approval": "approved!"}'
    assert output_text(approved) == "approved"
    assert output_text(denied).startswith("rejected: ")


def test_responses_get_the_config_with_its_secrets_and_chat_completions_no_tool() -> None:
    agent: Agent[None] = Agent("hosted", tools=[TOOL])
    tools = model_tools_for(agent)
    inp = CallModelInput(
        root_agent="hosted",
        agent_id="hosted",
        agent_name="hosted",
        model=ModelSpec(name="gpt-test"),
        tools=tools,
        settings=ModelSettings(tool_choice=MCPToolChoice("deepwiki", "ask_question")),
        transcript=[],
    )
    assert "secret" not in inp.model_dump_json(), "what history holds"
    sent = _responses_request(with_hosted_secrets(inp, agent), None, [], None)
    assert sent["tools"] == [{**DEEPWIKI, "headers": {"X-Key": "secret"}}]
    assert sent["tool_choice"] == {
        "type": "mcp",
        "server_label": "deepwiki",
        "name": "ask_question",
    }
    assert _chat_tools(tools) == []


def model_tools_for(agent: Agent[None]) -> list[ModelTool]:
    """What the model is offered, from the graph the run pins."""
    graph = AgentRegistry([agent]).resolve(agent.name).graph
    return model_tools(graph.agents[graph.root])


def test_a_continued_chain_sends_the_approval_response_again_not_the_request() -> None:
    assert _from_model(approval_request("r1"))
    assert _from_model({"type": "mcp_call"}) and _from_model({"type": "mcp_list_tools"})
    assert not _from_model(
        {"type": "mcp_approval_response", "approval_request_id": "r1", "approve": True}
    )


async def test_chat_completions_is_offered_neither_the_tool_nor_its_tool_choice() -> None:
    from openai import AsyncOpenAI

    from hitl.activities.openai_api import chat_turn
    from tests.fake_openai import Reply, chat_body, fake_openai

    @function_tool
    def lookup(q: str) -> str:
        """Look something up.

        Args:
            q: What.
        """
        return q

    agent: Agent[None] = Agent("hosted", tools=[TOOL, lookup])
    inp = CallModelInput(
        root_agent="hosted",
        agent_id="hosted",
        agent_name="hosted",
        model=ModelSpec(name="gpt-test", api="chat"),
        tools=model_tools_for(agent),
        settings=ModelSettings(tool_choice=MCPToolChoice("deepwiki", "ask_question")),
        transcript=[],
    )
    with fake_openai() as server:
        server.queue("/v1/chat/completions", Reply(chat_body("hello")))
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        output, _, _ = await chat_turn(client, inp, None, [{"role": "user", "content": "hi"}])
        [sent] = server.requests_to("/v1/chat/completions")
    assert [t["function"]["name"] for t in sent.body["tools"]] == ["lookup"]
    assert "tool_choice" not in sent.body
    assert output[0]["type"] == "message"
