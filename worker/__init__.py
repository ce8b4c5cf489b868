"""Workers: `python -m hitl.worker --agents module:attr` and the embedded dev-server bootstrap.

`hitl.worker.build` (the worker, with every workflow and activity) loads when one of its names
is first used, so `hitl.worker.devserver` alone (`hitl dev`) does not load the worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hitl.worker.build import (
        DEFAULT_MAX_CACHED_WORKFLOWS,
        WorkerOptions,
        build_worker,
        check_cluster,
    )

__all__ = ["DEFAULT_MAX_CACHED_WORKFLOWS", "WorkerOptions", "build_worker", "check_cluster"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from hitl.worker import build

        return getattr(build, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
