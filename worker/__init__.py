"""Workers: `python -m worker --agents module:attr` and the embedded dev-server bootstrap."""

from worker.build import DEFAULT_MAX_CACHED_WORKFLOWS, WorkerOptions, build_worker, detect_features

__all__ = ["DEFAULT_MAX_CACHED_WORKFLOWS", "WorkerOptions", "build_worker", "detect_features"]
