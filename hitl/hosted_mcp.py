"""`HostedMCPTool`: the OpenAI Agents SDK's hosted MCP server, its approvals through our gate.

The provider (OpenAI's Responses API) lists and calls the tools of a hosted MCP server itself:
the agent declares it with `tool_config` (`{"type": "mcp", "server_label", "server_url",
"require_approval", ...}`) and the model's output holds what the server did (`mcp_list_tools`,
`mcp_call` items, kept in the transcript and never executed by the run). With
`require_approval`, the output holds `mcp_approval_request` items instead
(`{"id", "server_label", "name", "arguments"}`): each becomes a call of this tool, decided like
every other (approvers, signing, four eyes, audit, deadlines), unless `on_approval_request`
(the worker's own function, run in an activity) approves or rejects it first. The decision
goes back in the next model call as `{"type": "mcp_approval_response", "approval_request_id",
"approve", "reason"?}`; an approved request then runs on the provider's side.

A request naming a `server_label` the agent has no hosted tool for, malformed or oversized, or
repeating an id, is refused (answered `approve: false` with why): nothing is approved, asked
or run for it. Secrets of the config (`authorization`, `headers`) never reach history: the run
records the config without them, and the worker adds them from its tool when it calls the
model. Hosted MCP servers need the Responses API; Chat Completions is not offered the tool.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypeAlias, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from hitl._user_code import call_user
from hitl.approval import ApprovalCall, ApprovalRequest, ToolDenied
from hitl.context import RunContextWrapper
from hitl.errors import UserError
from hitl.items import (
    MCP_APPROVAL_REQUEST,
    MCP_APPROVED_KEY,
    OVERSIZED_KEY,
    PROBLEM_KEY,
    TOOL_KEY,
    strict_json,
)
from hitl.sdk_tools import on_approval_decision
from hitl.tools import FunctionTool
from hitl.wire import CallModelInput, ToolSpec

__all__ = [
    "HostedMCPTool",
    "MCPApprovalRequestData",
    "MCPToolApprovalFunction",
    "MCPToolApprovalFunctionResult",
    "MCPToolApprovalRequest",
    "MCPToolChoice",
]

SECRET_KEYS = ("authorization", "headers")
"""Keys of a `tool_config` kept out of history (added by the worker when it calls the model)."""
MAX_LABEL_CHARS = 64
_LABEL = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_REQUEST_ID_CHARS = 256
"""Characters of an `mcp_approval_request`'s id (longer: refused)."""
MAX_MCP_TOOL_NAME_CHARS = 256
"""Characters of the MCP tool name a request names (longer: refused)."""


def tool_name_for(server_label: str) -> str:
    """The name of the agent's tool for a hosted server (each label is its own tool)."""
    return f"hosted_mcp_{server_label}"


@dataclass(frozen=True)
class MCPApprovalRequestData:
    """The model's `mcp_approval_request`, as `MCPToolApprovalRequest.data`.

    The SDK's `McpApprovalRequest`: `arguments` is the JSON text the server would be called
    with.
    """

    id: str
    server_label: str
    name: str
    arguments: str
    type: Literal["mcp_approval_request"] = "mcp_approval_request"


@dataclass
class MCPToolApprovalRequest:
    """What `on_approval_request` is called with: the run context and the request."""

    ctx_wrapper: RunContextWrapper[Any]
    data: MCPApprovalRequestData


class MCPToolApprovalFunctionResult(TypedDict):
    """What `on_approval_request` returns: approve or not, and why (a rejection's reason)."""

    approve: bool
    reason: NotRequired[str]


MCPToolApprovalFunction: TypeAlias = Callable[
    [MCPToolApprovalRequest],
    "MCPToolApprovalFunctionResult | Awaitable[MCPToolApprovalFunctionResult]",
]
"""`(request) -> {"approve": bool, "reason": str}`, sync or async, in an activity; anything
else leaves the request to a person."""


@dataclass(frozen=True)
class MCPToolChoice:
    """Force one hosted MCP server's tool: `ModelSettings(tool_choice=MCPToolChoice(...))`.

    Sent as the Responses `{"type": "mcp", "server_label", "name"}` (recorded as the setting
    `mcp:<server_label>:<name>`).
    """

    server_label: str
    name: str


