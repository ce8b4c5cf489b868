"""The payload converter: pydantic JSON, with fields left at their defaults omitted.

Every payload Temporal stores (workflow inputs, activity inputs and results, local-activity
markers, update arguments) is written without the fields that hold their default value, and
read back with those defaults. A run's start input with the whole `RunConfigSpec` at its
defaults is `{"agent": ..., "input": ...}`, not a kilobyte of nulls; the agent graph pinned
at run start keeps only what differs from a default tool or agent.

This is why a wire field's default must never change (`hitl/wire.py`): a stored payload that
omitted the field would be read with the new default. `tests/unit/test_wire_defaults.py`
guards them.

What operators read as JSON from the `temporal` CLI or the UI by asking stays complete: the
`status` and `snapshot` queries (models whose class sets `_sparse = False`). What is stored
with every run (decision answers, the run's result, the inbox memo) is sparse too: a field left
out reads as its default, which every reader of ours applies.

Sparse payloads also leave out the fields a model declares `derived` (`hitl.wire.base`) when
they hold what a reader derives: a call's `agent_name` when it is its `agent_id`, a model
call's `agent_id` when it is the root agent. The model reads a payload without them from their
sources, so every reader gets the same objects; a present value is read as it is.

Inside a workflow, a payload decoded without a type hint (the arguments of handlers that take
`*args`) is handed over as the raw payload (`RawValue`): our handlers check the number of
arguments, the encoding, the size and the schema themselves (`workflows.inputs`), so nothing a
caller sends can make decoding fail the workflow task or be dropped without a trace.

The same holds one step earlier: Temporal's external storage swaps a reference payload for the
stored one before any handler runs, and the SDK raises there (no store configured, an unknown
driver, a malformed reference), which would fail every workflow task of the run for good.
`HitlDataConverter` turns each such payload into an `UNRETRIEVABLE` stand-in instead, which
handlers refuse and typed reads report as `StoredPayloadMissing` (see `hitl.storage`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import temporalio.api.common.v1
import temporalio.api.failure.v1
from pydantic import BaseModel
from pydantic_core import SchemaSerializer, core_schema
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    PayloadConverter,
)
from temporalio.exceptions import ApplicationError

from hitl.errors import StoredPayloadMissing
from hitl.markers import UNDECRYPTABLE, UNRETRIEVABLE
from hitl.storage import unretrievable
from hitl.wire import REFUSAL_MARK, WireModel
from hitl.wire.base import derived_exclusions

_SERIALIZER = SchemaSerializer(core_schema.any_schema())


class SparseJSONPayloadConverter(PydanticJSONPlainPayloadConverter):
    """Pydantic JSON (`json/plain`) that omits fields equal to their defaults or derived.

    (Derived: a wire model's `derived` field holding what a reader would derive from its
    sources, see `hitl.wire.base.derived`.)
    """

    def to_payload(self, value: Any) -> temporalio.api.common.v1.Payload | None:
        """Serialize `value`; sparse unless it is a model that asks to stay complete."""
        if isinstance(value, BaseModel) and getattr(value, "_sparse", False):
            exclude = derived_exclusions(value) if isinstance(value, WireModel) else None
            data = _SERIALIZER.to_json(value, exclude_defaults=True, exclude=exclude)
            return temporalio.api.common.v1.Payload(
                metadata={"encoding": self.encoding.encode()}, data=data
            )
        return super().to_payload(value)


class HitlPayloadConverter(CompositePayloadConverter):
    """Temporal's default converters, with `SparseJSONPayloadConverter` for JSON."""

    def __init__(self) -> None:
        super().__init__(
            *(
                SparseJSONPayloadConverter() if isinstance(c, JSONPlainPayloadConverter) else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )

    def from_payloads(
        self,
        payloads: Sequence[temporalio.api.common.v1.Payload],
        type_hints: list[type] | None = None,
    ) -> list[Any]:
        """Decode payloads; in a workflow, untyped ones stay raw (their handler validates them)."""
        if type_hints is None and (workflow.unsafe.in_sandbox() or workflow.in_workflow()):
            # (`in_workflow()` alone is false while the SDK applies signals and the start
            # input, outside the workflow's event loop; the sandbox flag is set for all of it.)
            return [RawValue(p) for p in payloads]
        for p in payloads:
            if p.metadata.get("encoding") == UNRETRIEVABLE:
                reason = p.metadata.get("reason", b"").decode("utf-8", "replace")
                raise StoredPayloadMissing(f"{reason}: check HITL_STORAGE")
            if p.metadata.get("encoding") == UNDECRYPTABLE:
                reason = p.metadata.get("reason", b"").decode("utf-8", "replace")
                raise RuntimeError(
                    f"a payload could not be decrypted ({reason}): check HITL_ENCRYPTION_KEY"
                )
        return super().from_payloads(payloads, type_hints)


_REFERENCE_TYPE = b"temporal.api.sdk.v1.ExternalStorageReference"
_REFERENCE_MARKER = "__temporal_external_storage_reference"


def is_storage_reference(p: temporalio.api.common.v1.Payload) -> bool:
    """Whether Temporal's external storage would try to fetch `p` (as the SDK 1.35 decides)."""
    encoding = p.metadata.get("encoding")
    return (
        encoding == b"json/external-storage-reference"
        or (encoding == b"json/protobuf" and p.metadata.get("messageType") == _REFERENCE_TYPE)
        or p.metadata.get(_REFERENCE_MARKER) == b"true"
    )


@dataclasses.dataclass(frozen=True)
class HitlDataConverter(DataConverter):
    """A `DataConverter` whose external-storage reads never raise (see the module docstring).

    It overrides the SDK's (private) reference-decoding steps, pinned to temporalio 1.35;
    `tests/hostile` sends forged references to every handler, so an SDK upgrade that moves
    them fails there first.
    """

    async def _decode_reference_payload_sequence(
        self, payloads: Sequence[temporalio.api.common.v1.Payload]
    ) -> list[temporalio.api.common.v1.Payload]:
        out = list(payloads)
        for i, p in enumerate(out):
            if p.metadata.get(_REFERENCE_MARKER) != b"true":
                continue
            try:
                [out[i]] = await super()._decode_reference_payload_sequence([p])
            except Exception as exc:
                out[i] = unretrievable(f"unreadable storage reference: {_one_line(exc)}")
        return out

    async def _external_retrieve_payload_sequence(
        self, payloads: Sequence[temporalio.api.common.v1.Payload]
    ) -> list[temporalio.api.common.v1.Payload]:
        out = list(payloads)
        for i, p in enumerate(out):
            if not is_storage_reference(p):
                continue
            if self.external_storage is None:
                out[i] = unretrievable(
                    "a stored payload, but no store is configured (HITL_STORAGE)"
                )
                continue
            try:
                out[i] = await self.external_storage._retrieve_payload(p)
            except Exception as exc:
                out[i] = unretrievable(f"stored payload unreadable: {_one_line(exc)}")
        return out

    async def _transform_inbound_payload(
        self, payload: temporalio.api.common.v1.Payload
    ) -> temporalio.api.common.v1.Payload:
        [payload] = await self._decode_reference_payload_sequence([payload])
        [payload] = await self._external_retrieve_payload_sequence([payload])
        if self.payload_codec:
            [payload] = await self.payload_codec.decode([payload])
        return payload

    async def _transform_inbound_payloads(
        self, payloads: temporalio.api.common.v1.Payloads
    ) -> None:
        done = await self._decode_reference_payload_sequence(payloads.payloads)
        done = await self._external_retrieve_payload_sequence(done)
        if self.payload_codec:
            done = await self.payload_codec.decode(done)
        for i, p in enumerate(done):
            payloads.payloads[i].CopyFrom(p)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]


