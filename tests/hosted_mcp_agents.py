"""Agents with the SDK's `HostedMCPTool`, importable by worker subprocesses
(`--agents tests.hosted_mcp_agents:deepwiki`), and the wire items a hosted MCP server's
provider answers with (scripted on the local OpenAI-wire server)."""

from __future__ import annotations

import json
from typing import Any

from hitl import Agent, HostedMCPTool

DEEPWIKI: dict[str, Any] = {
    "type": "mcp",
    "server_label": "deepwiki",
    "server_url": "https://mcp.deepwiki.com/mcp",
    "require_approval": "always",
}

deepwiki = Agent(
    name="MCP Assistant",
    model="gpt-5.6-sol",
    instructions="You must always use the MCP tools to answer questions.",
    tools=[HostedMCPTool(tool_config={**DEEPWIKI, "authorization": "Bearer sk-hosted-secret"})],
)


def list_tools(label: str = "deepwiki", item_id: str = "mcpl_1") -> dict[str, Any]:
    """An `mcp_list_tools` output item: what the hosted server offers."""
    return {
        "type": "mcp_list_tools",
        "id": item_id,
        "server_label": label,
        "tools": [
            {
                "name": "ask_question",
                "input_schema": {"type": "object", "properties": {"question": {}}},
            }
        ],
    }


def approval_request(
    request_id: str, label: str = "deepwiki", name: str = "ask_question", **arguments: Any
) -> dict[str, Any]:
    """An `mcp_approval_request` output item: the hosted server asks to run one tool."""
    args = arguments or {"repoName": "openai/codex", "question": "Which language?"}
    return {
        "type": "mcp_approval_request",
        "id": request_id,
        "server_label": label,
        "name": name,
        "arguments": json.dumps(args),
    }


def mcp_call(request_id: str, output: str, label: str = "deepwiki") -> dict[str, Any]:
    """An `mcp_call` output item: the provider ran the approved call."""
    return {
        "type": "mcp_call",
        "id": f"mcp_{request_id}",
        "server_label": label,
        "name": "ask_question",
        "arguments": json.dumps({"repoName": "openai/codex"}),
        "output": output,
        "approval_request_id": request_id,
    }
