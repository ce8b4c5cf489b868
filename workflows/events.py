"""A run's event stream: `RunEvent`s on the topic `events` of its workflow stream.

Events add no history events (the stream lives in the run's state and is rebuilt on replay)
and are carried across continue-as-new, so a subscriber resuming from an offset loses nothing.
The stream's publish signal and poll update are the run's own: they are wrapped here so a
caller can neither jam the run with them (any arity, any payload, bounded waits) nor put
events in the run's mouth (only text deltas of a model call in progress are taken from
outside).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.contrib.workflow_streams._stream import _POLL, _PUBLISH_SIGNAL
from temporalio.contrib.workflow_streams._types import PollInput, PublishInput

with workflow.unsafe.imports_passed_through():
    from hitl.limits import MAX_SIGNAL_BYTES
    from hitl.wire import EVENTS_TOPIC, RunEvent
    from workflows.inputs import Waiters, read_one, refusal

MAX_DELTA_ENTRIES = 200
"""Entries in one publish batch from outside (the model activity batches every 150 ms)."""
MAX_DELTA_CHARS = 4000
MAX_PUBLISHERS = 256
"""Distinct publishers a run remembers (for de-duplication); more are refused."""

_POLL_INPUT = TypeAdapter(PollInput)
_PUBLISH_INPUT = TypeAdapter(PublishInput)
_EVENT = TypeAdapter(RunEvent)


class Events:
    """Publish `RunEvent`s; guard the stream's handlers against hostile callers."""

    def __init__(self, stream: WorkflowStream, waiters: Waiters) -> None:
        self.stream = stream
        self.topic = stream.topic(EVENTS_TOPIC, type=RunEvent)
        self.announced: set[str] = set()
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

    def emit(self, event: RunEvent) -> None:
        """Publish one event (no history event)."""
        self.topic.publish(event)

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
