"""`hitl insights --since 7d`: decision figures of a window, read from visibility and runs.

It lists our runs (`AgentRun` on the task queues our workers serve) that were open at some
point of the window: running now, or closed within it (not those that continued as new: their
successor carries their decisions). At most `--limit` runs are read, newest first, and the
output says how many were listed, read and left unread. A completed run's decisions come from
its result (its close event: no worker needed); any other run's from its `status` query, and a
paused run's waiting calls from its inbox memo when the query is not answered. The figures are
`hitl.insights`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError

from hitl.cli.common import EXIT_OK, Refused, _code, _Pollers, _query, parse_span
from hitl.cli.inbox import allowed_queues, inbox_memo, memo_confirmed, queue_clause
from hitl.insights import Figures, PendingCall, aggregate, bound, percentile
from hitl.wire import QUERY_STATUS, WORKFLOW_TYPE, DecisionRecord, RunOutput, RunStatus

DEFAULT_LIMIT = 500
READ_AT_ONCE = 8
"""Runs asked at once (queries and results)."""


@dataclass
class Reading:
    """What was read of a window's runs."""

    decisions: list[DecisionRecord] = field(default_factory=list)
    pending: list[PendingCall] = field(default_factory=list)
    verdicts: dict[int, Any] = field(default_factory=dict)
    """A decision's (`id(record)`) policy verdict, from runs whose status has verdicts."""
    undecided: list[Any] = field(default_factory=list)
    """Policy verdicts of calls that got no decision record (denied, or let through)."""
    listed: int = 0
    matched: int | None = None
    """How many runs the window has, when the listing stopped at the limit (else `listed`)."""
    read: int = 0
    unread: list[str] = field(default_factory=list)


def window_query(since: datetime, queues: Sequence[str]) -> str:
    """The visibility query for our runs open at some point since `since`."""
    clauses = [
        f"WorkflowType = '{WORKFLOW_TYPE}'",
        f"(ExecutionStatus = 'Running' OR CloseTime >= '{since.isoformat()}')",
        "ExecutionStatus != 'ContinuedAsNew'",
    ]
    within = queue_clause(queues)
    if within:
        clauses.append(within)
    return " AND ".join(clauses)


async def read_window(
    client: Client,
    since: datetime,
    *,
    limit: int,
    queues: Sequence[str],
    timeout: float,
) -> Reading:
    """The decisions and waiting calls of at most `limit` runs open at some point since `since`."""
    reading = Reading()
    try:
        found = [
            w
            async for w in client.list_workflows(
                window_query(since, queues), limit=limit, rpc_timeout=timedelta(seconds=timeout)
            )
        ]
    except RPCError as exc:
        raise Refused(f"cannot list runs: {exc.message} ({_code(exc)})") from None
    if len(found) >= limit:
        try:
            counted = await client.count_workflows(window_query(since, queues))
            reading.matched = counted.count
        except RPCError:
            pass  # the count is a courtesy: the runs read are what the figures say
    found = [w for w in found if w.workflow_type == WORKFLOW_TYPE and w.task_queue in queues]
    reading.listed = len(found)
    pollers = _Pollers(client)
    semaphore = asyncio.Semaphore(READ_AT_ONCE)

    async def one(w: WorkflowExecution) -> tuple[RunStatus | None, list[PendingCall], str]:
        async with semaphore:
            return await _read_run(client, w, pollers, timeout)

    for status, waiting, why in await asyncio.gather(*(one(w) for w in found)):
        if status is None and not waiting:
            reading.unread.append(why)
            continue
        reading.read += 1
        if status is not None:
            reading.decisions += status.decisions
            _join_verdicts(reading, status)
            waiting = waiting or [
                PendingCall(p.tool_name, p.waiting_since, p.kind) for p in status.pending
            ]
        reading.pending += waiting
    return reading


def _join_verdicts(reading: Reading, status: RunStatus) -> None:
    """Pair a run's policy verdicts (policy runs' `status.verdicts`) with its decisions."""
    by_call = {getattr(v, "call_id", ""): v for v in getattr(status, "verdicts", None) or []}
    for rec in status.decisions:
        verdict = by_call.pop(rec.call_id, None)
        if verdict is not None:
            reading.verdicts[id(rec)] = verdict
    reading.undecided += by_call.values()


async def _read_run(
    client: Client, w: WorkflowExecution, pollers: _Pollers, timeout: float
) -> tuple[RunStatus | None, list[PendingCall], str]:
    """A run's status (decisions and waiting calls), or its memo's waiting calls, or why not."""
    handle = client.get_workflow_handle(w.id, run_id=w.run_id, result_type=RunOutput)
    if w.status == WorkflowExecutionStatus.COMPLETED:
        try:
            out: RunOutput = await handle.result(follow_runs=False)
        except Exception as exc:  # a result this version cannot read: counted as unread
            return None, [], f"result unreadable: {type(exc).__name__}"
        return RunStatus(workflow_id=w.id, run_id=w.run_id, phase="completed", agent="",
                         decisions=out.decisions), [], ""  # fmt: skip
    try:
        status: RunStatus = await _query(
            client, handle, QUERY_STATUS, RunStatus, timeout, pollers, w.task_queue
        )
        return status, [], ""
    except Refused as exc:
        why = str(exc).split(":", 1)[-1].strip()[:200]
    if w.status == WorkflowExecutionStatus.RUNNING:
        memo = await inbox_memo(w)
        if memo is not None and await memo_confirmed(client, w, memo):
            return None, [PendingCall(e.tool_name, e.requested_at, e.kind) for e in memo.calls], ""
    return None, [], why


