"""The OpenAI Agents SDK's stream events, made from a run's `RunEvent`s.

`RunResultStreaming.stream_events()` yields these, so SDK streaming code runs unchanged:

    async for event in result.stream_events():
        if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent):
            print(event.data.delta, end="")
        elif event.type == "agent_updated_stream_event":
            print(event.new_agent.name)
        elif event.type == "run_item_stream_event" and event.item.type == "tool_call_item":
            print("tool called")

What the run publishes maps one way: `model_text_delta` -> `RawResponsesStreamEvent` (a
`ResponseTextDeltaEvent`; text deltas are the raw events a durable run streams), `message`,
`reasoning`, `tool_called` and `tool_finished` -> `RunItemStreamEvent`s with the SDK's names
(`message_output_created`, `reasoning_item_created`, `tool_called` / `handoff_requested`,
`tool_output` / `handoff_occured`), `approval_requested` -> `tool_approval_requested` (its
item a `ToolApprovalItem`, as in the SDK; decide it from `result.interruptions` once the stream
ends), the first agent and every `handoff` -> `AgentUpdatedStreamEvent`. The rest (decisions,
pauses, deadlines) has no SDK event: `RunResultStreaming.run_events()` yields every `RunEvent`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from hitl.agent import Agent, capture_graph
from hitl.items import message_text
from hitl.state import AgentRef, ToolApprovalItem
from hitl.wire import RunEvent

RunItemEventName = Literal[
    "message_output_created",
    "handoff_requested",
    "handoff_occured",
    "tool_called",
    "tool_output",
    "reasoning_item_created",
    "tool_approval_requested",
]


@dataclass
class MessageOutputItem:
    """A message from the model (the SDK's `MessageOutputItem`).

    Attributes:
        agent: The agent whose model wrote it.
        raw_item: The Responses output message.
    """

    agent: Agent[Any] | AgentRef
    raw_item: dict[str, Any]
    type: Literal["message_output_item"] = "message_output_item"


@dataclass
class ReasoningItem:
    """A reasoning item from the model (the SDK's `ReasoningItem`)."""

    agent: Agent[Any] | AgentRef
    raw_item: dict[str, Any]
    type: Literal["reasoning_item"] = "reasoning_item"


@dataclass
class ToolCallItem:
    """A tool call from the model (the SDK's `ToolCallItem`).

    Attributes:
        agent: The agent whose tool it is.
        raw_item: The Responses `function_call` (its `call_id` is the model's).
        call_id: The run's id of the call (decisions and `hitl` commands name it).
    """

    agent: Agent[Any] | AgentRef
    raw_item: dict[str, Any]
    call_id: str | None = None
    type: Literal["tool_call_item"] = "tool_call_item"


@dataclass
class ToolCallOutputItem:
    """A tool's output (the SDK's `ToolCallOutputItem`), also a rejected call's message.

    Attributes:
        agent: The agent whose tool it is.
        raw_item: The Responses `function_call_output`.
        output: What the tool returned, as the model sees it.
        call_id: The run's id of the call.
    """

    agent: Agent[Any] | AgentRef
    raw_item: dict[str, Any]
    output: Any = None
    call_id: str | None = None
    type: Literal["tool_call_output_item"] = "tool_call_output_item"


@dataclass
class HandoffCallItem:
    """A handoff requested by the model (the SDK's `HandoffCallItem`)."""

    agent: Agent[Any] | AgentRef
    raw_item: dict[str, Any]
    call_id: str | None = None
    type: Literal["handoff_call_item"] = "handoff_call_item"


@dataclass
class HandoffOutputItem:
    """The output of a handoff's call (the SDK's `HandoffOutputItem`)."""

    agent: Agent[Any] | AgentRef
    raw_item: dict[str, Any]
    call_id: str | None = None
    type: Literal["handoff_output_item"] = "handoff_output_item"


StreamItem: TypeAlias = (
    MessageOutputItem
    | ReasoningItem
    | ToolCallItem
    | ToolCallOutputItem
    | HandoffCallItem
    | HandoffOutputItem
    | ToolApprovalItem
)


@dataclass
class RawResponsesStreamEvent:
    """A raw event from the model: a `ResponseTextDeltaEvent` per text delta."""

    data: Any
    type: Literal["raw_response_event"] = "raw_response_event"


@dataclass
class RunItemStreamEvent:
    """An item the run produced (`name` is the SDK's, `item` an SDK-shaped item)."""

    name: RunItemEventName
    item: StreamItem
    type: Literal["run_item_stream_event"] = "run_item_stream_event"


@dataclass
class AgentUpdatedStreamEvent:
    """The run's current agent: the first one, then each handoff's target."""

    new_agent: Agent[Any] | AgentRef
    type: Literal["agent_updated_stream_event"] = "agent_updated_stream_event"


StreamEvent: TypeAlias = RawResponsesStreamEvent | RunItemStreamEvent | AgentUpdatedStreamEvent
"""A streaming event of a run (the SDK's union)."""


class ItemHelpers:
    """Helpers over items (the SDK's `ItemHelpers`)."""

    @classmethod
    def text_message_output(cls, message: Any) -> str:
        """The text of a message item (a stream event's item or one of `result.new_items`)."""
        raw = getattr(message, "raw_item", message)
        return message_text(raw) if isinstance(raw, dict) else ""

    @classmethod
    def text_message_outputs(cls, items: Iterable[Any]) -> str:
        """The text of every message item among `items`, concatenated."""
        return "".join(
            cls.text_message_output(i)
            for i in items
            if getattr(i, "type", None) == "message_output_item"
        )


@dataclass
class SdkEvents:
    """Turns one run's `RunEvent`s into the SDK's stream events, in order."""

    root: Agent[Any]
    announced: str | None = None
    """The agent last announced with an `AgentUpdatedStreamEvent`."""
    _deltas: int = field(default=0, repr=False)
    _by_name: dict[str, Agent[Any]] | None = field(default=None, repr=False)

    def agent(self, name: str) -> Agent[Any] | AgentRef:
        """The live agent of the run's graph named `name` (or a reference to it)."""
        if self._by_name is None:
            agents = capture_graph(self.root).agents.values()
            self._by_name = {}
            for a in agents:
                self._by_name.setdefault(a.name, a)
        return self._by_name.get(name) or AgentRef(name, "")

    def agent_updated(self, name: str | None) -> list[StreamEvent]:
        """An `AgentUpdatedStreamEvent` when `name` is not the agent announced last."""
        if not name or name == self.announced:
            return []
        self.announced = name
        return [AgentUpdatedStreamEvent(new_agent=self.agent(name))]

    def translate(self, event: RunEvent) -> list[StreamEvent]:
        """The SDK events for `event` (none for the events the SDK has no class for)."""
        # The first event names the agent the run is at (the starting one, or where a resumed
        # run waited); each handoff names the next.
        out = [] if self.announced else self.agent_updated(event.agent)
        if event.type == "model_text_delta":
            out.append(RawResponsesStreamEvent(data=self._delta(event)))
        elif event.type == "handoff":
            out += self.agent_updated(str(event.data.get("to") or "") or event.agent)
        elif (item := self._item(event)) is not None:
            out.append(item)
        return out

    def _delta(self, event: RunEvent) -> Any:
        from openai.types.responses import ResponseTextDeltaEvent

        self._deltas += 1
        return ResponseTextDeltaEvent(
            type="response.output_text.delta",
            delta=event.text or "",
            item_id="",
            output_index=0,
            content_index=0,
            sequence_number=self._deltas,
            logprobs=[],
        )

    def _item(self, event: RunEvent) -> RunItemStreamEvent | None:
        data, agent = event.data, self.agent(event.agent or "")
        kind, raw = data.get("item_type"), data.get("raw_item")
        if event.type == "message":
            raw = raw if isinstance(raw, dict) else _message(event.text or "")
            return RunItemStreamEvent("message_output_created", MessageOutputItem(agent, raw))
        if event.type == "reasoning":
            raw = raw if isinstance(raw, dict) else {"type": "reasoning", "summary": []}
            return RunItemStreamEvent("reasoning_item_created", ReasoningItem(agent, raw))
        model_id = data.get("model_call_id") or event.call_id
        if event.type == "approval_requested":
            return RunItemStreamEvent("tool_approval_requested", self._approval(event, agent))
        if event.type == "tool_called":
            if not isinstance(raw, dict):  # too large to ride on the event: its preview
                raw = {
                    "type": "function_call",
                    "call_id": model_id,
                    "name": event.tool,
                    "arguments": data.get("arguments", ""),
                }
            if kind == "handoff_call_item":
                return RunItemStreamEvent(
                    "handoff_requested", HandoffCallItem(agent, raw, event.call_id)
                )
            return RunItemStreamEvent("tool_called", ToolCallItem(agent, raw, event.call_id))
        if event.type == "tool_finished":
            if not isinstance(raw, dict):
                raw = {"type": "function_call_output", "call_id": model_id, "output": event.text}
            if kind == "handoff_output_item":
                return RunItemStreamEvent(
                    "handoff_occured", HandoffOutputItem(agent, raw, event.call_id)
                )
            output = ToolCallOutputItem(agent, raw, raw.get("output"), event.call_id)
            return RunItemStreamEvent("tool_output", output)
        return None

    def _approval(self, event: RunEvent, agent: Agent[Any] | AgentRef) -> ToolApprovalItem:
        """The call waiting for a person, as the SDK's `ToolApprovalItem`."""
        data = event.data
        model_id = data.get("model_call_id")
        arguments = data.get("arguments")
        return ToolApprovalItem(
            call_id=event.call_id or "",
            name=event.tool or "",
            arguments=arguments if isinstance(arguments, str) else "",
            agent=agent,
            agent_id=str(data.get("agent_id") or ""),
            model_call_id=model_id if isinstance(model_id, str) else None,
        )


def _message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
