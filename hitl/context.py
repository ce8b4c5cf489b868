"""Run context objects handed to user code (tools, predicates, instructions).

User code runs in activities, so these are rebuilt in the activity from data the workflow
recorded; they carry the durable facts of the run (workflow id, call id, idempotency key) next
to the user's own context object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from hitl.wire import DecisionRecord, InputAnswer, Usage

TContext = TypeVar("TContext")


@dataclass
class RunContextWrapper(Generic[TContext]):
    """The run's context as user code sees it.

    Attributes:
        context: The object passed as `context=` to `Runner.run` (rebuilt from its JSON form;
            it is persisted data, so never put secrets in it).
        usage: Model usage of the run so far, when known.
        workflow_id: Id of the `AgentRun` workflow (the run's durable identity).
        agent_name: Name of the agent the code runs for.
    """

    context: TContext
    usage: Usage = field(default_factory=Usage)
    workflow_id: str = ""
    agent_name: str = ""


@dataclass
class ToolContext(RunContextWrapper[TContext]):
    """Context of one tool call.

    Attributes:
        tool_name: The tool's name.
        tool_call_id: The model's call id.
        tool_arguments: The raw JSON arguments.
        idempotency_key: `workflow_id:call_id`; the same on every retry of this call. Pass it to
            the systems you call so an approved call has at most one effect.
        attempt: Activity attempt number (1 on the first try).
        decision: The approval decision for this call, when it needed one.
    """

    tool_name: str = ""
    tool_call_id: str = ""
    tool_arguments: str = ""
    idempotency_key: str = ""
    attempt: int = 1
    decision: DecisionRecord | None = None
    answers: list[InputAnswer] = field(default_factory=list)

    @property
    def call_id(self) -> str:
        """Alias of `tool_call_id`."""
        return self.tool_call_id


def is_context_annotation(annotation: Any) -> bool:
    """True when a parameter annotation asks for a `RunContextWrapper` / `ToolContext`."""
    origin = getattr(annotation, "__origin__", None) or annotation
    return isinstance(origin, type) and issubclass(origin, RunContextWrapper)
