"""`hitl audit`: every decision and every refused attempt, for one run or across runs.

One row per decision (who, when, through what, what changed) and one per refused message the
run kept (signals, late decisions). Updates refused by a validator leave nothing in history;
the worker logs one line for each (`refused approve update ...`).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError

from hitl.cli.common import (
    _AGENT_KEY,
    EXIT_OK,
    Refused,
    _code,
    _handle,
    _literal,
    _query,
    parse_span,
)
from hitl.wire import (
    QUERY_STATUS,
    SA_AGENT,
    WORKFLOW_TYPE,
    DecisionRecord,
    RunOutput,
    RunStatus,
)

COLUMNS = [
    "run",
    "agent",
    "event",
    "at",
    "call_id",
    "tool",
    "kind",
    "approver",
    "source",
    "via",
    "reason",
    "message",
    "approvals",
    "error_type",
    "through",
    "verified",
    "expired",
    "arguments",
    "original_arguments",
]
"""The fields of a row, in the CSV's column order."""


def through(d: DecisionRecord) -> str:
    """What a decision came through: a rule, policy, auto-approval or deadline, or a client."""
    if d.source != "person":
        return d.source
    if d.via == "signal":
        return "signal"
    return d.client or "temporal CLI/UI or API"


def rows_of(status: RunStatus) -> list[dict[str, Any]]:
    """A run's decisions and kept refusals as audit rows, oldest first."""
    rows = [
        {
            "run": status.workflow_id,
            "agent": status.agent,
            "event": "decision",
            "at": d.decided_at.isoformat(),
            "call_id": d.call_id,
            "tool": d.tool_name,
            "kind": d.kind,
            "approver": d.approver,
            "source": d.source,
            "via": d.via,
            "reason": d.reason,
            "message": d.message,
            "approvals": [a.approver for a in d.approvals],
            "error_type": None,
            "through": through(d),
            "verified": d.verified,
            "expired": d.expired,
            "arguments": d.arguments,
            "original_arguments": d.original_arguments,
        }
        for d in status.decisions
    ]
    rows += [
        {
            "run": status.workflow_id,
            "agent": status.agent,
            "event": "refused",
            "at": r.received_at.isoformat(),
            "call_id": r.call_id,
            "tool": None,
            "kind": r.name,
            "approver": None,
            "source": None,
            "via": r.via,
            "reason": None,
            "message": r.message,
            "approvals": [],
            "error_type": r.error_type,
            "through": r.via,
            "verified": False,
            "expired": False,
            "arguments": None,
            "original_arguments": None,
        }
        for r in status.refused
    ]
    return sorted(rows, key=lambda row: str(row["at"]))


def worker_log_rows(path: str, agents: dict[str, str | None]) -> list[dict[str, Any]]:
    """Rows for the updates a validator refused, from a worker's `--audit-log` file.

    Only those of the runs in `agents` (run -> agent) are kept.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise Refused(f"cannot read --worker-log {path}: {exc}") from None
    rows = []
    for line in lines:
        try:
            item = json.loads(line)
        except ValueError:
            continue
        run = item.get("run") if isinstance(item, dict) else None
        if run not in agents:
            continue
        sent = str(item.get("sent") or "")
        call = _call_in(sent)
        rows.append(
            {
                **dict.fromkeys(COLUMNS),
                "run": run,
                "agent": agents[run],
                "event": "refused",
                "at": item.get("at"),
                "call_id": call,
                "kind": item.get("update"),
                "via": "update",
                "message": item.get("message"),
                "approvals": [],
                "error_type": item.get("error_type"),
                "through": "update (refused by the run's validator)",
                "verified": False,
                "expired": False,
            }
        )
    return rows


def _call_in(sent: str) -> str | None:
    """The call id a refused payload named, when it was readable JSON."""
    try:
        value = json.loads(sent)
    except ValueError:
        return None
    call = value.get("call_id") if isinstance(value, dict) else None
    return call if isinstance(call, str) else None


async def _runs(client: Client, args: argparse.Namespace) -> list[WorkflowExecution]:
    since = datetime.now(UTC) - parse_span(args.since)
    clauses = [f"WorkflowType = '{WORKFLOW_TYPE}'", f"StartTime >= '{since.isoformat()}'"]
    agent = _literal(args.agent) if args.agent else None
    if agent:
        clauses.append(f"{SA_AGENT} = {agent}")
    try:
        found = [
            w
            async for w in client.list_workflows(
                " AND ".join(clauses),
                limit=args.limit,
                rpc_timeout=timedelta(seconds=args.timeout),
            )
        ]
    except RPCError as exc:
        raise Refused(f"cannot list runs: {exc.message} ({_code(exc)})") from None
    return sorted(found, key=lambda w: w.start_time or since)


async def _status(client: Client, run: str, timeout: float) -> tuple[RunStatus | None, str]:
    """The run's status, else its result's decisions for a completed run; a note when partial."""
    handle = await _handle(client, run)
    try:
        status: RunStatus = await _query(client, handle, QUERY_STATUS, RunStatus, timeout)
        return status, ""
    except Refused as exc:
        try:
            desc = await handle.describe()
        except RPCError:
            return None, str(exc)
        if desc.status != WorkflowExecutionStatus.COMPLETED:
            return None, str(exc)
        out: RunOutput = await handle.result()
        return (
            RunStatus(
                workflow_id=run,
                run_id=out.run_id,
                phase="completed",
                agent=desc.typed_search_attributes.get(_AGENT_KEY) or out.last_agent_name,
                decisions=out.decisions,
            ),
            f"{exc}; its decisions come from its result (refused attempts not included)",
        )


async def cmd_audit(client: Client, args: argparse.Namespace) -> int:
    """Print the audit rows of one run (`RUN`) or of every run started within `--since`."""
    names = [args.run] if args.run else [w.id for w in await _runs(client, args)]
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    agents: dict[str, str | None] = {}
    for name in names:
        status, note = await _status(client, name, args.timeout)
        if note:
            notes.append(note)
        if status is None:
            if args.run:
                raise Refused(note)
            continue
        agents[name] = status.agent
        rows += [r for r in rows_of(status) if not args.agent or r["agent"] == args.agent]
    for path in args.worker_log:
        rows += [
            r for r in worker_log_rows(path, agents) if not args.agent or r["agent"] == args.agent
        ]
    rows.sort(key=lambda row: str(row["at"]))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "approvals": " ".join(row["approvals"])})
    else:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
    return EXIT_OK
