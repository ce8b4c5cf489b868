"""`hitl audit`: every decision, action and refused attempt, for one run or across runs.

One row per decision (who, when, through what, what changed; an expiry is a decision row of
kind `expired`), one per action on a call (`resolve`, `extend`, `answer`) and one per refused
message the run kept (signals, late decisions), with the approver and call it named. Updates
refused by a validator leave nothing in history; the worker logs one line for each
(`refused approve update ...`).
"""

from __future__ import annotations

import argparse
import asyncio
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
    _Pollers,
    _query,
    parse_span,
)
from hitl.cli.inbox import list_runs, queue_clause
from hitl.wire import (
    QUERY_STATUS,
    SA_AGENT,
    WORKFLOW_TYPE,
    CallAction,
    DecisionRecord,
    PolicyVerdict,
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
    "outcome",
    "deadline",
    "policy_rule",
    "policy_version",
]
"""The fields of a row, in the CSV's column order."""


def through(d: DecisionRecord) -> str:
    """What a decision came through: a rule, policy, auto-approval or deadline, or a client."""
    if d.source != "person":
        return d.source
    if d.via == "signal":
        return "signal"
    return d.client or "temporal CLI/UI or API"


def action_row(status: RunStatus, a: CallAction) -> dict[str, Any]:
    """A `resolve`, `extend` or `answer` as an audit row.

    `outcome`: the resolution's outcome or the answer's action; `message`: the output or
    message a resolution gave, or the question an answer answered (`arguments`: its content);
    `deadline`: where an extension moved the deadline (`message`: from where).
    """
    return {
        **dict.fromkeys(COLUMNS),
        "run": status.workflow_id,
        "agent": status.agent,
        "event": "action",
        "at": a.at.isoformat(),
        "call_id": a.call_id,
        "tool": a.tool_name,
        "kind": a.kind,
        "approver": a.approver,
        "source": "person",
        "via": "update",
        "reason": a.reason,
        "message": (f"moved from {a.previous.isoformat()}" if a.previous is not None else a.text),
        "approvals": [],
        "through": "update",
        "verified": a.verified,
        "expired": False,
        "arguments": json.dumps(a.content, ensure_ascii=False) if a.content else None,
        "outcome": a.outcome,
        "deadline": a.deadline.isoformat() if a.deadline is not None else None,
        "policy_rule": None,
        "policy_version": None,
    }


def verdict_row(status: RunStatus, v: PolicyVerdict) -> dict[str, Any]:
    """What the run's approval policy said about a call (enforced or `log_only`) as a row.

    `kind` is the enforced effect (`none`: no enforced rule matched, the code decided);
    `reason` names what `log_only` rules would have made it (shadow mode).
    """
    shadow = f"log_only: {v.shadow_effect} by {v.shadow_rule}" if v.shadow_effect else None
    return {
        **dict.fromkeys(COLUMNS),
        "run": status.workflow_id,
        "agent": status.agent,
        "event": "policy",
        "at": v.at.isoformat() if v.at is not None else "",
        "call_id": v.call_id,
        "kind": v.effect or "none",
        "source": "policy",
        "reason": shadow,
        "message": v.message,
        "approvals": [],
        "through": "policy",
        "verified": False,
        "expired": False,
        "outcome": v.outcome,
        "policy_rule": v.rule,
        "policy_version": f"{v.policy}@{v.version} {v.digest[:19]}",
    }


def decision_row(status: RunStatus, d: DecisionRecord) -> dict[str, Any]:
    """A decision as an audit row (with the policy rule and version behind it)."""
    return {
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
        "expired": d.kind == "expired",
        "arguments": d.arguments,
        "original_arguments": d.original_arguments,
        "outcome": None,
        "deadline": None,
        "policy_rule": d.policy_rule,
        "policy_version": d.policy_version,
    }


