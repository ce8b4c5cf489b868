"""Helpers of the CLI tests: the `hitl` console script, its worker, and waiting on
`hitl pending`."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers import WorkerProcess, desk_approvers, hitl_cli, wait_for

hitl = hitl_cli
"""Run the `hitl` console script (`tests.helpers.hitl_cli`)."""


def start_worker(address: str, tq: str, tmp: Path) -> WorkerProcess:
    worker = WorkerProcess(
        address,
        tq,
        agents="hitl.examples.refund_desk:agent",
        extra_args=["--agents", "hitl.examples.file_editor:agent", "--agents", "tests.agents"],
        env={
            "HITL_WORKSPACE": str(tmp / "workspace"),
            "HITL_BACKOFFICE_DB": str(tmp / "backoffice.sqlite"),
            "HITL_TEST_LEDGER": str(tmp / "ledger.db"),
            **desk_approvers(tmp),  # the refund desk's: finance, signed decisions
        },
    )
    return worker.start()


def start(address: str, tq: str, agent: str, text: str, wid: str) -> None:
    out = hitl(address, "--task-queue", tq, "run", agent, text, "--id", wid, "--wait")
    assert out.returncode == 0, out.stderr
    assert "awaiting_approval" in out.stdout


async def pending_json(
    address: str, *args: str, until: Callable[[list[dict[str, Any]]], bool], what: str
) -> list[dict[str, Any]]:
    """`hitl pending ARGS --json`, asked again until its rows satisfy `until` (visibility is
    eventually consistent); the rows."""
    rows: list[dict[str, Any]] = []

    def listed() -> bool:
        nonlocal rows
        out = hitl(address, "pending", *args, "--json")
        rows = json.loads(out.stdout) if out.returncode == 0 else []
        return until(rows)

    await wait_for(listed, what=what)
    return rows


def timed(address: str, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """`hitl ARGS` and how long it took (seconds)."""
    began = time.monotonic()
    out = hitl(address, *args)
    return out, time.monotonic() - began
