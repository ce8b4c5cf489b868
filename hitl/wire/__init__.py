"""Wire contracts: every payload that crosses Temporal (workflow, activities, updates, queries).

These models are stored in workflow histories, so they are contracts across deployments:
fields are only ever *added*, always with a default, names never change, and neither do
defaults (payloads are stored without the fields at their defaults, see `hitl.converter`;
`tests/unit/test_wire_defaults.py` keeps them). Each workflow, activity, update and query takes
exactly one of these models and returns one.

The module is imported by workflow code (passed through the sandbox), so it must stay free of
I/O and of anything non-deterministic.
"""

from __future__ import annotations

from pydantic import BaseModel

from hitl.wire.activities import *  # noqa: F403
from hitl.wire.base import WireModel
from hitl.wire.graph import *  # noqa: F403
from hitl.wire.messages import *  # noqa: F403
from hitl.wire.names import *  # noqa: F403
from hitl.wire.runs import *  # noqa: F403

# Models refer to each other across these modules: resolve every reference in one namespace.
_NAMESPACE = {k: v for k, v in globals().items() if not k.startswith("__")}
for _m in list(_NAMESPACE.values()):
    if isinstance(_m, type) and issubclass(_m, BaseModel) and _m is not BaseModel:
        _m.model_rebuild(_types_namespace=_NAMESPACE)

__all__ = [
    "WireModel",
    *sorted(k for k in _NAMESPACE if not k.startswith("_") and k != "BaseModel"),
]
