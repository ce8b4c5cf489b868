"""Shared by both drivers (our venv and the peer's): a JSON-lines command loop and /proc probes.

Standard library only, so the peer's virtualenv can import it without `hitl`.

A driver is a long-lived subprocess. The orchestrator (`bench.run`) writes one JSON request per
line to its stdin (`{"op": "latency", "args": {...}}`) and reads one JSON reply per line
(`{"ok": true, "result": ...}`). The protocol uses a private copy of the original stdout, and fd 1
is pointed at stderr, so nothing a library prints can corrupt it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")

Handler = Callable[..., Awaitable[Any]]


# ----------------------------------------------------------------------------- /proc probes


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # The command name may contain spaces: fields start after the closing parenthesis.
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / CLK_TCK


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def snapshot(pids: dict[str, int]) -> dict[str, dict[str, float]]:
    """CPU seconds and RSS of each named process, plus a wall-clock stamp."""
    out: dict[str, dict[str, float]] = {}
    for name, pid in pids.items():
        try:
            out[name] = {"cpu": cpu_seconds(pid), "rss": float(rss_bytes(pid))}
        except OSError:
            out[name] = {"cpu": math.nan, "rss": math.nan}
    out["_"] = {"wall": time.monotonic()}
    return out


# ----------------------------------------------------------------------------- statistics


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation; NaN for no values."""
    data = sorted(values)
    if not data:
        return math.nan
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def summarize(values_ms: Sequence[float]) -> dict[str, float]:
    """p50/p95/mean/min/max of a list of milliseconds."""
    return {
        "n": len(values_ms),
        "p50": percentile(values_ms, 50),
        "p95": percentile(values_ms, 95),
        "mean": sum(values_ms) / len(values_ms) if values_ms else math.nan,
        "min": min(values_ms) if values_ms else math.nan,
        "max": max(values_ms) if values_ms else math.nan,
    }


def history_sizes(events: Sequence[Any]) -> dict[str, Any]:
    """Events, protobuf bytes and event-type counts of a list of `HistoryEvent`s."""
    from google.protobuf.json_format import MessageToJson
    from temporalio.api.enums.v1 import EventType

    counts: dict[str, int] = {}
    sizes: dict[str, int] = {}
    total = 0
    json_bytes = 0
    for e in events:
        total += e.ByteSize()
        json_bytes += len(MessageToJson(e, indent=None).encode())
        name = EventType.Name(e.event_type).removeprefix("EVENT_TYPE_")
        if name == "MARKER_RECORDED":  # local activities: name them by activity type
            data = e.marker_recorded_event_attributes.details.get("data")
            if data is not None and data.payloads:
                with contextlib.suppress(ValueError):
                    name += ":" + json.loads(data.payloads[0].data).get("activity_type", "")
        if name == "ACTIVITY_TASK_SCHEDULED":
            name += ":" + e.activity_task_scheduled_event_attributes.activity_type.name
        counts[name] = counts.get(name, 0) + 1
        sizes[name] = sizes.get(name, 0) + e.ByteSize()
    return {
        "events": len(events),
        "bytes": total,
        "json_bytes": json_bytes,
        "workflow_tasks": counts.get("WORKFLOW_TASK_COMPLETED", 0),
        "by_type": counts,
        "bytes_by_type": dict(sorted(sizes.items(), key=lambda kv: -kv[1])),
    }


def cumulative_bytes_at(
    events: Sequence[Any], is_boundary: Callable[[Any], bool], checkpoints: Sequence[int]
) -> dict[str, dict[str, int]]:
    """History bytes and events up to the k-th boundary event, for each k in `checkpoints`."""
    out: dict[str, dict[str, int]] = {}
    seen = 0
    total = 0
    wanted = set(checkpoints)
    for i, e in enumerate(events):
        total += e.ByteSize()
        if is_boundary(e):
            seen += 1
            if seen in wanted:
                out[str(seen)] = {"events": i + 1, "bytes": total}
    return out


# ----------------------------------------------------------------------------- command loop


async def long_runs(
    long_run: Callable[..., Awaitable[Any]],
    runs: list[dict[str, str]],
    turns: int,
    checkpoints: list[int],
) -> list[Any]:
    """A driver's `long_run` of each {key, queue} at once (both sides' `long_runs` operation)."""
    return list(
        await asyncio.gather(*(long_run(r["key"], turns, r["queue"], checkpoints) for r in runs))
    )


def _claim_stdout() -> Any:
    fd = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(fd, "w", buffering=1)


