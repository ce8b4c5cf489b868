"""MCP server configuration on the worker: approval settings, filters, credentials from the
environment, results as text, and argument checks against the server's schema (no server)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from hitl import Agent
from hitl.errors import UserError
from hitl.mcp import (
    MCPServerError,
    MCPServerStdio,
    MCPServerStreamableHttp,
    expand_env,
    result_text,
)
from hitl.tools import ToolArgumentsError


def listed(name: str, schema: dict[str, Any] | None = None) -> Any:
    """A tool as `tools/list` describes it."""
    return SimpleNamespace(
        name=name,
        title=None,
        description=f"{name} does things",
        inputSchema=schema
        or {
            "type": "object",
            "properties": {"order_id": {"type": "integer"}, "amount": {"type": "number"}},
            "required": ["order_id"],
        },
    )


def server(**options: Any) -> MCPServerStdio:
    return MCPServerStdio("crm", command="true", **options)


def is_large(ctx: Any, params: dict[str, Any], call_id: str) -> bool:
    return bool(params.get("amount", 0) > 100)


def test_calls_need_approval_unless_the_worker_says_otherwise() -> None:
    assert server().needs_approval("anything") is True
    assert server(require_approval="never").needs_approval("refund") is False
    by_name = server(require_approval={"lookup": "never", "refund": is_large})
    assert by_name.needs_approval("lookup") is False
    assert by_name.needs_approval("refund") is is_large
    assert by_name.needs_approval("unnamed") is True  # not named: the safe default
    assert server(require_approval={"*": "never", "pay": True}).needs_approval("x") is False
    sdk_form = server(
        require_approval={"always": {"tool_names": ["pay"]}, "never": {"tool_names": ["read"]}}
    )
    assert sdk_form.needs_approval("pay") is True and sdk_form.needs_approval("read") is False


@pytest.mark.parametrize("bad", ["sometimes", 3, {"pay": "maybe"}])
def test_a_wrong_approval_setting_is_refused_when_configured(bad: Any) -> None:
    with pytest.raises(UserError, match="require_approval"):
        server(require_approval=bad)


def test_tool_options_become_the_tools_policy() -> None:
    s = server(
        tool_options={"approvers": ["group:finance"], "retry_safe": False},
        tool_overrides={"refund": {"required_approvals": 2}},
        require_approval={"refund": "always", "lookup": "never"},
    )
    refund, lookup = s._tool(listed("refund")), s._tool(listed("lookup"))
    spec = refund.spec()
    assert (spec.kind, spec.mcp_server, spec.approval) == ("mcp", "crm", "always")
    assert spec.approvers == ["group:finance"] and spec.required_approvals == 2
    assert spec.retry_safe is False and lookup.spec().approval == "never"
    with pytest.raises(UserError, match="unknown tool options"):
        server(tool_options={"needs_approval": True})


def test_filters_decide_what_the_model_is_offered() -> None:
    s = server(allowed_tools=["refund", "lookup"], blocked_tools=["lookup"])
    assert s._offered("refund") and not s._offered("lookup") and not s._offered("delete")


def test_arguments_are_checked_against_the_servers_schema() -> None:
    tool = server()._tool(listed("refund"))
    assert tool.parse_arguments('{"order_id": 7, "amount": 5}') == {"order_id": 7, "amount": 5}
    for bad in ['{"amount": 5}', '{"order_id": "7"}', "[1]", "{"]:
        with pytest.raises(ToolArgumentsError):
            tool.parse_arguments(bad)


def test_credentials_come_from_the_workers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRM_TOKEN", "s3cret")
    assert expand_env("Bearer ${CRM_TOKEN}") == "Bearer s3cret"
    monkeypatch.delenv("CRM_TOKEN")
    with pytest.raises(MCPServerError, match="CRM_TOKEN is not set"):
        expand_env("Bearer ${CRM_TOKEN}")
    # The secret is configuration on the worker: nothing of it is in the tool's recorded spec.
    http = MCPServerStreamableHttp("crm", url="http://x/mcp", headers={"A": "${CRM_TOKEN}"})
    assert "CRM_TOKEN" not in http._tool(listed("refund")).spec().model_dump_json()


def test_results_read_as_text() -> None:
    text = SimpleNamespace(text="done")
    image = SimpleNamespace(text=None, model_dump_json=lambda **_: '{"type":"image"}')
    assert (
        result_text(SimpleNamespace(content=[text], structuredContent=None, isError=False))
        == "done"
    )
    both = SimpleNamespace(content=[text, image], structuredContent=None, isError=False)
    assert result_text(both) == 'done\n{"type":"image"}'
    structured = SimpleNamespace(content=[], structuredContent={"a": 1}, isError=False)
    assert result_text(structured) == '{"a": 1}'
    failed = SimpleNamespace(
        content=[SimpleNamespace(text="no such order")], structuredContent=None, isError=True
    )
    assert result_text(failed) == "Error: no such order"


def test_agents_take_only_uniquely_named_servers() -> None:
    with pytest.raises(UserError, match="two MCP servers named 'crm'"):
        Agent("a", mcp_servers=[server(), server()])
    with pytest.raises(UserError, match="mcp_servers must be MCP servers"):
        Agent("a", mcp_servers=["http://crm"])
    with pytest.raises(UserError, match="must be 1-64"):
        MCPServerStdio("bad name!", command="true")
