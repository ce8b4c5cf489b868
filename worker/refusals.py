"""The worker's record of updates its runs refused.

An update a validator refuses leaves nothing in the run's history (that is what keeps hostile
updates from growing it), so the worker is where such an attempt can be kept. Runs log each one
(`refused approve update: NotAuthorized: ...`) with its fields attached; `log_refusals(path)`
appends them to a JSON-lines file that `hitl audit --worker-log FILE` merges into its rows.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

REFUSAL_KEY = "hitl_refusal"
"""The `extra` key under which runs attach a refusal's fields to their log line."""


class RefusalLog(logging.Handler):
    """Append every refused-update log record to a JSON-lines file."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(level=logging.WARNING)
        self.path = Path(path)
        self._lock_file = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record as one JSON line, when it is a refusal."""
        refusal: dict[str, Any] | None = getattr(record, REFUSAL_KEY, None)
        if not isinstance(refusal, dict):
            return
        where = getattr(record, "temporal_workflow", None) or {}
        row = {
            **refusal,
            "run": where.get("workflow_id"),
            "run_id": where.get("run_id"),
            "update_id": where.get("update_id"),
        }
        try:
            line = json.dumps(row, default=str, ensure_ascii=True)
            with self._lock_file, self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError:
            self.handleError(record)


def log_refusals(path: str | Path) -> RefusalLog:
    """Keep the worker's refused updates in the JSON-lines file `path` (appended)."""
    handler = RefusalLog(path)
    logging.getLogger("temporalio.workflow").addHandler(handler)
    return handler