async def serve(handlers: dict[str, Handler], ready: dict[str, Any] | None = None) -> None:
    """Answer JSON-lines requests on stdin until `{"op": "exit"}` or end of input."""
    out = _claim_stdout()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out.write(
        json.dumps({"ok": True, "result": {"ready": True, "pid": os.getpid(), **(ready or {})}})
        + "\n"
    )
    while True:
        line = await reader.readline()
        if not line:
            return
        request = json.loads(line)
        op = request.get("op")
        if op == "exit":
            out.write(json.dumps({"ok": True, "result": None}) + "\n")
            return
        try:
            result = await handlers[op](**request.get("args", {}))
            reply = {"ok": True, "result": result}
        except Exception as exc:  # reported to the orchestrator, which decides
            reply = {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
        out.write(json.dumps(reply, default=str) + "\n")


async def bounded_gather(n: int, limit: int, make: Callable[[int], Awaitable[Any]]) -> list[Any]:
    """Run `make(i)` for i in range(n) with at most `limit` in flight; results in order."""
    sem = asyncio.Semaphore(limit)

    async def one(i: int) -> Any:
        async with sem:
            return await make(i)

    return list(await asyncio.gather(*(one(i) for i in range(n))))


CHUNK_BYTES = 5 * 1024


def chunk_text(index: int) -> str:
    """5 KB of deterministic, incompressible text: the long run's tool output (both sides)."""
    import hashlib

    parts: list[str] = []
    seed = f"chunk-{index}".encode()
    while sum(len(p) for p in parts) < CHUNK_BYTES:
        seed = hashlib.sha256(seed).digest()
        parts.append(seed.hex())
    return "".join(parts)[:CHUNK_BYTES]


async def gather_until(
    n: int, make: Callable[[int], Awaitable[Any]], timeout_s: float | None
) -> tuple[list[Any], int]:
    """Run `make(i)` for i in range(n) at once; results (or exceptions) of those done within
    `timeout_s`, and how many were still running (cancelled and awaited, never left behind)."""
    tasks = [asyncio.ensure_future(make(i)) for i in range(n)]
    done, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    results = [t.exception() or t.result() for t in tasks if t in done]
    return results, len(pending)


async def burst(
    n: int, one_run: Callable[[], Awaitable[Any]], timeout_s: float | None
) -> dict[str, Any]:
    """Start `n` runs at once (`one_run()` each); wall time, per-run milliseconds and errors."""

    async def e2e(_: int) -> float:
        t0 = now_ms()
        await one_run()
        return now_ms() - t0

    t0 = now_ms()
    results, unfinished = await gather_until(n, e2e, timeout_s)
    wall = (now_ms() - t0) / 1000.0
    errors = [r for r in results if not isinstance(r, float)]
    kinds: dict[str, int] = {}
    for r in errors:
        kinds[type(r).__name__] = kinds.get(type(r).__name__, 0) + 1
    return {
        "wall_s": wall,
        "e2e_ms": [r for r in results if isinstance(r, float)],
        "errors": [f"{type(r).__name__}: {r}" for r in errors[:3]],
        "n_errors": len(errors),
        "error_kinds": kinds,
        "unfinished": unfinished,
    }


async def list_and_query(
    client: Any,
    query: str,
    expected: int,
    count_pending: Callable[[str], Awaitable[int]],
    pids: dict[str, int] | None,
    checkpoints: list[int] | None,
    query_limit: int | None,
) -> dict[str, Any]:
    """List the runs `query` matches (once visibility has `expected`), then ask a sample of them
    for their pending calls, 16 at a time, with /proc snapshots at `checkpoints`."""
    for _ in range(100):  # visibility is eventually consistent: wait until it has them all
        if (await client.count_workflows(query)).count >= expected:
            break
        await asyncio.sleep(0.1)
    t0 = now_ms()
    ids = [w.id async for w in client.list_workflows(query)]
    t1 = now_ms()
    # A sample spread evenly over the list (newest first): cached and evicted runs alike.
    step = max(1, len(ids) // query_limit) if query_limit else 1
    sample = ids[::step][:query_limit]
    sem = asyncio.Semaphore(16)
    done = 0
    samples: list[dict[str, Any]] = []
    wanted = sorted(checkpoints or [])

    async def one(wid: str) -> int:
        nonlocal done
        async with sem:
            n = await count_pending(wid)
        done += 1
        while pids and wanted and done >= wanted[0]:
            samples.append({"queried": wanted.pop(0), "procs": snapshot(pids)})
        return n

    counts = await asyncio.gather(*(one(w) for w in sample))
    t2 = now_ms()
    return {
        "runs_listed": len(ids),
        "queried": len(counts),
        "pending_calls": sum(counts),
        "list_ms": t1 - t0,
        "list_and_query_ms": t2 - t0,
        "query_ms_per_run": (t2 - t1) / max(len(sample), 1),
        "samples": samples,
    }


async def history_of(client: Any, workflow_id: str) -> dict[str, Any]:
    """Events and bytes of a run's history, with the server's own count and size."""
    handle = client.get_workflow_handle(workflow_id)
    hist = await handle.fetch_history()
    info = (await handle.describe()).raw_description.workflow_execution_info
    return {
        **history_sizes(hist.events),
        "server_history_length": info.history_length,
        "server_history_size_bytes": info.history_size_bytes,
        "steps": steps(hist.events),
    }


def steps(events: Sequence[Any]) -> list[dict[str, Any]]:
    """Where a run's time went, by the server's event times: each workflow task (started ->
    completed: the worker's turn) and activity (scheduled -> completed), with the wait before
    it (the previous step's end -> this one's start: dispatch, or a person deciding)."""
    from temporalio.api.enums.v1 import EventType as T

    def ms(e: Any) -> float:
        return float(e.event_time.ToMicroseconds()) / 1000.0

    out: list[dict[str, Any]] = []
    open_: dict[int, tuple[str, float]] = {}
    last_end = ms(events[0]) if events else 0.0
    for e in events:
        t = e.event_type
        if t == T.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            open_[e.event_id] = ("workflow task", ms(e))
        elif t == T.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = e.activity_task_scheduled_event_attributes.activity_type.name
            open_[e.event_id] = (name, ms(e))
        elif t == T.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            key = e.workflow_task_completed_event_attributes.started_event_id
        elif t == T.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            key = e.activity_task_completed_event_attributes.scheduled_event_id
        else:
            continue
        if t in (T.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, T.EVENT_TYPE_ACTIVITY_TASK_COMPLETED):
            name, began = open_.pop(key, ("?", ms(e)))
            out.append(
                {
                    "step": name,
                    "wait_ms": round(max(began - last_end, 0.0), 2),
                    "ms": round(ms(e) - began, 2),
                }
            )
            last_end = ms(e)
    return out


def now_ms() -> float:
    """A monotonic clock in milliseconds."""
    return time.perf_counter() * 1000.0
