"""MCP servers as tool sources, with the approvals function tools have.

```python
from hitl.mcp import MCPServerStdio, MCPServerStreamableHttp

crm = MCPServerStreamableHttp(
    "crm",
    url="http://127.0.0.1:8931/mcp",
    headers={"Authorization": "Bearer ${CRM_TOKEN}"},  # read from the worker's environment
    require_approval={"lookup_customer": "never", "issue_credit": "always"},
)
agent = Agent("support", tools=[...], mcp_servers=[crm])
```

A server is configured in the worker's code (its command, URL and credentials never enter
history). When a run starts, its tools are listed in the `resolve_agent` activity and recorded
with the run's agent graph, so a parked run keeps the tool list and the approval modes it saw:
a server that changes later cannot relax a call that waits. Each call opens a session in the
`execute_tool` activity (retried by Temporal when the server is down) and passes the call's
idempotency key in the request's `_meta` (`hitl/idempotency_key`).

A server that asks the user for input in the middle of a call (MCP *elicitation*) parks the call
durably: the question becomes a pending request answered with the `answer` update (`hitl answer`,
`RunHandle.answer`, the Temporal CLI), days later if need be; the tool is then called again with
the answers given so far, so a server should elicit before it acts (the MCP pattern for
confirmations) and key its effect on the idempotency key.

Needs the `mcp` extra (`pip install 'hitl-temporal[mcp]'`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast

from hitl.context import ToolContext
from hitl.errors import UserError
from hitl.extras import require_extra
from hitl.limits import MAX_TEXT_CHARS
from hitl.schema import schema_problem
from hitl.tools import ApprovalPredicate, FunctionTool, ToolArgumentsError
from hitl.wire import InputAnswer, ToolSpec

if TYPE_CHECKING:
    from mcp import ClientSession

ApprovalSetting: TypeAlias = bool | Literal["always", "never"] | ApprovalPredicate
RequireApproval: TypeAlias = ApprovalSetting | Mapping[str, Any]
"""`"always"`, `"never"` (or a bool), a predicate `(ctx, params, call_id) -> bool` for every
tool, or a mapping by tool name to any of those (tools it does not name: `"*"`, else always).
The OpenAI Agents SDK's `{"always": {"tool_names": [...]}, "never": {"tool_names": [...]}}`
form is accepted too."""

MAX_ELICITATIONS = 5
"""Questions one call may ask before the run gives the model an error instead."""

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

_POLICY_OPTIONS = frozenset(
    {
        "timeout",
        "heartbeat_timeout",
        "max_attempts",
        "approval_timeout",
        "approval_request",
        "auto_approve",
        "approver",
        "approvers",
        "required_approvals",
        "allow_edits",
        "signed_decisions",
        "remind_after",
        "escalate_after",
        "escalate_to",
        "retry_safe",
        "tool_input_guardrails",
        "timeout_behavior",
    }
)


class MCPServerError(Exception):
    """The MCP server could not be reached or did not answer as MCP."""


class InputRequired(Exception):
    """The server asked for input the run has no answer for yet (elicitation)."""

    def __init__(
        self,
        server: str,
        message: str,
        schema: dict[str, Any],
        index: int,
        *,
        timeout: float | None = None,
    ) -> None:
        super().__init__(message)
        self.server, self.message, self.schema, self.index = server, message, schema, index
        self.timeout = timeout
        """Seconds the run waits for the answer; then the tool is called with `cancel`."""


def expand_env(value: str) -> str:
    """`${NAME}` replaced by the worker's environment variable (missing: a clear error)."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in os.environ:
            raise MCPServerError(f"environment variable {name} is not set on this worker")
        return os.environ[name]

    return _ENV_REF.sub(sub, value)


@dataclass(eq=False)
class MCPTool(FunctionTool):
    """A tool of an MCP server, as a function tool whose execution is an MCP `tools/call`."""

    server: MCPServer | None = field(default=None, repr=False)

    def spec(self) -> ToolSpec:
        """The tool as data, with its server's name."""
        spec = super().spec()
        spec.kind = "mcp"
        spec.mcp_server = self.server.name if self.server else None
        return spec

    def parse_arguments(self, arguments: str) -> dict[str, Any]:
        """Arguments as a JSON object valid against the server's input schema."""
        raw = super().parse_arguments(arguments)
        problem = schema_problem(raw, self.params_json_schema)
        if problem is not None:
            raise ToolArgumentsError(f"invalid arguments for {self.name}: {problem}")
        return raw

    async def invoke(self, ctx: ToolContext[Any], arguments: str, action: Any = None) -> Any:
        """Validate the arguments and call the tool on its server."""
        assert self.server is not None
        params = self.parse_arguments(arguments)
        return await self.server.call_tool(
            self.name,
            params,
            idempotency_key=ctx.idempotency_key,
            answers=list(ctx.answers),
            timeout=self.timeout,
        )