def _public_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config as recorded: JSON, without secrets."""
    public = {k: v for k, v in config.items() if k not in SECRET_KEYS}
    try:
        return dict(json.loads(json.dumps(public, allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise UserError(f"HostedMCPTool: tool_config must be JSON: {exc}") from None


def _names(value: Any) -> set[str] | None:
    """Tool names from `["a", "b"]` or `{"tool_names": [...]}` (`None`: no such list)."""
    if isinstance(value, Mapping):
        value = value.get("tool_names")
    return {str(n) for n in value} if isinstance(value, list) else None


def _needs_approval(require: Any, allowed: set[str] | None) -> bool | Callable[..., bool]:
    """`require_approval` as the gate's rule.

    `"never"`: no; a dict: no for the tools it lists under `never`; anything else
    (`"always"`, unset): ask. A tool outside `allowed_tools` always asks (and its request is
    refused by the tool's approver): the provider should never send one.
    """
    trusted = _names(require.get("never")) if isinstance(require, Mapping) else None
    if allowed is None and require == "never":
        return False
    if require != "never" and not trusted:
        return True  # (recorded as "always": the pinned graph enforces it)

    def predicate(_ctx: Any, params: dict[str, Any], _call_id: str) -> bool:
        name = params.get("name")
        if allowed is not None and name not in allowed:
            return True
        return require != "never" and name not in (trusted or set())

    return predicate


class HostedMCPTool(FunctionTool):
    """The SDK's `HostedMCPTool`: a hosted MCP server the provider calls, approvals gated here.

    Args:
        tool_config: The Responses `mcp` tool: `type` `"mcp"`, `server_label` (letters, digits,
            `_`, `-`; one tool per label), `server_url` (or `connector_id`), `require_approval`
            (`"always"`, `"never"`, or `{"never": {"tool_names": [...]}}`), and any other field
            the provider takes (`allowed_tools`, `server_description`, `authorization`,
            `headers`: the last two are never recorded).
        on_approval_request: `(MCPToolApprovalRequest) -> {"approve": bool, "reason": str}`,
            sync or async, consulted in an activity before anyone is asked; a rejection's
            `reason` is what the provider is told. Anything else leaves it to a person.
        **options: Any other `function_tool` option (`approvers`, `signed_decisions`,
            `required_approvals`, `approval_timeout`, `auto_approve`, ...).
    """

    def __init__(
        self,
        tool_config: Mapping[str, Any],
        on_approval_request: MCPToolApprovalFunction | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(tool_config, Mapping) or tool_config.get("type", "mcp") != "mcp":
            raise UserError('HostedMCPTool: tool_config must be a dict with "type": "mcp"')
        label = tool_config.get("server_label")
        if not isinstance(label, str) or not _LABEL.fullmatch(label):
            raise UserError("HostedMCPTool: server_label must be 1-64 letters, digits, '_' or '-'")
        if on_approval_request is not None and not callable(on_approval_request):
            raise UserError("HostedMCPTool: on_approval_request must be callable")
        self.tool_config = dict(tool_config)
        self.server_label = label
        self.on_approval_request = on_approval_request
        self._public = {"type": "mcp", **_public_config(tool_config)}
        self.allowed = _names(tool_config.get("allowed_tools"))
        """The server's tools the config allows (`None`: all); a request for another is refused."""

        async def approver(ctx: RunContextWrapper[Any], call: ApprovalCall) -> Any:
            return await self._approve(ctx, call)

        approver.__qualname__ = f"HostedMCPTool[{label}]"  # recorded as `policy:...`
        FunctionTool.__init__(
            self,
            name=tool_name_for(label),
            description=str(tool_config.get("server_description") or f"hosted MCP {label}"),
            params_json_schema=_REQUEST_PARAMETERS,
            _args_model=_RequestArgs,
            func=self._invoke,
            needs_approval=_needs_approval(tool_config.get("require_approval"), self.allowed),
            approval_request=self._render,
            approver=approver,
            allow_edits=False,  # the provider runs what it asked for, not an edit
            # answering runs no user code: a local activity, unless the caller says otherwise
            local_activity=options.pop("local_activity", options.get("retry_safe", True)),
            **options,
        )

    @property
    def type(self) -> str:
        """The Responses tool type."""
        return "mcp"

    def spec(self) -> ToolSpec:
        """The tool as data: the hosted config (without secrets) the model is sent."""
        return (
            super()
            .spec()
            .model_copy(update={"builtin": "hosted_mcp", "builtin_config": self._public})
        )

    def full_config(self) -> dict[str, Any]:
        """The config with its secrets, as the worker sends it to the provider."""
        return {
            **self._public,
            **{k: self.tool_config[k] for k in SECRET_KEYS if k in self.tool_config},
        }

    def call_item(self, call_id: str, arguments: str) -> dict[str, Any]:
        """The request as the model made it: an `mcp_approval_request` item."""
        params = _params(arguments)
        return {"type": "mcp_approval_request", "id": call_id, **params}

    async def _approve(self, ctx: RunContextWrapper[Any], call: ApprovalCall) -> Any:
        params = _params(call.arguments)
        if self.allowed is not None and params.get("name") not in self.allowed:
            why = f"refused: {str(params.get('name'))[:100]!r} is not in allowed_tools"
            return ToolDenied(message=why, reason="refused by the tool's checks")
        if self.on_approval_request is None:
            return None
        data = MCPApprovalRequestData(
            id=call.call_id,
            server_label=str(params.get("server_label", "")),
            name=str(params.get("name", "")),
            arguments=str(params.get("arguments", "")),
        )
        what = f"on_approval_request of {self.name!r}"
        result = await call_user(
            self.on_approval_request, MCPToolApprovalRequest(ctx, data), what=what
        )
        return on_approval_decision(result)

    def _render(self, params: dict[str, Any]) -> ApprovalRequest:
        name, label = params.get("name", ""), params.get("server_label", "")
        return ApprovalRequest(
            title=f"Call {name} on {label}",
            message=(
                f"The hosted MCP server {label!r} asks to run its tool {name!r}; "
                "the provider runs it if you approve."
            ),
            preview=str(params.get("arguments", "")),
            preview_label="Arguments",
            primary_label="Approve",
        )

    async def _invoke(self, **_params: Any) -> str:
        # Nothing runs here: the provider runs the approved call; this answers it.
        return json.dumps({MCP_APPROVED_KEY: "approved"})


def _params(arguments: str) -> dict[str, Any]:
    try:
        value = strict_json(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class _RequestArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    server_label: str = Field(pattern=_LABEL.pattern, max_length=MAX_LABEL_CHARS)
    name: str = Field(min_length=1, max_length=MAX_MCP_TOOL_NAME_CHARS)
    arguments: str


_REQUEST_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "server_label": {"type": "string"},
        "name": {"type": "string"},
        "arguments": {"type": "string"},
    },
    "required": ["server_label", "name", "arguments"],
    "additionalProperties": False,
}
"""An `mcp_approval_request` as arguments (what the gate checks, signs and shows)."""


