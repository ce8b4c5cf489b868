"""The payload converter: pydantic JSON, with fields left at their defaults omitted.

Every payload Temporal stores (workflow inputs, activity inputs and results, local-activity
markers, update arguments) is written without the fields that hold their default value, and
read back with those defaults. A run's start input with the whole `RunConfigSpec` at its
defaults is `{"agent": ..., "input": ...}`, not a kilobyte of nulls; the agent graph pinned
at run start keeps only what differs from a default tool or agent.

This is why a wire field's default must never change (`hitl/wire.py`): a stored payload that
omitted the field would be read with the new default. `tests/unit/test_wire_defaults.py`
guards them.

What operators read as JSON from the `temporal` CLI or the UI stays complete: the `status`
and `snapshot` queries, decision results and the run's result (models whose class sets
`_sparse = False`).

Inside a workflow, a payload decoded without a type hint (the arguments of handlers that take
`*args`) is handed over as the raw payload (`RawValue`): our handlers check the number of
arguments, the encoding, the size and the schema themselves (`workflows.inputs`), so nothing a
caller sends can make decoding fail the workflow task or be dropped without a trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import temporalio.api.common.v1
from pydantic import BaseModel
from pydantic_core import SchemaSerializer, core_schema
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)

from hitl.codec import UNDECRYPTABLE

_SERIALIZER = SchemaSerializer(core_schema.any_schema())


class SparseJSONPayloadConverter(PydanticJSONPlainPayloadConverter):
    """Pydantic JSON (`json/plain`) that omits model fields equal to their defaults."""

    def to_payload(self, value: Any) -> temporalio.api.common.v1.Payload | None:
        """Serialize `value`; sparse unless it is a model that asks to stay complete."""
        if isinstance(value, BaseModel) and getattr(value, "_sparse", False):
            data = _SERIALIZER.to_json(value, exclude_defaults=True)
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
            if p.metadata.get("encoding") == UNDECRYPTABLE:
                reason = p.metadata.get("reason", b"").decode("utf-8", "replace")
                raise RuntimeError(
                    f"a payload could not be decrypted ({reason}): check HITL_ENCRYPTION_KEY"
                )
        return super().from_payloads(payloads, type_hints)


hitl_data_converter = DataConverter(payload_converter_class=HitlPayloadConverter)
"""`temporalio.contrib.pydantic.pydantic_data_converter`, with sparse payloads."""