def figures_of(reading: Reading, since: datetime, until: datetime, limit: int) -> Figures:
    """The figures of a reading."""
    fig = aggregate(
        reading.decisions,
        reading.pending,
        since,
        until,
        verdicts=reading.verdicts,
        undecided=reading.undecided,
    )
    fig.runs_listed, fig.runs_read, fig.limit = reading.listed, reading.read, limit
    fig.runs_matched = reading.matched if reading.matched is not None else reading.listed
    fig.unread = reading.unread
    return fig


def as_json(fig: Figures) -> dict[str, Any]:
    """The figures as `--json` prints them (and the console's page reads them)."""

    def timing(samples: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
        # At most `MAX_LABELS` names, the most frequent; the rest together as `other`.
        names = bound(Counter({name: len(v) for name, v in samples.items()}))
        merged: dict[str, list[float]] = {}
        for name, v in samples.items():
            merged.setdefault(names[name], []).extend(v)
        return {
            name: {
                "count": len(v),
                "p50_seconds": percentile(v, 0.5),
                "p95_seconds": percentile(v, 0.95),
            }
            for name, v in sorted(merged.items())
        }

    pending: dict[str, dict[str, Any]] = {}
    for (tool, kind), n in sorted(fig.pending.items()):
        row = pending.setdefault(tool, {"count": 0, "oldest_seconds": 0.0, "kinds": {}})
        row["count"] += n
        row["kinds"][kind] = n
        row["oldest_seconds"] = max(row["oldest_seconds"], fig.oldest[(tool, kind)])
    by_tool: dict[str, dict[str, int]] = {}
    for (tool, outcome), n in sorted(fig.decisions.items()):
        by_tool.setdefault(tool, {})[outcome] = n
    return {
        "since": fig.since.isoformat(timespec="seconds"),
        "until": fig.until.isoformat(timespec="seconds"),
        "runs": {
            "listed": fig.runs_listed,
            "in_window": fig.runs_matched,
            "read": fig.runs_read,
            "unread": len(fig.unread),
            "limit": fig.limit,
        },
        "totals": fig.totals(),
        "sources": dict(sorted(fig.sources.items())),
        "decisions_by_tool": by_tool,
        "time_to_decision": {
            "by_tool": timing(fig.by_tool),
            "by_approver": timing(fig.by_approver),
        },
        "pending": {
            "count": sum(fig.pending.values()),
            "oldest_seconds": max(fig.oldest.values(), default=0.0),
            "by_tool": pending,
        },
        "rule_hits": [
            {"rule": r, "effect": e, "count": n} for (r, e), n in sorted(fig.rule_hits.items())
        ],
        "shadow_disagreements": dict(sorted(fig.shadow_disagreements.items())),
        "policy_fields": fig.policy_fields,
    }


def span_text(seconds: float) -> str:
    """Seconds as a short span: `0.4s`, `45s`, `12m 5s`, `3h 2m`, `2d 4h` (`-` for none)."""
    if math.isnan(seconds):
        return "-"
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = round(seconds)
    for unit, size, sub, subsize in (("d", 86400, "h", 3600), ("h", 3600, "m", 60),
                                     ("m", 60, "s", 1)):  # fmt: skip
        if s >= size:
            rest = (s % size) // subsize
            return f"{s // size}{unit}" + (f" {rest}{sub}" if rest else "")
    return f"{s}s"


def _timing_lines(title: str, data: dict[str, dict[str, Any]]) -> Iterable[str]:
    yield f"  by {title}:"
    if not data:
        yield "    (no decisions by a person in the window)"
    width = max([len(n or "(unnamed)") for n in data] + [4])
    for name, row in data.items():
        yield (
            f"    {(name or '(unnamed)'):<{width}}  n={row['count']:<4} "
            f"p50 {span_text(row['p50_seconds']):>8}  p95 {span_text(row['p95_seconds']):>8}"
        )


def text_report(data: dict[str, Any], span: str) -> list[str]:
    """The figures as lines for a terminal."""
    runs, totals, pending = data["runs"], data["totals"], data["pending"]
    lines = [
        f"insights for the last {span} (since {data['since']})",
        f"runs: {runs['read']} read of {runs['listed']} listed (--limit {runs['limit']}; "
        f"{runs['in_window']} in the window), {runs['unread']} unread",
        "decisions: " + ", ".join(f"{totals[k]} {k}" for k in totals),
        "time to decision (a person's, from request to decision):",
        *_timing_lines("tool", data["time_to_decision"]["by_tool"]),
        *_timing_lines("approver", data["time_to_decision"]["by_approver"]),
        f"pending now: {pending['count']} call{'' if pending['count'] == 1 else 's'}, "
        f"oldest waiting {span_text(pending['oldest_seconds']) if pending['count'] else '-'}",
    ]
    for tool, row in pending["by_tool"].items():
        lines.append(f"  {tool}: {row['count']}, oldest {span_text(row['oldest_seconds'])}")
    if not data["policy_fields"]:
        lines.append("rule hits, shadow disagreements: none (no decision names a policy rule)")
    else:
        lines.append("rule hits:")
        lines += [f"  {h['rule']} ({h['effect'] or '-'}): {h['count']}" for h in data["rule_hits"]]
        lines.append("shadow disagreements:")
        lines += [f"  {r}: {n}" for r, n in data["shadow_disagreements"].items()]
    return lines


async def cmd_insights(client: Client, args: argparse.Namespace) -> int:
    """Print the figures of the window `--since` (text, or `--json`)."""
    until = datetime.now(UTC)
    since = until - parse_span(args.since)
    queues = allowed_queues(args.task_queues, args.task_queue)
    reading = await read_window(
        client, since, limit=args.limit, queues=queues, timeout=args.timeout
    )
    data = as_json(figures_of(reading, since, until, args.limit))
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        print("\n".join(text_report(data, args.since)))
    return EXIT_OK