class MCPServer:
    """An MCP server whose tools an agent may call (configured on the worker).

    Args:
        name: How runs and operators name the server (unique among an agent's servers).
        require_approval: Which calls need a person (see `RequireApproval`); default: all.
        allowed_tools: Only these tools are offered to the model (default: all).
        blocked_tools: These tools are never offered.
        cache_tools_list: List the tools once per worker process (runs pin the list they saw
            either way); `False` lists them at every run start.
        timeout: Seconds one call may take (the tool activity's timeout).
        connect_timeout: Seconds to connect and initialize a session.
        tool_options: Options of `function_tool` applied to every tool of the server
            (`approval_request`, `approver`, `approvers`, `required_approvals`, `auto_approve`,
            `approval_timeout`, `retry_safe`, `max_attempts`, ...).
        tool_overrides: The same options per tool name, over `tool_options`.
    """

    transport = "mcp"

    def __init__(
        self,
        name: str,
        *,
        require_approval: RequireApproval = "always",
        allowed_tools: Sequence[str] | None = None,
        blocked_tools: Sequence[str] = (),
        cache_tools_list: bool = True,
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
        tool_options: Mapping[str, Any] | None = None,
        tool_overrides: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise UserError(f"MCP server name {name!r} must be 1-64 of [A-Za-z0-9_.-]")
        self.name = name
        self.require_approval = _normalize_approval(require_approval)
        self.allowed_tools = None if allowed_tools is None else set(allowed_tools)
        self.blocked_tools = set(blocked_tools)
        self.cache_tools_list = cache_tools_list
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.tool_options = dict(tool_options or {})
        self.tool_overrides = {k: dict(v) for k, v in (tool_overrides or {}).items()}
        for options in [self.tool_options, *self.tool_overrides.values()]:
            unknown = set(options) - _POLICY_OPTIONS
            if unknown:
                raise UserError(f"MCP server {name!r}: unknown tool options {sorted(unknown)}")
        self._tools: list[MCPTool] | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    # -- connection ---------------------------------------------------------------------------

    @asynccontextmanager
    async def _streams(self) -> AsyncIterator[tuple[Any, Any]]:
        raise NotImplementedError
        yield  # pragma: no cover

    @asynccontextmanager
    async def session(
        self, elicitation: Callable[..., Any] | None = None
    ) -> AsyncIterator[ClientSession]:
        """A connected, initialized client session (closed on exit)."""
        require_extra("mcp", "an MCP server", "mcp")
        from mcp import ClientSession

        try:
            async with (
                self._streams() as (read, write),
                ClientSession(
                    read,
                    write,
                    read_timeout_seconds=timedelta(seconds=self.timeout),
                    elicitation_callback=elicitation,
                ) as session,
            ):
                await asyncio.wait_for(session.initialize(), self.connect_timeout)
                yield session
        except MCPServerError:
            raise
        except BaseException as exc:
            inner = _first_leaf(exc)
            if isinstance(inner, MCPServerError):  # (a missing credential, in a task group)
                raise inner from None
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise MCPServerError(
                f"MCP server {self.name!r} ({self.transport}) failed: "
                f"{type(inner).__name__}: {inner}"
            ) from None

    # -- tools --------------------------------------------------------------------------------

    async def list_tools(self, *, refresh: bool = False) -> list[MCPTool]:
        """The server's tools as this worker offers them (listed once when cached)."""
        async with self._lock:
            if self._tools is not None and self.cache_tools_list and not refresh:
                return self._tools
            async with self.session() as session:
                listed = await session.list_tools()
            tools = [self._tool(t) for t in listed.tools if self._offered(t.name)]
            self._tools = tools
            return tools

    async def tool(self, name: str) -> MCPTool | None:
        """The tool called `name` (listing the server once if this worker has not yet)."""
        tools = self._tools if self._tools is not None else await self.list_tools()
        found = next((t for t in tools if t.name == name), None)
        if found is None and self._tools is not None and self._offered(name):
            found = next((t for t in await self.list_tools(refresh=True) if t.name == name), None)
        return found

    def _offered(self, name: str) -> bool:
        if name in self.blocked_tools:
            return False
        return self.allowed_tools is None or name in self.allowed_tools

    def _tool(self, tool: Any) -> MCPTool:
        options = {**self.tool_options, **self.tool_overrides.get(tool.name, {})}
        options.setdefault("timeout", self.timeout)
        schema = dict(tool.inputSchema or {"type": "object", "properties": {}})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        return MCPTool(
            name=tool.name,
            description=(tool.description or tool.title or tool.name)[:4000],
            params_json_schema=schema,
            func=_never_called,
            needs_approval=self.needs_approval(tool.name),
            strict_json_schema=False,
            server=self,
            **options,
        )

    def needs_approval(self, tool_name: str) -> bool | ApprovalPredicate:
        """The approval setting of one tool: `True`, `False` or a predicate."""
        setting = self.require_approval
        if isinstance(setting, dict):
            return cast("bool | ApprovalPredicate", setting.get(tool_name, setting.get("*", True)))
        return setting

    async def call_tool(
        self,
        name: str,
        params: dict[str, Any],
        *,
        idempotency_key: str,
        answers: list[InputAnswer] | None = None,
        timeout: float | None = None,
    ) -> str:
        """Call one tool; the text the model reads.

        The server's questions are answered from `answers` in order; one beyond them raises
        `InputRequired`.
        """
        require_extra("mcp", "an MCP server", "mcp")
        from mcp import types

        answers = answers or []
        asked: list[int] = [0]
        unanswered: list[InputRequired] = []

        async def elicit(context: Any, p: Any) -> Any:
            index = asked[0]
            asked[0] += 1
            message = str(getattr(p, "message", ""))[:MAX_TEXT_CHARS]
            schema = getattr(p, "requestedSchema", None)
            if schema is None:  # URL mode: nothing a form can answer here
                return types.ElicitResult(action="decline")
            if not unanswered and index < len(answers) and answers[index].question == message:
                a = answers[index]
                return types.ElicitResult(action=a.action, content=a.content)
            if not unanswered:
                unanswered.append(InputRequired(self.name, message, dict(schema), index))
            # Nobody can answer now: the server is told the user dismissed the question (it
            # must not act on that), and the call is asked again once a person answers.
            return types.ElicitResult(action="cancel")

        async with self.session(elicitation=elicit) as session:
            result = await session.call_tool(
                name,
                params,
                read_timeout_seconds=timedelta(seconds=timeout or self.timeout),
                meta={"hitl/idempotency_key": idempotency_key},
            )
        if unanswered:
            raise unanswered[0]
        return result_text(result)


class MCPServerStdio(MCPServer):
    """An MCP server the worker starts as a subprocess (stdio transport).

    Args:
        name: See `MCPServer`.
        command: The program to run.
        args: Its arguments.
        env: Its environment (values may use `${NAME}` from the worker's environment); only
            these variables and the MCP SDK's safe defaults (PATH, HOME, ...) are passed.
        cwd: Its working directory.
        **kwargs: `MCPServer` options.
    """

    transport = "stdio"

    def __init__(
        self,
        name: str,
        *,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, **kwargs)
        self.command, self.args = command, list(args)
        self.env, self.cwd = dict(env or {}), cwd

    @asynccontextmanager
    async def _streams(self) -> AsyncIterator[tuple[Any, Any]]:
        from mcp import StdioServerParameters
        from mcp.client.stdio import get_default_environment, stdio_client

        env = {**get_default_environment(), **{k: expand_env(v) for k, v in self.env.items()}}
        params = StdioServerParameters(command=self.command, args=self.args, env=env, cwd=self.cwd)
        with open(os.devnull, "w") as quiet:  # noqa: ASYNC230 (opening /dev/null does not block)
            async with stdio_client(params, errlog=quiet) as (read, write):
                yield read, write


class MCPServerStreamableHttp(MCPServer):
    """An MCP server reached over streamable HTTP.

    Args:
        name: See `MCPServer`.
        url: The server's MCP endpoint.
        headers: Request headers; values may use `${NAME}` from the worker's environment
            (e.g. `{"Authorization": "Bearer ${CRM_TOKEN}"}`), read at each connection.
        **kwargs: `MCPServer` options.
    """

    transport = "streamable-http"

    def __init__(
        self,
        name: str,
        *,
        url: str,
        headers: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, **kwargs)
        self.url, self.headers = url, dict(headers or {})

    @asynccontextmanager
    async def _streams(self) -> AsyncIterator[tuple[Any, Any]]:
        import httpx
        from mcp.client.streamable_http import streamable_http_client

        headers = {k: expand_env(v) for k, v in self.headers.items()}
        timeout = httpx.Timeout(self.timeout, connect=self.connect_timeout)
        async with (
            httpx.AsyncClient(headers=headers, timeout=timeout) as http,
            streamable_http_client(self.url, http_client=http) as (read, write, _),
        ):
            yield read, write


class MCPServerSse(MCPServer):
    """An MCP server reached over HTTP with server-sent events (the older MCP HTTP transport).

    Args:
        name: See `MCPServer`.
        url: The server's SSE endpoint (often `.../sse`).
        headers: Request headers; values may use `${NAME}` from the worker's environment.
        sse_read_timeout: Seconds to wait for the next event before the connection is closed.
        params: The OpenAI Agents SDK's form, `{"url": ..., "headers": ..., "timeout": ...,
            "sse_read_timeout": ...}`, instead of the keywords above.
        **kwargs: `MCPServer` options (`require_approval`, `tool_overrides`, ...).
    """

    transport = "sse"

    def __init__(
        self,
        name: str = "sse",
        *,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        sse_read_timeout: float = 300.0,
        params: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        given = dict(params or {})
        unknown = set(given) - {"url", "headers", "timeout", "sse_read_timeout"}
        if unknown:
            raise UserError(f"MCPServerSse params: unknown keys {sorted(unknown)}")
        if "timeout" in given:
            kwargs.setdefault("timeout", float(given["timeout"]))
        super().__init__(name, **kwargs)
        url = url or given.get("url")
        if not isinstance(url, str) or not url:
            raise UserError("MCPServerSse needs the server's url")
        self.url = url
        self.headers = dict(headers or given.get("headers") or {})
        self.sse_read_timeout = float(given.get("sse_read_timeout", sse_read_timeout))

    @asynccontextmanager
    async def _streams(self) -> AsyncIterator[tuple[Any, Any]]:
        from mcp.client.sse import sse_client

        headers = {k: expand_env(v) for k, v in self.headers.items()}
        async with sse_client(
            self.url,
            headers=headers,
            timeout=self.connect_timeout,
            sse_read_timeout=self.sse_read_timeout,
        ) as (read, write):
            yield read, write


async def mcp_tool(agent: Any, server: str, name: str) -> MCPTool | None:
    """The tool `name` of `agent`'s MCP server `server` (`None`: no such server or tool)."""
    found = next((s for s in agent.mcp_servers if s.name == server), None)
    return await found.tool(name) if found is not None else None


def result_text(result: Any) -> str:
    """A `CallToolResult` as the text the model reads (an error result says so)."""
    parts: list[str] = []
    for item in result.content or []:
        text = getattr(item, "text", None)
        parts.append(text if isinstance(text, str) else item.model_dump_json(exclude_none=True))
    if not parts and result.structuredContent is not None:
        parts.append(json.dumps(result.structuredContent, default=str))
    text = "\n".join(parts)
    if result.isError:
        return f"Error: {text or 'the tool failed'}"
    return text


def _never_called(*args: Any, **kwargs: Any) -> Any:  # pragma: no cover
    raise RuntimeError("MCP tools run through their server")


def _normalize_approval(setting: Any) -> bool | ApprovalPredicate | dict[str, Any]:
    def one(value: Any) -> bool | ApprovalPredicate:
        if isinstance(value, bool):
            return value
        if value in ("always", "never"):
            return bool(value == "always")
        if callable(value):
            return cast("ApprovalPredicate", value)
        raise UserError(
            f"require_approval values must be 'always', 'never', a bool or a predicate, "
            f"got {value!r:.100}"
        )

    if not isinstance(setting, Mapping):
        return one(setting)
    if set(setting) <= {"always", "never"} and all(
        isinstance(v, Mapping) for v in setting.values()
    ):  # the OpenAI Agents SDK's form
        flat: dict[str, Any] = {}
        for mode, spec in setting.items():
            for tool_name in spec.get("tool_names", []):
                flat[tool_name] = mode == "always"
        return flat
    return {str(k): one(v) for k, v in setting.items()}


def _first_leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside exception groups (anyio task groups wrap)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
