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
"""

from __future__ import annotations

from typing import Any

import temporalio.api.common.v1
from pydantic import BaseModel
from pydantic_core import SchemaSerializer, core_schema
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)

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


hitl_data_converter = DataConverter(payload_converter_class=HitlPayloadConverter)
"""`temporalio.contrib.pydantic.pydantic_data_converter`, with sparse payloads."""