def rows_of(status: RunStatus) -> list[dict[str, Any]]:
    """A run's decisions, actions and kept refusals as audit rows, oldest first."""
    rows = [decision_row(status, d) for d in status.decisions]
    rows += [verdict_row(status, v) for v in status.verdicts if v.matched or v.deferred]
    rows += [action_row(status, a) for a in status.actions]
    rows += [
        {
            "run": status.workflow_id,
            "agent": status.agent,
            "event": "refused",
            "at": r.received_at.isoformat(),
            "call_id": r.call_id,
            "tool": None,
            "kind": r.name,
            "approver": r.approver,
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
            "outcome": None,
            "deadline": None,
            "policy_rule": None,
            "policy_version": None,
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
        call, approver = _named_in(sent)
        rows.append(
            {
                **dict.fromkeys(COLUMNS),
                "run": run,
                "agent": agents[run],
                "event": "refused",
                "at": item.get("at"),
                "call_id": call,
                "approver": approver,
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


def _named_in(sent: str) -> tuple[str | None, str | None]:
    """The call id and approver a refused payload named, when it was readable JSON."""
    try:
        value = json.loads(sent)
    except ValueError:
        return None, None
    if not isinstance(value, dict):
        return None, None
    call, approver = value.get("call_id"), value.get("approver")
    return (
        call if isinstance(call, str) else None,
        approver if isinstance(approver, str) else None,
    )


READS_AT_ONCE = 16
"""Runs read at once (each a query, or a description and a result for a closed run)."""


async def _runs(client: Client, args: argparse.Namespace) -> list[WorkflowExecution]:
    since = datetime.now(UTC) - parse_span(args.since)
    clauses = [f"WorkflowType = '{WORKFLOW_TYPE}'", f"StartTime >= '{since.isoformat()}'"]
    agent = _literal(args.agent) if args.agent else None
    if agent:
        clauses.append(f"{SA_AGENT} = {agent}")
    queue = args.task_queue_filter
    within = queue_clause([queue]) if queue else None  # None: matched on what comes back only
    if within:
        clauses.append(within)
    query, timeout = " AND ".join(clauses), timedelta(seconds=args.timeout)
    try:
        found, more = await list_runs(client, query, args.limit, rpc_timeout=timeout)
    except RPCError as exc:
        raise Refused(f"cannot list runs: {exc.message} ({_code(exc)})") from None
    found = [w for w in found if not queue or w.task_queue == queue]
    if more:  # visibility lists running runs first: the closed ones may all be past the limit
        print(
            f"note: more than {args.limit} runs started within {args.since}; these are the "
            f"first {args.limit} the server lists (running runs before closed ones): raise "
            "--limit, or narrow with --since, --agent or --queue",
            file=sys.stderr,
        )
    return sorted(found, key=lambda w: w.start_time or since)


async def _status(
    client: Client, run: str, timeout: float, pollers: _Pollers | None = None
) -> tuple[RunStatus | None, str]:
    """The run's status, else its result's decisions for a completed run; a note when partial."""
    handle = await _handle(client, run)
    try:
        status: RunStatus = await _query(client, handle, QUERY_STATUS, RunStatus, timeout, pollers)
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
                actions=out.actions,
            ),
            f"{exc}; its decisions come from its result (refused attempts not included)",
        )


async def cmd_audit(client: Client, args: argparse.Namespace) -> int:
    """Print the audit rows of one run (`RUN`) or of every run started within `--since`."""
    names = [args.run] if args.run else [w.id for w in await _runs(client, args)]
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    agents: dict[str, str | None] = {}
    pollers, gate = _Pollers(client), asyncio.Semaphore(READS_AT_ONCE)

    async def read(name: str) -> tuple[RunStatus | None, str]:
        async with gate:
            return await _status(client, name, args.timeout, pollers)

    answers = await asyncio.gather(*(read(name) for name in names))  # in the listing's order
    for name, (status, note) in zip(names, answers, strict=True):
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
