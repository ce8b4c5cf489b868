"""Wire contracts: every payload that crosses Temporal (workflow, activities, updates, queries).

These models are stored in workflow histories, so they are contracts across deployments:
fields are only ever *added*, always with a default, names never change, and neither do
defaults (payloads are stored without the fields at their defaults, see `hitl.converter`;
`tests/unit/test_wire_defaults.py` keeps them). A required field may become `derived` from
another (`hitl.wire.base`): payloads then leave it out where it holds what a reader derives.
Each workflow, activity, update and query takes exactly one of these models and returns one.

The module is imported by workflow code (passed through the sandbox), so it must stay free of
I/O and of anything non-deterministic.
"""

from __future__ import annotations

from pydantic import BaseModel

from hitl.wire import activities as _activities
from hitl.wire import base as _base
from hitl.wire import decisions as _decisions
from hitl.wire import graph as _graph
from hitl.wire import ledger as _ledger
from hitl.wire import messages as _messages
from hitl.wire import names as _names
from hitl.wire import policy as _policy
from hitl.wire import resolution as _resolution
from hitl.wire import runs as _runs
from hitl.wire.activities import *  # noqa: F403
from hitl.wire.base import *  # noqa: F403
from hitl.wire.decisions import *  # noqa: F403
from hitl.wire.graph import *  # noqa: F403
from hitl.wire.ledger import *  # noqa: F403
from hitl.wire.messages import *  # noqa: F403
from hitl.wire.names import *  # noqa: F403
from hitl.wire.policy import *  # noqa: F403
from hitl.wire.resolution import *  # noqa: F403
from hitl.wire.runs import *  # noqa: F403

_MODULES = (
    _activities,
    _base,
    _decisions,
    _graph,
    _ledger,
    _messages,
    _names,
    _policy,
    _resolution,
    _runs,
)
__all__ = sorted(name for module in _MODULES for name in module.__all__)
"""The contracts: models, names, literal types and id functions (nothing they import)."""

# Models refer to each other across these modules: resolve every reference in one namespace.
_NAMESPACE = {name: globals()[name] for name in __all__}
for _m in _NAMESPACE.values():
    if isinstance(_m, type) and issubclass(_m, BaseModel):
        _m.model_rebuild(_types_namespace=_NAMESPACE)
for _m in _NAMESPACE.values():
    if isinstance(_m, type) and issubclass(_m, _base.WireModel):
        _m.check_derived()
