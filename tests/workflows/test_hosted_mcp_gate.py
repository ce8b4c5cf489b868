"""A hosted MCP server's approval requests pass the same gate as every call (time-skipping
server, a scripted model making `mcp_approval_request` items): four eyes holds even against an
approving `on_approval_request`, a refused approver changes nothing, a standing rule answers
the server's later requests, and each decision reaches the model as an
`mcp_approval_response`; the `mcp_call` the provider reports stays in the transcript and no
tool runs for it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from hitl import Agent, HostedMCPTool, ModelReply, ModelRequest, Runner, ScriptedModel, UserError
from hitl.hosted_mcp import MCPToolApprovalRequest
from hitl.wire import DecisionInput, RunOutput
from tests.helpers import serving
from tests.hosted_mcp_agents import DEEPWIKI, approval_request, mcp_call
from tests.workflows.test_invariants import refused_type

FINANCE = ["ann", "bob"]


def answers(req: ModelRequest) -> list[dict[str, Any]]:
    return [i for i in req.input if i.get("type") == "mcp_approval_response"]


def asks_twice(req: ModelRequest) -> ModelReply:
    """Two requests, one per turn (each after the last was answered), then every answer."""
    done = answers(req)
    if len(done) < 2:
        return ModelReply.raw(approval_request(f"mcpr_{len(done) + 1}"))
    return ModelReply.raw(
        mcp_call("mcpr_2", "Rust"),
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": json.dumps(done)}],
        },
    )


def yes(request: MCPToolApprovalRequest) -> dict[str, Any]:
    return {"approve": True, "reason": "the callback says yes"}


async def test_four_eyes_holds_against_an_approving_callback(ts_env: WorkflowEnvironment) -> None:
    tool = HostedMCPTool(
        tool_config=DEEPWIKI, on_approval_request=yes, required_approvals=2, approvers=FINANCE
    )
    agent = Agent("Four eyes", tools=[tool], model=ScriptedModel(asks_twice, "tests.hmcp.4eyes"))
    client = ts_env.client
    async with serving(client, agent) as tq:
        opts: dict[str, Any] = {"client": client, "task_queue": tq, "serve": False}
        paused = await Runner.run(agent, "go", **opts)
        [item] = paused.interruptions
        assert (item.name, item.required_approvals) == ("hosted_mcp_deepwiki", 2)
        assert item.request is not None and item.request.title == "Call ask_question on deepwiki"
        handle = client.get_workflow_handle(paused.workflow_id, result_type=RunOutput)
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await handle.execute_update(
                "approve", DecisionInput(call_id=item.call_id, approver="mallory")
            )
        assert refused_type(err) == "NotAuthorized"
        with pytest.raises(WorkflowUpdateFailedError) as err:
            edited = {**json.loads(item.arguments), "name": "delete_repo"}
            await handle.execute_update(
                "approve", DecisionInput(call_id=item.call_id, approver="ann", arguments=edited)
            )
        assert refused_type(err) == "EditsNotAllowed", "a hosted request cannot be edited"
        for who in FINANCE:
            await handle.execute_update(
                "approve", DecisionInput(call_id=item.call_id, approver=who, always=False)
            )
        paused = await Runner.run(agent, paused.to_state(), **opts)
        [second] = paused.interruptions  # the callback may not approve a four-eyes call either
        state = paused.to_state()
        state.reject(second, rejection_message="one is enough", approver="ann")
        done = await Runner.run(agent, state, **opts)
    assert json.loads(done.final_output) == [
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
        {
            "type": "mcp_approval_response",
            "approval_request_id": "mcpr_2",
            "approve": False,
            "reason": "one is enough",
        },
    ]
    kinds = [i["type"] for i in done.to_input_list() if "type" in i]
    assert kinds.count("mcp_call") == 1
    assert [d.approver for d in done.decisions] == ["bob", "ann"]


async def test_a_standing_rule_answers_the_servers_later_requests(
    ts_env: WorkflowEnvironment,
) -> None:
    tool = HostedMCPTool(tool_config=DEEPWIKI)
    agent = Agent("Always", tools=[tool], model=ScriptedModel(asks_twice, "tests.hmcp.always"))
    client = ts_env.client
    async with serving(client, agent) as tq:
        opts: dict[str, Any] = {"client": client, "task_queue": tq, "serve": False}
        paused = await Runner.run(agent, "go", **opts)
        state = paused.to_state()
        state.approve(paused.interruptions[0], always_approve=True)
        done = await Runner.run(agent, state, **opts)
    assert [a["approve"] for a in json.loads(done.final_output)] == [True, True]
    assert [d.source for d in done.decisions] == ["person", "always_rule"]


def test_a_config_is_checked_and_its_secrets_stay_on_the_worker() -> None:
    for bad in [
        {"type": "function", "server_label": "x"},
        {"type": "mcp", "server_label": "no spaces"},
        {"type": "mcp"},
        {"type": "mcp", "server_label": "x", "server_url": float("nan")},
    ]:
        with pytest.raises(UserError):
            HostedMCPTool(tool_config=bad)
    tool = HostedMCPTool(
        tool_config={**DEEPWIKI, "headers": {"X-Key": "k"}, "authorization": "Bearer t"}
    )
    spec = tool.spec()
    assert spec.builtin == "hosted_mcp" and "secret" not in spec.model_dump_json()
    assert spec.builtin_config is not None and "headers" not in spec.builtin_config
    assert tool.full_config()["authorization"] == "Bearer t"
    trusted = HostedMCPTool(
        tool_config={**DEEPWIKI, "require_approval": {"never": {"tool_names": ["read"]}}}
    )
    assert callable(trusted.needs_approval)
    assert trusted.needs_approval(None, {"name": "read"}, "c") is False
    assert trusted.needs_approval(None, {"name": "write"}, "c") is True
    assert HostedMCPTool(tool_config={**DEEPWIKI, "allowed_tools": ["a"]}).needs_approval is True
    never = HostedMCPTool(tool_config={**DEEPWIKI, "require_approval": "never"})
    assert never.needs_approval is False
    fenced = HostedMCPTool(
        tool_config={**DEEPWIKI, "require_approval": "never", "allowed_tools": ["read"]}
    )
    assert callable(fenced.needs_approval)
    assert fenced.needs_approval(None, {"name": "read"}, "c") is False
    assert fenced.needs_approval(None, {"name": "drop_tables"}, "c") is True


async def test_a_request_for_a_tool_the_config_does_not_allow_is_refused(
    ts_env: WorkflowEnvironment,
) -> None:
    """The provider should never send one; if it does, the tool refuses it (nobody is asked,
    `on_approval_request` is not consulted) and the server is told why."""
    consulted: list[str] = []

    def approve_all(request: MCPToolApprovalRequest) -> dict[str, Any]:
        consulted.append(request.data.name)
        return {"approve": True}

    config = {**DEEPWIKI, "require_approval": "never", "allowed_tools": ["read_wiki"]}
    tool = HostedMCPTool(tool_config=config, on_approval_request=approve_all)
    agent = Agent("Fenced", tools=[tool], model=ScriptedModel(asks_twice, "tests.hmcp.fenced"))
    async with serving(ts_env.client, agent) as tq:
        opts: dict[str, Any] = {"client": ts_env.client, "task_queue": tq, "serve": False}
        done = await Runner.run(agent, "go", **opts)
    assert not done.interruptions and consulted == []
    answers = json.loads(done.final_output)
    assert [a["approve"] for a in answers] == [False, False]
    assert "'ask_question' is not in allowed_tools" in answers[0]["reason"]
