"""A run's event stream: `RunEvent`s on the topic `events` of its workflow stream.

Events add no history events (the stream lives in the run's state and is rebuilt on replay)
and are carried across continue-as-new, so a subscriber resuming from an offset loses nothing.
The stream's publish signal and poll update are the run's own: they are wrapped here so a
caller can neither jam the run with them (any arity, any payload, bounded waits) nor put
events in the run's mouth (only text deltas of a model call in progress are taken from
outside).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.contrib.workflow_streams._stream import _POLL, _PUBLISH_SIGNAL
from temporalio.contrib.workflow_streams._types import PollInput, PublishInput

with workflow.unsafe.imports_passed_through():
    from hitl.items import HOSTED_MCP_ITEMS, message_text
    from hitl.limits import MAX_SIGNAL_BYTES
    from hitl.wire import EVENTS_TOPIC, AgentSpec, CarriedState, Phase, RunEvent, RunItem
    from hitl.workflows.book import SEP
    from hitl.workflows.inputs import Waiters, read_one, refusal
    from hitl.workflows.metrics import DecisionMetrics

if TYPE_CHECKING:
    from hitl.workflows.book import ApprovalBook
    from hitl.workflows.tracing import RunTracer

MAX_DELTA_ENTRIES = 200
"""Entries in one publish batch from outside (the model activity batches every 150 ms)."""
MAX_DELTA_CHARS = 4000
MAX_PUBLISHERS = 256
"""Distinct publishers a run remembers (for de-duplication); more are refused."""
MAX_EVENT_ITEM_BYTES = 4096
"""A transcript item rides on its event (`data["raw_item"]`, for the SDK's stream events) up
to this size; a larger one is left to the previews (subscribers' poll answers are history)."""

_POLL_INPUT = TypeAdapter(PollInput)
_PUBLISH_INPUT = TypeAdapter(PublishInput)
_EVENT = TypeAdapter(RunEvent)


def preview(text: str, limit: int = 2000) -> str:
    """`text`, cut to `limit` characters with a note of how much more there was."""
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more]"


class Emitter(Protocol):
    """What the event stream reads of a run."""

    state: CarriedState
    book: ApprovalBook
    trace: RunTracer

    def agent_name(self) -> str | None:
        """The current agent's name."""
        ...

    def phase(self) -> Phase:
        """Where the run is."""
        ...

    def finished(self) -> bool:
        """The run completed or failed."""
        ...


class Events:
    """Publish `RunEvent`s; guard the stream's handlers against hostile callers."""

    def __init__(self, run: Emitter, stream: WorkflowStream, waiters: Waiters) -> None:
        self.run = run
        self.stream = stream
        self.topic = stream.topic(EVENTS_TOPIC, type=RunEvent)
        self.announced: set[str] = {f"decided:{d.call_id}" for d in run.state.decisions} | {
            c.call_id for c in run.state.calls
        }
        """Calls whose request or decision subscribers were told of (carried runs: all)."""
        self.metrics = DecisionMetrics()
        """Counted as they are told, in the run that owns the call (not a nested call's root)."""
        self.paused = False
        self.streaming = 0
        """Model calls in flight that stream text deltas (deltas are accepted only then)."""
        self._waiters = waiters
        original_poll = stream._on_poll
        original_validate = stream._validate_poll
        original_publish = stream._on_publish

        async def poll(*args: Any) -> Any:
            payload = _poll_input(args)
            self._waiters.enter()
            try:
                return await original_poll(payload)
            finally:
                self._waiters.leave()

        def validate_poll(*args: Any) -> None:
            payload = _poll_input(args)
            self._waiters.check()
            original_validate(payload)

        def publish(*args: Any) -> None:
            batch = self._accepted_deltas(args)
            if batch is not None:
                original_publish(batch)

        workflow.set_update_handler(_POLL, poll, validator=validate_poll)
        workflow.set_signal_handler(_PUBLISH_SIGNAL, publish)

    def emit(self, kind: Any, **fields: Any) -> None:
        """Publish one event (no history event; rebuilt on replay)."""
        run = self.run
        self.topic.publish(
            RunEvent(type=kind, turn=run.state.turn, agent=run.agent_name(), **fields)
        )

    def add_others(self, others: list[dict[str, Any]], agent: AgentSpec) -> None:
        """Keep the model's other items the transcript holds.

        Reasoning, and what a hosted MCP server listed and ran (the provider ran it; the run
        executes nothing).
        """
        for other in others:
            kind = other.get("type")
            if kind == "reasoning":
                self.add_item("reasoning_item", other, agent)
            elif isinstance(kind, str) and kind in HOSTED_MCP_ITEMS:
                self.add_item(HOSTED_MCP_ITEMS[kind], other, agent)

    def add_item(
        self, kind: Any, raw: dict[str, Any], agent: AgentSpec, call_id: str | None = None
    ) -> None:
        """Add an item to the run's transcript, and tell subscribers.

        `call_id`: the run's id of the call the item belongs to (the item names the model's).
        """
        self.run.state.new_items.append(
            RunItem(
                type=kind, agent_id=agent.id, agent_name=agent.name, raw_item=raw, call_id=call_id
            )
        )
        # The item's kind and (when small) the item itself let a client yield the SDK's
        # `RunItemStreamEvent`s (`hitl.sdk_events`); older clients ignore the extra data.
        item: dict[str, Any] = {"item_type": kind}
        if len(json.dumps(raw, default=str)) <= MAX_EVENT_ITEM_BYTES:
            item["raw_item"] = raw
        if kind == "message_output_item":
            self.emit("message", text=message_text(raw), data=item)
        elif kind == "reasoning_item":
            self.emit("reasoning", data=item)
        elif kind in ("tool_call_item", "handoff_call_item"):
            self.emit(
                "tool_called",
                call_id=call_id or raw.get("call_id"),
                tool=raw.get("name"),
                data={
                    "arguments": preview(str(raw.get("arguments", ""))),
                    "model_call_id": raw.get("call_id"),
                    **item,
                },
            )
        elif kind in ("tool_call_output_item", "handoff_output_item"):
            self.emit(
                "tool_finished",
                call_id=call_id or raw.get("call_id"),
                text=preview(str(raw.get("output", ""))),
                data={"model_call_id": raw.get("call_id"), **item},
            )

    def note_pause(self) -> None:
        """Emit `paused` / `resumed` when the run starts or stops waiting for people only."""
        run = self.run
        paused = run.phase() == "awaiting_approval"
        if paused and not self.paused:
            self.emit("paused", data={"pending": [p.call_id for p in run.book.pending()]})
        elif self.paused and not paused and not run.finished():
            self.emit("resumed")
        self.paused = paused

    def announce_request(
        self, call_id: str, tool: str, request: Any, call: Any | None = None
    ) -> None:
        """An `approval_requested` event, once per call.

        `call` (a `CallRecord` or `PendingApproval`): its agent, arguments (a preview) and the
        model's call id ride along, for the SDK's `tool_approval_requested` stream event.
        """
        if call_id in self.announced:
            return
        self.announced.add(call_id)
        if SEP not in call_id:
            self.metrics.requested(tool)
        data: dict[str, Any] = {"message": request.message} if request is not None else {}
        if call is not None:
            data["arguments"] = preview(call.arguments)
            data["agent_id"] = call.agent_id
            data["model_call_id"] = getattr(call, "model_call_id", None) or None
        self.emit(
            "approval_requested",
            call_id=call_id,
            tool=tool,
            text=request.title if request is not None else None,
            data=data,
        )

    def announce_decisions(self) -> None:
        """An `approval_decided` event (and trace event) for each decision not yet told."""
        run = self.run
        for rec in run.book.all_decisions():
            key = f"decided:{rec.call_id}"
            if key in self.announced:
                continue
            self.announced.add(key)
            if SEP not in rec.call_id:
                call = run.book.calls.get(rec.call_id)
                self.metrics.decided(rec, call, run.state.directory)
            self.emit(
                "approval_decided",
                call_id=rec.call_id,
                tool=rec.tool_name,
                text=rec.kind,
                data={"source": rec.source, "approver": rec.approver, "message": rec.message},
            )
            run.trace.event(
                "hitl.approval_decision",
                **{
                    "hitl.agent": run.book.owner(rec.call_id),
                    "hitl.call_id": rec.call_id,
                    "hitl.tool": rec.tool_name,
                    "hitl.decision": rec.kind,
                    "hitl.decision.source": rec.source,
                    "hitl.decision.approver": rec.approver,
                },
            )

    def _accepted_deltas(self, args: tuple[Any, ...]) -> PublishInput | None:
        """The publish batch, if it is what our model activity sends: text deltas only."""
        try:
            raw = read_one(
                args,
                _PublishModel,
                what="a stream publish",
                example="(internal)",
                max_bytes=MAX_SIGNAL_BYTES * 4,
                error_type="InvalidMessage",
            )
            batch = _PUBLISH_INPUT.validate_python(raw.model_dump())
        except Exception as exc:
            workflow.logger.warning("refused a stream publish: %s", exc)
            return None
        if self.streaming <= 0 or not batch.publisher_id:
            return None
        if len(batch.items) > MAX_DELTA_ENTRIES or (
            batch.publisher_id not in self.stream._publishers
            and len(self.stream._publishers) >= MAX_PUBLISHERS
        ):
            return None
        for entry in batch.items:
            if entry.topic != EVENTS_TOPIC or not _is_delta(entry.data):
                return None
        return batch


class _PublishModel(BaseModel):
    """The publish signal's payload shape, for `read_one` (the SDK's dataclass, as a model)."""

    model_config = ConfigDict(extra="ignore")
    items: list[dict[str, Any]] = Field(default_factory=list)
    publisher_id: str = ""
    sequence: int = 0


class _PollModel(BaseModel):
    """The poll update's payload shape."""

    model_config = ConfigDict(extra="ignore")
    topics: list[str] = Field(default_factory=list)
    from_offset: int = 0


def _poll_input(args: tuple[Any, ...]) -> PollInput:
    raw = read_one(
        args,
        _PollModel,
        what="a stream poll",
        example='{"topics": ["events"], "from_offset": 0}',
        max_bytes=MAX_SIGNAL_BYTES,
        error_type="InvalidMessage",
    )
    try:
        return _POLL_INPUT.validate_python(raw.model_dump())
    except ValidationError as exc:
        raise refusal("InvalidMessage", f"invalid stream poll: {exc.errors()[0]['msg']}") from None


def _is_delta(data: str) -> bool:
    """Whether a published entry (base64 of a serialized payload) is a short text delta."""
    import base64

    from temporalio.api.common.v1 import Payload

    try:
        payload = Payload.FromString(base64.b64decode(data, validate=True))
        event = _EVENT.validate_json(payload.data)
    except Exception:
        return False
    return event.type == "model_text_delta" and len(event.text or "") <= MAX_DELTA_CHARS
