"""The worker's registry: which agents it serves, by name, and their captured graphs."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from hitl.agent import Agent, CapturedGraph, _as_handoff, capture_graph
from hitl.errors import UserError
from hitl.mcp import mcp_tool
from hitl.refs import Allowed, context_types
from hitl.tools import FunctionTool


class AgentRegistry:
    """Agents a worker serves. Runs name their root agent: one registered here, by its name.

    Only registered agents start runs. An agent reached from one (by a handoff, or as an agent
    tool) runs inside that root's run, under its rules: an agent offered only through
    `as_tool(needs_approval=True)` is never started on its own, so its gate cannot be skipped.
    Register it too if runs may start with it.

    Graphs are captured once, when an agent is registered, so a broken agent definition fails
    at worker start rather than in the middle of a run.

    `allowed` is what runs may name on this worker (see `hitl.refs`): the served agents'
    context types and models, plus the `allow` objects (functions, guardrails, types, models
    or whole `RunConfig`s).
    """

    def __init__(
        self,
        agents: Iterable[Agent[Any]] = (),
        *,
        default_model: str | None = None,
        allow: Iterable[Any] = (),
    ):
        self._default_model = default_model
        self._graphs: dict[str, CapturedGraph] = {}
        self._reached_from: dict[str, str] = {}
        """Agents reached from a root but not registered themselves: name -> a root's name."""
        self.allowed = Allowed(allow)
        for agent in agents:
            self.register(agent)

    def register(self, agent: Agent[Any]) -> None:
        """Serve `agent` (by its name): runs may start with it."""
        existing = self._graphs.get(agent.name)
        if existing is not None:
            if existing.agents[existing.graph.root] is not agent:
                raise UserError(f"two different agents are registered as {agent.name!r}")
            return
        captured = capture_graph(agent, default_model=self._default_model)
        self._graphs[agent.name] = captured
        self._reached_from.pop(agent.name, None)
        for reachable in captured.agents.values():
            if reachable.name not in self._graphs:
                self._reached_from.setdefault(reachable.name, agent.name)
            self.allowed.add(*_context_types_of(reachable))
        self.allowed.add_models(a.model for a in captured.graph.agents.values())

    @property
    def names(self) -> list[str]:
        """Names runs can be started with."""
        return sorted(self._graphs)

    def resolve(self, name: str) -> CapturedGraph:
        """The captured graph whose root is the registered agent called `name`."""
        try:
            return self._graphs[name]
        except KeyError:
            pass
        known = ", ".join(repr(n) for n in self.names) or "none"
        root = self._reached_from.get(name)
        if root is not None:
            raise UserError(
                f"agent {name!r} runs only inside runs of {root!r} on this worker (it is not "
                f"registered to start runs; it serves: {known})"
            )
        raise UserError(
            f"no agent named {name!r} is registered on this worker (it serves: {known})"
        )

    def agent(self, root: str, agent_id: str) -> Agent[Any]:
        """The live agent `agent_id` of the graph rooted at `root`."""
        return self.resolve(root).agent(agent_id)

    def tool(self, root: str, agent_id: str, tool_name: str) -> FunctionTool | None:
        """The deployed function tool `tool_name` of that agent, or `None`."""
        try:
            agent = self.agent(root, agent_id)
        except UserError:
            return None
        return next((t for t in agent.tools if t.name == tool_name), None)

    async def find_tool(
        self, root: str, agent_id: str, tool_name: str, server: str | None = None
    ) -> FunctionTool | None:
        """The deployed tool, function or MCP (`server`: the one the run's graph names).

        An MCP server that cannot be reached raises `hitl.mcp.MCPServerError`.
        """
        if server is None:
            return self.tool(root, agent_id, tool_name)
        try:
            agent = self.agent(root, agent_id)
        except UserError:
            return None
        return await mcp_tool(agent, server, tool_name)


def load_agents(ref: str) -> list[Agent[Any]]:
    """Load agents from `module:attr` (an Agent, or a list/tuple/dict of Agents) or `module`.

    With a bare module, every module-level `Agent` is served.
    """
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise UserError(f"cannot import {module_name!r}: {exc}") from exc
    if not attr:
        found = [v for v in vars(module).values() if isinstance(v, Agent)]
        if not found:
            raise UserError(f"module {module_name!r} defines no Agent")
        return found
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UserError(f"{module_name!r} has no attribute {attr!r}") from None
    if isinstance(obj, Agent):
        return [obj]
    values = obj.values() if isinstance(obj, dict) else obj
    try:
        agents = list(values)
    except TypeError:
        raise UserError(f"{ref!r} is neither an Agent nor a collection of Agents") from None
    if not agents or not all(isinstance(a, Agent) for a in agents):
        raise UserError(f"{ref!r} must be an Agent or a non-empty collection of Agents")
    return agents


def _context_types_of(agent: Agent[Any]) -> list[type[Any]]:
    """Context types an agent's code declares: runs of it may carry contexts of these types."""
    found: list[type[Any]] = []
    orig = getattr(agent, "__orig_class__", None)  # Agent[MyContext](...)
    if orig is not None:
        found += [t for t in getattr(orig, "__args__", ()) if isinstance(t, type)]
    functions: list[Any] = [agent.instructions]
    for tool in agent.tools:
        functions += [tool.func, tool.needs_approval, tool.approval_request, tool.approver]
        functions += [getattr(g, "guardrail_function", None) for g in tool.tool_input_guardrails]
    for guardrail in [*agent.input_guardrails, *agent.output_guardrails]:
        functions.append(getattr(guardrail, "guardrail_function", None))
    functions += [_as_handoff(h).input_filter for h in agent.handoffs]
    for fn in functions:
        if callable(fn):
            found += context_types(fn)
    # Types defined inside functions cannot be named by a reference (nor sent by a client).
    return [t for t in found if "<locals>" not in t.__qualname__]


def load_object(ref: str) -> Any:
    """Import `module:attr` for the worker's own configuration (`--allow`), at start only."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"{ref!r} is not of the form module:attr")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise UserError(f"cannot import {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UserError(f"{module_name!r} has no attribute {attr!r}") from None
    return obj
