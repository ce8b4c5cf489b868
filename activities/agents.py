"""Activities that capture the agent graph at run start and run the run's error handlers."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from hitl._user_code import call_user
from hitl.activities.context import rebuild_context, user_failure
from hitl.admin import available_search_attributes
from hitl.agent import Agent
from hitl.errors import UserError
from hitl.mcp import MCPServerError
from hitl.model import model_spec_for
from hitl.refs import Allowed
from hitl.registry import AgentRegistry
from hitl.run_config import RunErrorHandlerInput, RunErrorHandlerResult
from hitl.wire import (
    ACT_HANDLE_RUN_ERROR,
    ACT_REGISTRY_DIRECTORY,
    ACT_RESOLVE_AGENT,
    RESOLVED_LEVEL,
    SEARCH_ATTRIBUTES,
    AgentGraph,
    ApproverDirectory,
    HandleRunErrorInput,
    HandleRunErrorOutput,
    ModelSpec,
    PinnedPolicy,
    ResolveAgentInput,
    ResolvedRun,
    RunConfigSpec,
)


def check_approver_setup(
    graph: AgentGraph, cfg: RunConfigSpec, directory: ApproverDirectory | None
) -> None:
    """Fail a run at start when its approvals could never be given on this worker.

    Signed decisions need the worker's approver directory; an approver list naming a group
    needs someone in that group.
    """
    groups = {g for e in (directory.approvers.values() if directory else []) for g in e.groups}
    keys = directory is not None and any(e.keys for e in directory.approvers.values())
    for agent in graph.agents.values():
        for tool in agent.tools:
            signed = (tool.signed_decisions or cfg.signed_decisions) and tool.approval != "never"
            if signed and not keys:
                raise UserError(
                    f"{tool.name} calls need signed decisions, and this worker has no "
                    "approver keys (set HITL_APPROVERS to the approver directory file)"
                )
            names = [*(tool.approvers or cfg.approvers), *(tool.escalate_to or cfg.escalate_to)]
            for name in names:
                if name.startswith("group:") and name[6:] not in groups:
                    raise UserError(
                        f"{tool.name}'s approvers name {name[:100]!r}, a group nobody belongs "
                        "to in this worker's approver directory (HITL_APPROVERS)"
                    )


async def with_mcp_tools(graph: AgentGraph, agents: Mapping[str, Agent[Any]]) -> AgentGraph:
    """The graph with the tools its agents' MCP servers list now (the run keeps this list).

    A server that cannot be reached raises a retryable `MCPServerUnavailable`: the activity is
    retried, and a run that cannot list its tools fails saying which server and why.
    """
    if not any(a.mcp_servers for a in agents.values()):
        return graph
    specs = dict(graph.agents)
    for agent_id, agent in agents.items():
        if not agent.mcp_servers or agent_id not in specs:
            continue
        spec = specs[agent_id]
        taken = {t.name: "a function tool" for t in spec.tools}
        taken.update({h.tool_name: "a handoff" for h in spec.handoffs})
        added = []
        for server in agent.mcp_servers:
            try:
                tools = await server.list_tools()
            except MCPServerError as exc:
                raise ApplicationError(str(exc), type="MCPServerUnavailable") from None
            for tool in tools:
                if tool.name in taken:
                    raise UserError(
                        f"agent {agent.name!r}: MCP server {server.name!r}'s tool "
                        f"{tool.name!r} clashes with {taken[tool.name]} of the same name"
                    )
                taken[tool.name] = f"a tool of MCP server {server.name!r}"
                added.append(tool.spec())
        specs[agent_id] = spec.model_copy(update={"tools": [*spec.tools, *added]})
    return graph.model_copy(update={"agents": specs})


def check_run_refs(cfg: RunConfigSpec, allowed: Allowed) -> None:
    """Refuse (`UserError`) a run whose config names code this worker does not allow."""
    named = [
        ("tool_error_formatter", cfg.tool_error_formatter),
        ("approver", cfg.approver),
        ("handoff_input_filter", cfg.handoff_input_filter),
        ("handoff_history_mapper", cfg.handoff_history_mapper),
        ("call_model_input_filter", cfg.call_model_input_filter),
        ("context_deserializer", cfg.context_deserializer),
        *((f"error_handlers[{k!r}]", v) for k, v in cfg.error_handlers.items()),
        *(("input_guardrails", g) for g in cfg.input_guardrails),
        *(("output_guardrails", g) for g in cfg.output_guardrails),
    ]
    for what, ref in named:
        if ref:
            allowed.get(ref, what=f"the run's {what}")
    if cfg.context_type:
        allowed.get(cfg.context_type, what="the run context's type")
    unknown = set(cfg.error_handlers) - {"max_turns"}
    if unknown:
        raise UserError(f"unsupported error_handlers keys: {sorted(unknown)}")


def with_run_model(graph: AgentGraph, cfg: RunConfigSpec, allowed: Allowed) -> AgentGraph:
    """`graph` with the run's own model (`RunConfig.model`) on every agent, if it names one.

    Raises:
        UserError: the model names an endpoint or secret variables this worker does not allow.
    """
    if not cfg.model:
        return graph
    spec = cfg.model if isinstance(cfg.model, ModelSpec) else model_spec_for(cfg.model)
    if not allowed.allows_model(spec):
        raise UserError(
            f"the run's model {spec.name[:100]!r} names an endpoint or secret "
            "variables this worker does not know; allow the Model on the worker "
            "(`hitl.allow(OpenAIModel(...))` or `build_worker(..., allow=[...])`)"
        )
    agents = {k: a.model_copy(update={"model": spec}) for k, a in graph.agents.items()}
    return graph.model_copy(update={"agents": agents})


class AgentActivities:
    """Graph capture and error handlers for the agents in `registry`.

    Args:
        registry: The agents this worker serves.
        search_attributes: Whether the namespace has our search attributes; `None` checks
            (again at most once a minute, so `hitl setup` takes effect without a restart). The
            answer is recorded per run, so the workflow stays deterministic.
        tracing: The worker traces with OpenTelemetry.
        directory: The approver directory (groups, public keys) pinned into each run.
        notify: The worker has notifiers: runs start `notify` activities.
        policy: The worker's approval policy, pinned into each run (docs/policies.md), or
            what gives the policy a run starting now pins (the policy registry's watch).
    """

    RECHECK_SECONDS = 60.0

    def __init__(
        self,
        registry: AgentRegistry,
        search_attributes: bool | None = None,
        tracing: bool = False,
        directory: ApproverDirectory | None = None,
        notify: bool = False,
        policy: PinnedPolicy | Callable[[], PinnedPolicy | None] | None = None,
    ) -> None:
        self.registry = registry
        self.policy = policy
        self.search_attributes = search_attributes
        self.tracing = tracing
        self.directory = directory
        self.notify = notify
        self._checked: tuple[float, list[str]] | None = None

    async def _search_attributes_ready(self) -> list[str]:
        """Our search attributes runs keep current: those registered in the namespace."""
        if self.search_attributes is not None:
            return list(SEARCH_ATTRIBUTES) if self.search_attributes else []
        now = time.monotonic()
        if self._checked is None or now - self._checked[0] > self.RECHECK_SECONDS:
            try:
                ready = await available_search_attributes(activity.client()) or []
            except Exception:
                ready = []
            self._checked = (now, ready)
        return self._checked[1]

    @activity.defn(name=ACT_RESOLVE_AGENT)
    async def resolve_agent(self, inp: ResolveAgentInput) -> ResolvedRun:
        """Capture the graph of the named agent (recorded in history: the run is pinned to it).

        Everything the run's config names must be allowed on this worker (`hitl.refs`): the
        run fails here, before any model call or tool, when something is not.
        """
        try:
            captured = self.registry.resolve(inp.agent)
            graph = await with_mcp_tools(captured.graph, captured.agents)
            cfg = inp.run_config
            check_run_refs(cfg, self.registry.allowed)
            graph = with_run_model(graph, cfg, self.registry.allowed)
            check_approver_setup(graph, cfg, self.directory)
        except UserError as exc:
            raise user_failure(exc) from None
        attributes = await self._search_attributes_ready()
        return ResolvedRun(
            graph=graph,
            attributes=attributes,
            tracing=self.tracing,
            directory=self.directory,
            policy=self.policy() if callable(self.policy) else self.policy,
            notify=self.notify,
            level=RESOLVED_LEVEL,  # implies what the earlier fields said
        )

    @activity.defn(name=ACT_REGISTRY_DIRECTORY)
    async def registry_directory(self) -> ApproverDirectory:
        """The worker's approver directory, for the policy registry (who may publish)."""
        return self.directory or ApproverDirectory()

    @activity.defn(name=ACT_HANDLE_RUN_ERROR)
    async def handle_run_error(self, inp: HandleRunErrorInput) -> HandleRunErrorOutput:
        """Run an `error_handlers` entry; it may turn the error into a controlled final output."""
        try:
            handler = self.registry.allowed.get_callable(
                inp.handler, what="the run's max_turns error handler"
            )
            context = rebuild_context(inp.context, self.registry.allowed)
        except UserError as exc:
            raise user_failure(exc) from None
        data = RunErrorHandlerInput(
            kind=inp.kind,
            message=inp.message,
            max_turns=inp.max_turns,
            context=context,
            input_items=inp.input_items,
            new_items=inp.new_items,
        )
        result = await call_user(handler, data, what="the run's max_turns error handler")
        if result is None:
            return HandleRunErrorOutput(handled=False)
        if isinstance(result, RunErrorHandlerResult):
            return HandleRunErrorOutput(
                handled=True,
                final_output=result.final_output,
                include_in_history=result.include_in_history,
            )
        return HandleRunErrorOutput(handled=True, final_output=result)
