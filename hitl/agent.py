"""Agents, handoffs, and the capture of an agent graph as data."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeAlias

from pydantic import TypeAdapter

from hitl.context import RunContextWrapper, TContext
from hitl.errors import UserError
from hitl.guardrails import InputGuardrail, OutputGuardrail
from hitl.model import Model, model_spec_for
from hitl.schema import ensure_strict_json_schema
from hitl.tools import (
    ApprovalPredicate,
    ApprovalRequestFunction,
    ApproverFunction,
    FunctionTool,
    function_tool,
)
from hitl.wire import AgentGraph, AgentSpec, HandoffSpec, ModelSettings, ToolSpec

HandoffInputFilter: TypeAlias = Callable[["HandoffInputData"], Any]
"""`(HandoffInputData) -> HandoffInputData`, sync or async; runs in an activity."""


@dataclass
class HandoffInputData:
    """What a handoff input filter sees and returns (the OpenAI Agents SDK's shape).

    Attributes:
        input_history: The run's input items (for a nested history: the summary).
        pre_handoff_items: Items produced before the turn that handed off.
        new_items: Items of the handing-off turn (the handoff call and its output included).
        context: The run context.
    """

    input_history: list[dict[str, Any]]
    pre_handoff_items: list[Any]
    new_items: list[Any]
    context: Any = None

    def clone(self, **changes: Any) -> HandoffInputData:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)


InstructionsFunction: TypeAlias = Callable[
    [RunContextWrapper[Any], "Agent[Any]"], str | Awaitable[str]
]


@dataclass(eq=False)
class Agent(Generic[TContext]):
    """An agent: instructions, a model, tools, and agents it can hand off to.

    Attributes:
        name: The agent's name; runs are started by the name of their root agent.
        instructions: The system prompt, or a function `(ctx, agent) -> str` (sync or async)
            evaluated in the model activity on each call.
        tools: Function tools the model may call.
        handoffs: Agents (or `handoff(...)` objects) this agent may transfer the conversation to.
        model: A model name (`"gpt-4.1"`, `"openai-chat:llama3"`), or a `Model` object such as
            `OpenAIModel(...)` or `ScriptedModel(...)`.
        model_settings: Sampling settings for this agent.
        output_type: A type (pydantic model, dataclass, ...) the final output must validate as.
        handoff_description: What this agent is for, shown to agents that can hand off to it.
        input_guardrails: Checked (in an activity) before the run's first model call, when
            this agent starts the run.
        output_guardrails: Checked on the final output, when this agent produces it.
        mcp_servers: MCP servers whose tools the model may call too (`hitl.mcp`); their tools
            are listed when a run starts and the run keeps that list.
    """

    name: str
    instructions: str | InstructionsFunction | None = None
    tools: list[FunctionTool] = field(default_factory=list)
    handoffs: list[Agent[Any] | Handoff] = field(default_factory=list)
    model: str | Model | None = None
    model_settings: ModelSettings = field(default_factory=ModelSettings)
    output_type: type[Any] | None = None
    handoff_description: str | None = None
    input_guardrails: list[InputGuardrail] = field(default_factory=list)
    output_guardrails: list[OutputGuardrail] = field(default_factory=list)
    mcp_servers: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise UserError("an Agent needs a non-empty name")
        seen: set[str] = set()
        for tool in self.tools:
            if not isinstance(tool, FunctionTool):
                raise UserError(
                    f"agent {self.name!r}: tools must be FunctionTools (use @function_tool), "
                    f"got {type(tool).__name__}"
                )
            if tool.name in seen:
                raise UserError(f"agent {self.name!r} has two tools named {tool.name!r}")
            seen.add(tool.name)
        servers: set[str] = set()
        for server in self.mcp_servers:
            name = getattr(server, "name", None)
            if not callable(getattr(server, "list_tools", None)) or not isinstance(name, str):
                raise UserError(
                    f"agent {self.name!r}: mcp_servers must be MCP servers "
                    f"(hitl.mcp.MCPServerStdio, MCPServerStreamableHttp), got {server!r:.100}"
                )
            if name in servers:
                raise UserError(f"agent {self.name!r} has two MCP servers named {name!r}")
            servers.add(name)

    def as_tool(
        self,
        tool_name: str | None = None,
        tool_description: str | None = None,
        *,
        needs_approval: bool | ApprovalPredicate = False,
        approval_request: ApprovalRequestFunction | None = None,
        auto_approve: bool = False,
        approver: ApproverFunction | None = None,
        on_failure: Literal["error_message", "raise"] = "error_message",
        timeout: float | None = None,
    ) -> AgentTool:
        """This agent as a tool of another agent; each call runs it as a child workflow.

        The nested run has its own history (under its parent in the Temporal UI). Approvals its
        tools raise appear in the root run's interruptions and are decided there.

        Args:
            tool_name: Name the model calls it by (default: the agent's name, snake_case).
            tool_description: What it does, for the model (default: `handoff_description`).
            needs_approval: Approval to *start* the nested agent (as for function tools).
            approval_request: Renders the approval request for starting it.
            auto_approve: This tool's key of two-key auto-approval.
            approver: A programmatic approver for starting it.
            on_failure: A failed nested run becomes a tool error the model sees
                (`"error_message"`) or fails the calling run too (`"raise"`).
            timeout: Seconds the nested run may take in all, approval waits included
                (`None`, the default: no limit, since a person may answer days later; its model
                calls and tools keep their own timeouts). When it runs out, the nested run is
                stopped and the model sees a tool error (or, with `on_failure="raise"`, the
                calling run fails).
        """
        name = tool_name or re.sub(r"[^a-zA-Z0-9]+", "_", self.name).strip("_").lower()
        description = tool_description or self.handoff_description or f"Ask the {self.name} agent."
        base = function_tool(
            name_override=name,
            description_override=description,
            needs_approval=needs_approval,
            approval_request=approval_request,
            auto_approve=auto_approve,
            approver=approver,
            heartbeat_timeout=None,
            max_attempts=1,
        )(_agent_tool_input)
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
        return AgentTool(**fields, agent=self, on_failure=on_failure, run_timeout=timeout)

    def clone(self, **changes: Any) -> Agent[TContext]:
        """A copy of this agent with some fields changed."""
        data = {f: getattr(self, f) for f in self.__dataclass_fields__}
        data.update(changes)
        return Agent(**data)


def _agent_tool_input(input: str) -> str:
    """Run the agent.

    Args:
        input: The input to the agent.
    """
    raise RuntimeError("agent tools run as child workflows, never as a function")


@dataclass(eq=False)
class AgentTool(FunctionTool):
    """An agent used as a tool (`agent.as_tool()`): each call is a nested run (child workflow)."""

    agent: Agent[Any] | None = None
    on_failure: Literal["error_message", "raise"] = "error_message"
    run_timeout: float | None = None


@dataclass(eq=False)
class Handoff:
    """A handoff to another agent, with its tool name and description for the model.

    Attributes:
        agent: Where the conversation goes.
        tool_name: The tool the model calls to hand off.
        tool_description: What the model is told about it.
        input_filter: `(HandoffInputData) -> HandoffInputData`: edits what the next agent
            sees (runs in an activity; overrides the run's `handoff_input_filter`).
        nest_handoff_history: Collapse the transcript into one message for the next agent
            (overrides the run's setting).
    """

    agent: Agent[Any]
    tool_name: str
    tool_description: str
    input_filter: HandoffInputFilter | None = None
    nest_handoff_history: bool | None = None


def default_handoff_tool_name(agent: Agent[Any]) -> str:
    """`transfer_to_<snake_case_name>`, as the OpenAI Agents SDK names handoff tools."""
    slug = re.sub(r"[^a-zA-Z0-9]+", "_", agent.name).strip("_").lower()
    return f"transfer_to_{slug}"


def handoff(
    agent: Agent[Any],
    *,
    tool_name_override: str | None = None,
    tool_description_override: str | None = None,
    input_filter: HandoffInputFilter | None = None,
    nest_handoff_history: bool | None = None,
) -> Handoff:
    """Describe a handoff to `agent` (use directly in `Agent(handoffs=[...])` for defaults)."""
    description = f"Handoff to the {agent.name} agent to handle the request."
    if agent.handoff_description:
        description += f" {agent.handoff_description}"
    return Handoff(
        agent=agent,
        tool_name=tool_name_override or default_handoff_tool_name(agent),
        tool_description=tool_description_override or description,
        input_filter=input_filter,
        nest_handoff_history=nest_handoff_history,
    )


def _as_handoff(item: Agent[Any] | Handoff) -> Handoff:
    if isinstance(item, Handoff):
        return item
    if isinstance(item, Agent):
        return handoff(item)
    raise UserError(f"handoffs must be Agents or handoff(...) objects, got {type(item).__name__}")


def output_schema_for(output_type: type[Any] | None) -> dict[str, Any] | None:
    """The strict JSON schema a structured final output must follow (`None` for plain text)."""
    if output_type is None or output_type is str:
        return None
    schema = TypeAdapter(output_type).json_schema()
    if schema.get("type") != "object":
        schema = {
            "type": "object",
            "properties": {"response": schema},
            "required": ["response"],
        }
    return ensure_strict_json_schema(schema)


def output_is_wrapped(output_type: type[Any] | None) -> bool:
    """True when the output schema wraps a non-object type in `{"response": ...}`."""
    if output_type is None or output_type is str:
        return False
    return TypeAdapter(output_type).json_schema().get("type") != "object"


@dataclass
class CapturedGraph:
    """An agent graph as data plus the live objects behind each agent id."""

    graph: AgentGraph
    agents: dict[str, Agent[Any]]

    def agent(self, agent_id: str) -> Agent[Any]:
        """The live agent for an id of this graph."""
        try:
            return self.agents[agent_id]
        except KeyError:
            raise UserError(
                f"agent id {agent_id!r} is not part of the graph rooted at "
                f"{self.graph.agents[self.graph.root].name!r}"
            ) from None


def capture_graph(root: Agent[Any], *, default_model: str | None = None) -> CapturedGraph:
    """Walk the agent graph from `root` and record it as data.

    Every agent reachable by handoffs gets a stable id: its name, or `name~2`, `name~3` when
    different agent objects share a name (in discovery order, depth first, list order). The same
    code rebuilding the same graph therefore yields the same ids in any process.
    """
    if not isinstance(root, Agent):
        raise UserError(f"expected an Agent, got {type(root).__name__}")
    ids, order = _agent_ids(root)
    specs = {ids[id(agent)]: _agent_spec(agent, ids, default_model) for agent in order}
    canonical = json.dumps({k: v.model_dump(mode="json") for k, v in specs.items()}, sort_keys=True)
    graph = AgentGraph(
        root=ids[id(root)],
        agents=specs,
        fingerprint=hashlib.sha256(canonical.encode()).hexdigest()[:16],
    )
    return CapturedGraph(graph=graph, agents={ids[id(agent)]: agent for agent in order})


def _agent_ids(root: Agent[Any]) -> tuple[dict[int, str], list[Agent[Any]]]:
    """Every agent reachable from `root` (handoffs, agent tools) in discovery order; ids by object.

    An agent's id is its name, then `name~2`, `name~3` for other objects of the same name.
    """
    ids: dict[int, str] = {}
    name_counts: dict[str, int] = {}
    order: list[Agent[Any]] = []

    def visit(agent: Agent[Any]) -> None:
        if id(agent) in ids:
            return
        n = name_counts.get(agent.name, 0) + 1
        name_counts[agent.name] = n
        ids[id(agent)] = agent.name if n == 1 else f"{agent.name}~{n}"
        order.append(agent)
        for h in agent.handoffs:
            visit(_as_handoff(h).agent)
        for t in agent.tools:
            if isinstance(t, AgentTool) and t.agent is not None:
                visit(t.agent)

    visit(root)
    return ids, order


def _agent_spec(agent: Agent[Any], ids: dict[int, str], default_model: str | None) -> AgentSpec:
    """One agent as data, naming the agents it hands off to and runs as tools by their ids."""
    handoffs = [_as_handoff(h) for h in agent.handoffs]
    tool_names = {t.name for t in agent.tools}
    for h in handoffs:
        if h.tool_name in tool_names:
            raise UserError(
                f"agent {agent.name!r}: handoff tool {h.tool_name!r} clashes with a tool name"
            )
    instructions = agent.instructions
    return AgentSpec(
        id=ids[id(agent)],
        name=agent.name,
        instructions=instructions if isinstance(instructions, str) else None,
        dynamic_instructions=callable(instructions),
        handoff_description=agent.handoff_description,
        model=model_spec_for(agent.model, default_model),
        model_settings=agent.model_settings,
        tools=[_tool_spec(t, ids) for t in agent.tools],
        handoffs=[
            HandoffSpec(
                tool_name=h.tool_name,
                tool_description=h.tool_description,
                agent_id=ids[id(h.agent)],
                input_filter=h.input_filter is not None,
                nest_handoff_history=h.nest_handoff_history,
            )
            for h in handoffs
        ],
        output_schema=output_schema_for(agent.output_type),
        output_type_name=_type_name(agent.output_type),
        input_guardrails=[g.get_name() for g in agent.input_guardrails],
        output_guardrails=[g.get_name() for g in agent.output_guardrails],
    )


def _tool_spec(tool: FunctionTool, ids: dict[int, str]) -> ToolSpec:
    spec = tool.spec()
    if isinstance(tool, AgentTool) and tool.agent is not None:
        spec.kind = "agent"
        spec.agent_id = ids[id(tool.agent)]
        spec.on_failure = tool.on_failure
        spec.run_timeout_seconds = tool.run_timeout
    return spec


def _type_name(tp: type[Any] | None) -> str | None:
    if tp is None:
        return None
    return f"{getattr(tp, '__module__', '?')}.{getattr(tp, '__qualname__', repr(tp))}"
