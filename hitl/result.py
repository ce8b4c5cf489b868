"""`RunResult`: what `Runner.run` returns when a run finishes or pauses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import TypeAdapter

from hitl.agent import Agent, capture_graph
from hitl.state import AgentRef, RunState, ToolApprovalItem
from hitl.wire import DEFAULT_TASK_QUEUE, DecisionRecord, RunItem, RunStatus, Usage

T = TypeVar("T")


@dataclass
class RunResult:
    """The outcome of `Runner.run`: a final output, or interruptions to decide.

    Attributes:
        final_output: The last agent's final output (an `output_type` instance when the agent
            declares one), or `None` while the run is paused.
        interruptions: Tool calls waiting for approval; empty when the run finished.
        new_items: Items the run produced (messages, tool calls and outputs, handoffs).
        input: The run's original input items.
        last_agent: The agent that produced the latest output.
        workflow_id: The run's workflow id (its durable identity).
        run_id: The current Temporal run id.
        usage: Model usage so far.
        decisions: Every decision recorded so far (who, what, when, how).
        status: The raw status the run reported.
    """

    final_output: Any
    interruptions: list[ToolApprovalItem]
    new_items: list[RunItem]
    input: list[dict[str, Any]]
    last_agent: Agent[Any] | AgentRef
    workflow_id: str
    run_id: str
    usage: Usage
    decisions: list[DecisionRecord]
    status: RunStatus
    root_agent: Agent[Any] = field(repr=False)
    task_queue: str = DEFAULT_TASK_QUEUE
    context: Any = field(default=None, repr=False)
    """The run context this client gave the run (at start, or when resuming it with a new
    one); the run's own copy has what tools changed in it."""
    context_serializer: Callable[[Any], Any] | None = field(default=None, repr=False)
    last_response_id: str | None = None
    """The id of the run's latest model response (OpenAI Responses API; `None` for other
    models): pass it as the next run's `previous_response_id` to continue the conversation."""
    session_history: int | None = field(default=None, repr=False)
    """A run started with a client-managed session (`SQLiteSession`, any `Session`): how many
    leading items of `input` came from it. What follows them is the run's turn, written back
    to the session once the run completes."""

    @property
    def is_paused(self) -> bool:
        """True while the run waits for decisions."""
        return bool(self.interruptions)

    def to_input_list(self) -> list[dict[str, Any]]:
        """The transcript as OpenAI Responses input items (input plus everything produced)."""
        return [*self.input, *(i.raw_item for i in self.new_items)]

    def to_state(self) -> RunState:
        """A `RunState` to decide the interruptions on and resume with `Runner.run`."""
        return RunState(
            workflow_id=self.workflow_id,
            run_id=self.run_id,
            task_queue=self.task_queue,
            root_agent=self.root_agent,
            interruptions=list(self.interruptions),
            context=self.context,
            context_serializer=self.context_serializer,
            session_history=self.session_history,
            _transcript=(list(self.input), list(self.new_items)),
        )

    def final_output_as(self, cls: type[T]) -> T:
        """The final output validated as `cls`."""
        return TypeAdapter(cls).validate_python(self.final_output)


def typed_final_output(agent: Agent[Any] | AgentRef, value: Any) -> Any:
    """Rebuild a structured final output as the agent's `output_type`."""
    if not isinstance(agent, Agent) or agent.output_type in (None, str) or value is None:
        return value
    return TypeAdapter(agent.output_type).validate_python(value)


def resolve_agent(root: Agent[Any], agent_id: str, name: str) -> Agent[Any] | AgentRef:
    """The live agent for an id of `root`'s graph (or a reference when the graph changed)."""
    return capture_graph(root).agents.get(agent_id) or AgentRef(name, agent_id)