class HitlFailureConverter(DefaultFailureConverter):
    """Failures as Temporal's default converter writes them, but for our handlers' refusals.

    A refusal (an update validator saying no) reads as one line with its type, `UnknownCall:
    no pending call 'zzz'`, without a stack trace: the Temporal UI shows it as it is, and the
    `temporal` CLI prints it. Refusals carry only ids, names and field paths, never argument
    values, so they stay plain even when payloads and other failures are encrypted. Our
    clients read them back without the prefix (`err.type` holds it).
    """

    encode = False

    def __init__(self) -> None:
        super().__init__(encode_common_attributes=self.encode)

    def to_failure(
        self,
        exception: BaseException,
        payload_converter: PayloadConverter,
        failure: temporalio.api.failure.v1.Failure,
    ) -> None:
        """Write a refusal as one plain line; anything else as the default converter does."""
        if isinstance(exception, ApplicationError) and getattr(exception, REFUSAL_MARK, False):
            failure.message = f"{exception.type}: {exception.message}"
            failure.application_failure_info.type = exception.type or "Refused"
            failure.application_failure_info.non_retryable = exception.non_retryable
            return
        super().to_failure(exception, payload_converter, failure)

    def from_failure(
        self, failure: temporalio.api.failure.v1.Failure, payload_converter: PayloadConverter
    ) -> BaseException:
        """Read a failure; a refusal's message without its `Type: ` prefix."""
        kind = failure.application_failure_info.type
        if kind and failure.message.startswith(f"{kind}: ") and not failure.stack_trace:
            copy = temporalio.api.failure.v1.Failure()
            copy.CopyFrom(failure)
            copy.message = failure.message[len(kind) + 2 :]
            failure = copy
        return super().from_failure(failure, payload_converter)


class HitlEncodedFailureConverter(HitlFailureConverter):
    """`HitlFailureConverter`, encrypting other failures' messages and stack traces.

    (They may quote tool arguments.)
    """

    encode = True


hitl_data_converter = HitlDataConverter(
    payload_converter_class=HitlPayloadConverter, failure_converter_class=HitlFailureConverter
)
"""`temporalio.contrib.pydantic.pydantic_data_converter`, with sparse payloads and plain
refusals."""