# ----------------------------------------------------------------------------- model activity


def checked_mcp_approval(
    item: dict[str, Any], max_argument_bytes: int, hosted: dict[str, str]
) -> dict[str, Any]:
    """An `mcp_approval_request` naming the agent's hosted tool for its `server_label`.

    Only `id`, `server_label`, `name` and `arguments` are kept, each checked; a label the agent
    has no hosted tool for names a tool that does not exist, and a malformed or oversized
    request is marked: the run refuses such a request (answers it `approve: false`), asking
    and approving nothing.
    """
    rid, label, name, args = (item.get(k) for k in ("id", "server_label", "name", "arguments"))
    out: dict[str, Any] = {"type": MCP_APPROVAL_REQUEST}
    if isinstance(rid, str) and 0 < len(rid) <= MAX_REQUEST_ID_CHARS:
        out["id"] = rid
    else:
        return out  # no usable id: no call, nothing to answer
    out["server_label"] = label[:64] if isinstance(label, str) else ""
    out["name"] = name[:MAX_MCP_TOOL_NAME_CHARS] if isinstance(name, str) else ""
    out["arguments"] = args if isinstance(args, str) else ""
    out[TOOL_KEY] = hosted.get(label, "") if isinstance(label, str) else ""
    if not out[TOOL_KEY]:
        out[TOOL_KEY] = f"hosted_mcp:{out['server_label'] or '?'}"  # no such tool: refused
    problem = None
    if not isinstance(label, str) or not isinstance(name, str) or not isinstance(args, str):
        problem = "server_label, name and arguments must be strings"
    elif len(name) > MAX_MCP_TOOL_NAME_CHARS or not name:
        problem = f"the tool name must be 1-{MAX_MCP_TOOL_NAME_CHARS} characters"
    size = len(args.encode("utf-8", "surrogatepass")) if isinstance(args, str) else 0
    if size > max_argument_bytes:
        return {**out, "arguments": "", OVERSIZED_KEY: size}
    return {**out, PROBLEM_KEY: problem} if problem else out


def with_hosted_secrets(inp: CallModelInput, agent: Any) -> CallModelInput:
    """The input with each hosted MCP tool's whole config, secrets included.

    From the worker's own tool: history holds the config without them, and this copy is
    never recorded.
    """
    if not any(t.builtin == "hosted_mcp" for t in inp.tools):
        return inp
    full = {
        t.name: t.full_config()
        for t in agent.tools
        if callable(getattr(t, "full_config", None)) and hasattr(t, "server_label")
    }
    tools = [
        t.model_copy(update={"builtin_config": full[t.name]})
        if t.builtin == "hosted_mcp"
        and t.name in full
        and full[t.name].get("server_label") == (t.builtin_config or {}).get("server_label")
        else t
        for t in inp.tools
    ]
    return inp.model_copy(update={"tools": tools})
