"""Workers: `python -m hitl.worker --agents module:attr` and the embedded dev-server bootstrap."""

from hitl.worker.build import (
    DEFAULT_MAX_CACHED_WORKFLOWS,
    WorkerOptions,
    build_worker,
    check_cluster,
)

__all__ = ["DEFAULT_MAX_CACHED_WORKFLOWS", "WorkerOptions", "build_worker", "check_cluster"]
