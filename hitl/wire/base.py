"""The base of every wire model."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict

__all__ = [
    "WireModel",
]


class WireModel(BaseModel):
    """A payload model, stored in histories: fields are only added, defaults never change.

    Unknown fields are ignored (an older worker reads a newer payload), and payloads are stored
    without the fields at their defaults (`hitl.converter`).
    """

    model_config = ConfigDict(extra="ignore")
    _sparse: ClassVar[bool] = True
