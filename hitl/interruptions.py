"""`ToolApprovalItem`: a tool call waiting for a decision (an *interruption*), as clients see it.

`result.interruptions` and `RunState.interruptions` list these; `items_from_pending` builds them
from a run's pending approvals, and `RunState` saves and loads them (`hitl.state`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hitl.agent import Agent, capture_graph
from hitl.wire import ApprovalRequestData, InputRequest, PendingApproval

__all__ = ["AgentRef", "ToolApprovalItem", "items_from_pending"]


@dataclass(frozen=True)
class AgentRef:
    """An agent named by a run when the live object is not at hand."""

    name: str
    id: str


@dataclass
class ToolApprovalItem:
    """A tool call waiting for approval (an *interruption*).

    Attributes:
        call_id: The model's call id; decisions name it.
        name: The tool's name.
        arguments: The call's arguments as a JSON string.
        agent: The agent whose tool it is (the live `Agent` when resolvable).
        agent_id: The agent's stable id in the run's graph.
        requested_at: When the run started waiting for this decision.
        workflow_id: The run's workflow id (the root run: decisions go there).
        request: The approval request (title, message, preview) rendered for this call.
        path: Agents and agent tools from the root agent down to the agent whose tool this is,
            e.g. `["Desk", "research", "Researcher"]` (empty when the run did not say).
        owner_workflow_id: The run that owns the call: a nested run's workflow id for calls
            inside agent tools, else the root run's (`None` when the run did not say).
        required_approvals: Distinct people who must approve the call (four eyes: 2).
        approved_by: Who has approved it so far, while more approvals are needed.
        kind: `approval`; `uncertain` (a person settles whether its effect happened, with
            `hitl resolve`); `input` (its tool asks `question`: answer with `RunState.answer`).
        question: For `input`: what the tool's server asks, and the form's schema.
        model_call_id: The id the model gave the call (`call_id` is the run's own).
    """

    call_id: str
    name: str
    arguments: str
    agent: Agent[Any] | AgentRef
    agent_id: str
    requested_at: datetime | None = None
    workflow_id: str = ""
    request: ApprovalRequestData | None = None
    path: list[str] = field(default_factory=list)
    owner_workflow_id: str | None = None
    required_approvals: int = 1
    approved_by: list[str] = field(default_factory=list)
    kind: str = "approval"
    question: InputRequest | None = None
    model_call_id: str | None = None
    _raw_item: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def tool_name(self) -> str:
        """Alias of `name`."""
        return self.name

    @property
    def type(self) -> str:
        """The SDK's item type name (`tool_approval_item`)."""
        return "tool_approval_item"

    @property
    def raw_item(self) -> dict[str, Any]:
        """The call item as the model produced it.

        A `function_call`; for a `ShellTool` / `ApplyPatchTool`, its `shell_call` (with
        `action.commands`) / `apply_patch_call` (with the `operation`).
        """
        if self._raw_item is not None:
            return self._raw_item
        call_id = self.model_call_id or self.call_id
        if isinstance(self.agent, Agent):
            tool = next((t for t in self.agent.tools if t.name == self.name), None)
            call_item = getattr(tool, "call_item", None)
            if callable(call_item):
                item: dict[str, Any] = call_item(call_id, self.arguments)
                return item
        return {
            "type": "function_call",
            "call_id": self.model_call_id or self.call_id,
            "name": self.name,
            "arguments": self.arguments,
        }

    def to_json(self) -> dict[str, Any]:
        """JSON form (used inside a serialized `RunState`)."""
        return {
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
            "agent_name": self.agent.name,
            "agent_id": self.agent_id,
            "requested_at": self.requested_at.isoformat() if self.requested_at else None,
            "request": self.request.model_dump(mode="json") if self.request else None,
            "path": list(self.path),
            "owner_workflow_id": self.owner_workflow_id,
            "required_approvals": self.required_approvals,
            "approved_by": list(self.approved_by),
            "kind": self.kind,
            "question": self.question.model_dump(mode="json") if self.question else None,
            "model_call_id": self.model_call_id,
        }

    @classmethod
    def from_json(
        cls, data: dict[str, Any], agents: dict[str, Agent[Any]], workflow_id: str
    ) -> ToolApprovalItem:
        """Read `to_json()` back; the agent is the live one of `agents` when it is there.

        Raises `KeyError`, `TypeError` or `ValueError` for a malformed item.
        """
        return cls(
            call_id=data["call_id"],
            name=data["name"],
            arguments=data["arguments"],
            agent=agents.get(data["agent_id"]) or AgentRef(data["agent_name"], data["agent_id"]),
            agent_id=data["agent_id"],
            requested_at=(
                datetime.fromisoformat(data["requested_at"]) if data.get("requested_at") else None
            ),
            workflow_id=workflow_id,
            request=(
                ApprovalRequestData.model_validate(data["request"]) if data.get("request") else None
            ),
            path=[str(a) for a in data.get("path") or []],
            owner_workflow_id=data.get("owner_workflow_id"),
            required_approvals=int(data.get("required_approvals") or 1),
            approved_by=[str(a) for a in data.get("approved_by") or []],
            kind=str(data.get("kind") or "approval"),
            question=(
                InputRequest.model_validate(data["question"]) if data.get("question") else None
            ),
            model_call_id=data.get("model_call_id"),
        )


def items_from_pending(
    pending: list[PendingApproval], root: Agent[Any], workflow_id: str
) -> list[ToolApprovalItem]:
    """Interruptions for a run's pending approvals, resolving agents in `root`'s graph."""
    agents = capture_graph(root).agents
    return [
        ToolApprovalItem(
            call_id=p.call_id,
            name=p.tool_name,
            arguments=p.arguments,
            agent=agents.get(p.agent_id) or AgentRef(p.agent_name, p.agent_id),
            agent_id=p.agent_id,
            requested_at=p.requested_at,
            workflow_id=workflow_id,
            request=p.request,
            path=list(p.path),
            owner_workflow_id=p.workflow_id or workflow_id,
            required_approvals=p.required_approvals,
            approved_by=[a.approver for a in p.approvals],
            kind=p.kind,
            question=p.input_request,
            model_call_id=p.model_call_id,
        )
        for p in pending
    ]
