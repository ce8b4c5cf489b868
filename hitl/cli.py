"""`hitl`: the operator's console for durable agent runs.

    hitl dev                                   the local stack (dev server, UI, worker)
    hitl setup                                 register our search attributes on a cluster
    hitl run AGENT "input" [--id ID] [--wait]  start a run
    hitl pending [--agent A] [--json] [--runs] every pending approval, across all runs
    hitl show RUN [--json]                     a run: status, transcript, pending requests
    hitl approve RUN [CALL_ID | --all] [--always] [--as NAME] [--reason TEXT]
    hitl reject RUN [CALL_ID | --all] [--always] [--message TEXT] [--as NAME]
    hitl watch RUN [--from-offset N]           follow a run until it finishes
    hitl codec-server [--port 8081]            decrypt payloads for the temporal CLI and UI

Exit codes: 0 done, 1 refused or failed (the typed reason is printed), 2 usage error.
`pending` exits 0 when some runs could not be asked for their calls (no worker answered within
--timeout): they are listed from their search attributes, and a note on stderr says why.
Connection settings are the `temporal` CLI's (envconfig profile, TEMPORAL_ADDRESS, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from hitl.client import connect
from hitl.errors import UserError
from hitl.starting import decision_update_id
from hitl.wire import (
    DEFAULT_TASK_QUEUE,
    SA_AGENT,
    SA_DEADLINE,
    SA_PENDING_SINCE,
    SA_PENDING_TOOLS,
    SA_STATUS,
    UPDATE_DECIDE,
    WORKFLOW_TYPE,
    DecideInput,
    DecisionInput,
    DecisionKind,
    DecisionRecord,
    DecisionRequest,
    RunEvent,
    RunOutput,
    RunSnapshot,
    RunStatus,
    WaitInput,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class Refused(Exception):
    """A command could not do what was asked; the message says why (exit 1)."""


class _Gone(Refused):
    """The run does not exist (any more) in this namespace."""


class _Unreadable(Refused):
    """The run exists but could not be asked; `reason` says why, without the run's id."""

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"cannot read run {run_id}: {reason}")
        self.reason = reason


# ----------------------------------------------------------------------------- output helpers


def _ago(when: datetime | None) -> str:
    if when is None:
        return "-"
    seconds = max(0, int((datetime.now(UTC) - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line.rstrip()]
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(out)


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, default=str)


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when else None


def _short(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


# ----------------------------------------------------------------------------- commands


async def _handle(client: Client, run_id: str) -> WorkflowHandle[Any, Any]:
    return client.get_workflow_handle(run_id, result_type=RunOutput)


def _code(exc: RPCError) -> str:
    try:
        return RPCStatusCode(exc.status).name
    except ValueError:
        return str(exc.status)


# The server keeps a query waiting for a worker (about 30 s) and then cancels it; the client's
# own deadline (`--timeout`) ends the wait sooner with one of these codes.
_UNANSWERED = (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED)


class _Pollers:
    """Live workflow pollers per task queue, asked once per queue and command.

    A second, `fresh` count is taken (once) after a query went unanswered, to say why.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self._asked: dict[tuple[str, bool], asyncio.Future[int | None]] = {}

    async def count(self, queue: str, *, fresh: bool = False) -> int | None:
        """How many workers poll `queue` (`None`: the server would not say)."""
        key = (queue, fresh)
        if key not in self._asked:
            self._asked[key] = asyncio.ensure_future(self._ask(queue))
        return await self._asked[key]

    async def _ask(self, queue: str) -> int | None:
        from hitl.serving import live_pollers

        try:
            return await live_pollers(self.client, queue)
        except RPCError:
            return None

    async def why_unanswered(self, queue: str, timeout: float) -> str:
        """Why a run on `queue` did not answer a query within `timeout` seconds."""
        if await self.count(queue, fresh=True) == 0:
            return f"no worker is polling task queue {queue!r}"
        return f"no worker answered within {timeout:g}s on task queue {queue!r}"


async def _query(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    name: str,
    result_type: type[Any],
    timeout: float,
    pollers: _Pollers | None = None,
    queue: str | None = None,
) -> Any:
    """Ask a run a query within `timeout` seconds, or say plainly why it cannot answer.

    Queries are answered by a worker. With none polling the run's task queue (`queue`, else
    looked up) the answer is immediate; with one that does not answer, it comes after `timeout`
    seconds, never after the server's own query timeout. Raises `_Gone` or `_Unreadable`.
    """
    pollers = pollers or _Pollers(client)
    if queue is None:
        try:
            desc = await handle.describe(rpc_timeout=timedelta(seconds=timeout))
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise _Gone(f"no run {handle.id!r} in this namespace") from None
            raise _Unreadable(handle.id, f"{exc.message} ({_code(exc)})") from None
        queue = desc.task_queue
    if await pollers.count(queue) == 0:
        raise _Unreadable(handle.id, f"no worker is polling task queue {queue!r}")
    try:
        return await handle.query(
            name, result_type=result_type, rpc_timeout=timedelta(seconds=timeout)
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise _Gone(f"no run {handle.id!r} in this namespace") from None
        if exc.status in _UNANSWERED:
            raise _Unreadable(handle.id, await pollers.why_unanswered(queue, timeout)) from None
        raise _Unreadable(handle.id, f"{exc.message} ({_code(exc)})") from None
    except WorkflowQueryFailedError as exc:
        raise _Unreadable(handle.id, f"the {name} query failed: {exc}") from None


async def _status(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    timeout: float,
    pollers: _Pollers | None = None,
) -> RunStatus:
    status: RunStatus = await _query(client, handle, "status", RunStatus, timeout, pollers)
    return status


def _literal(value: str) -> str | None:
    """`value` as a visibility-query string literal, or `None` when no literal matches it.

    A single quote is escaped. Double quotes and backslashes cannot be matched exactly by every
    visibility store (the dev server's SQLite store matches neither, escaped or not), so such
    values are filtered on the client instead.
    """
    if any(c in value for c in '"\\') or any(ord(c) < 32 for c in value):
        return None
    return "'" + value.replace("'", "\\'") + "'"


def _path_text(path: Sequence[str], tool: str) -> str:
    """`Desk > research > Researcher > fetch`: where a call sits in the run's agent graph."""
    return " > ".join([*path, tool])


_TOOLS_KEY = SearchAttributeKey.for_keyword_list(SA_PENDING_TOOLS)
_SINCE_KEY = SearchAttributeKey.for_datetime(SA_PENDING_SINCE)
_AGENT_KEY = SearchAttributeKey.for_keyword(SA_AGENT)
_DEADLINE_KEY = SearchAttributeKey.for_datetime(SA_DEADLINE)


async def _paused_runs(
    client: Client, args: argparse.Namespace
) -> tuple[list[WorkflowExecution], bool]:
    """Runs waiting for a person (visibility query); True when our search attributes are missing.

    Without our search attributes every running `AgentRun` is listed, to be asked one by one.
    """
    clauses = [f"{SA_STATUS} = 'awaiting_approval'", "ExecutionStatus = 'Running'"]
    fallback = [f"WorkflowType = '{WORKFLOW_TYPE}'", "ExecutionStatus = 'Running'"]
    agent = _literal(args.agent) if args.agent else None
    if agent:
        clauses.append(f"{SA_AGENT} = {agent}")
    if args.task_queue_filter:
        queue = _literal(args.task_queue_filter)
        if queue:
            clauses.append(f"TaskQueue = {queue}")
            fallback.append(f"TaskQueue = {queue}")
    timeout = timedelta(seconds=args.timeout)

    async def listing(query: str) -> list[WorkflowExecution]:
        return [
            w async for w in client.list_workflows(query, limit=args.limit, rpc_timeout=timeout)
        ]

    degraded = False
    try:
        found = await listing(" AND ".join(clauses))
    except RPCError as exc:
        if SA_STATUS not in exc.message and "search attribute" not in exc.message.lower():
            raise Refused(f"cannot list paused runs: {exc.message} ({_code(exc)})") from None
        if args.runs:
            raise Refused(
                "`hitl pending --runs` reads our search attributes, and they are not "
                "registered here: run `hitl setup` (or list calls without --runs)"
            ) from None
        print(
            "note: our search attributes are not registered here (run `hitl setup`); "
            "scanning every running AgentRun instead",
            file=sys.stderr,
        )
        degraded = True
        try:
            found = await listing(" AND ".join(fallback))
        except RPCError as exc2:
            raise Refused(f"cannot list runs: {exc2.message} ({_code(exc2)})") from None
    # Exact matches on the client too: a value no literal can express was left out of the query.
    if args.task_queue_filter:
        found = [w for w in found if w.task_queue == args.task_queue_filter]
    if args.agent and not degraded:
        found = [w for w in found if w.typed_search_attributes.get(_AGENT_KEY) == args.agent]
    return found, degraded


async def cmd_pending(client: Client, args: argparse.Namespace) -> int:
    """List every pending approval across runs.

    A run that cannot be asked for its calls (no worker polls its task queue, or none answers
    within `--timeout` seconds) still appears, from its search attributes, with the call-level
    columns marked unavailable, and one note per reason goes to stderr. That is not a failure
    (exit 0): the listing is complete at the level of runs, and `--json` marks such rows with
    an `unavailable` reason.
    """
    found, degraded = await _paused_runs(client, args)
    if args.runs:
        return _print_pending_runs(found, args)

    pollers = _Pollers(client)
    semaphore = asyncio.Semaphore(16)

    async def ask(w: WorkflowExecution) -> RunStatus | str | None:
        """The run's status, or why it could not be asked (`None`: it is gone)."""
        handle = client.get_workflow_handle(w.id)
        async with semaphore:
            try:
                status: RunStatus = await _query(
                    client, handle, "status", RunStatus, args.timeout, pollers, w.task_queue
                )
            except _Gone:
                return None
            except _Unreadable as exc:
                return exc.reason
        return status

    answers = await asyncio.gather(*(ask(w) for w in found))
    far = datetime.max.replace(tzinfo=UTC)
    rows: list[tuple[datetime, list[str], dict[str, Any]]] = []
    unavailable: dict[str, int] = {}
    for w, answer in zip(found, answers, strict=True):
        if answer is None:
            continue
        if isinstance(answer, str):
            unavailable[answer] = unavailable.get(answer, 0) + 1
            if degraded:
                continue  # without search attributes, nothing says this run is even paused
            agent = w.typed_search_attributes.get(_AGENT_KEY) or ""
            tools = list(w.typed_search_attributes.get(_TOOLS_KEY) or [])
            since = w.typed_search_attributes.get(_SINCE_KEY)
            cells = [
                w.id,
                "(unavailable)",
                _path_text([agent] if agent else [], ", ".join(tools) or "?"),
                "(unavailable: see note)",
                _ago(since),
            ]
            data: dict[str, Any] = {
                "workflow_id": w.id,
                "agent": agent,
                "call_id": None,
                "tool_name": None,
                "pending_tools": tools,
                "requested_at": _iso(since),
                "path": [agent] if agent else [],
                "task_queue": w.task_queue,
                "unavailable": answer,
            }
            rows.append((since or far, cells, data))
            continue
        if args.agent and answer.agent != args.agent:
            continue
        for p in answer.pending:
            title = p.request.title if p.request else f"{p.agent_name} wants to run {p.tool_name}"
            cells = [
                answer.workflow_id,
                p.call_id,
                _path_text(p.path or [p.agent_name], p.tool_name),
                _short(title),
                _ago(p.requested_at),
            ]
            data = {
                **p.model_dump(mode="json"),
                # Decisions go to the root run; the call's own (nested) run is named apart.
                "workflow_id": answer.workflow_id,
                "owner_workflow_id": p.workflow_id or answer.workflow_id,
                "agent": answer.agent,
                "task_queue": w.task_queue,
                "unavailable": None,
            }
            rows.append((p.requested_at or far, cells, data))
    rows.sort(key=lambda r: r[0])
    for why, n in unavailable.items():
        print(f"note: {n} run(s) could not be asked for their calls: {why}", file=sys.stderr)
    if args.json:
        print(_json([data for _, _, data in rows]))
        return EXIT_OK
    if not rows:
        print("no pending approvals")
        return EXIT_OK
    print(
        _table(
            [cells for _, cells, _ in rows], ["RUN", "CALL ID", "PATH", "TITLE", "WAITING SINCE"]
        )
    )
    return EXIT_OK


def _print_pending_runs(found: list[WorkflowExecution], args: argparse.Namespace) -> int:
    """One row per paused run, from the visibility record alone: no query, no worker."""
    far = datetime.max.replace(tzinfo=UTC)
    runs = sorted(
        (
            (
                w,
                w.typed_search_attributes.get(_AGENT_KEY) or "",
                list(w.typed_search_attributes.get(_TOOLS_KEY) or []),
                w.typed_search_attributes.get(_SINCE_KEY),
            )
            for w in found
        ),
        key=lambda r: r[3] or far,
    )
    if args.json:
        print(
            _json(
                [
                    {
                        "workflow_id": w.id,
                        "agent": agent,
                        "pending_tools": tools,
                        "pending_since": _iso(since),
                        "task_queue": w.task_queue,
                    }
                    for w, agent, tools, since in runs
                ]
            )
        )
        return EXIT_OK
    if not runs:
        print("no pending approvals")
        return EXIT_OK
    rows = [[w.id, agent, ", ".join(tools), _ago(since)] for w, agent, tools, since in runs]
    print(_table(rows, ["RUN", "AGENT", "PENDING TOOLS", "WAITING SINCE"]))
    return EXIT_OK


def _transcript_lines(snap: RunSnapshot) -> list[str]:
    lines: list[str] = []
    for given in snap.input_items:
        content = given.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        lines.append(f"  {given.get('role', 'input')}: {_short(str(text), 100)}")
    outputs = {
        i.raw_item.get("call_id"): i.raw_item.get("output")
        for i in snap.new_items
        if i.type in ("tool_call_output_item", "handoff_output_item")
    }
    for item in snap.new_items:
        raw = item.raw_item
        if item.type == "message_output_item":
            texts = [p.get("text", "") for p in raw.get("content", []) if isinstance(p, dict)]
            lines.append(f"  {item.agent_name}: {_short(''.join(texts), 100)}")
        elif item.type in ("tool_call_item", "handoff_call_item"):
            out = outputs.get(raw.get("call_id"))
            result = "(pending)" if out is None else _short(str(out), 60)
            lines.append(
                f"  {item.agent_name} -> {raw.get('name')}({_short(raw.get('arguments', ''), 50)})"
                f" = {result}"
            )
    return lines


async def cmd_show(client: Client, args: argparse.Namespace) -> int:
    """Show one run: status, transcript summary, pending requests with their preview."""
    handle = await _handle(client, args.run)
    snap: RunSnapshot = await _query(client, handle, "snapshot", RunSnapshot, args.timeout)
    if args.json:
        print(snap.model_dump_json(indent=2))
        return EXIT_OK
    st = snap.status
    print(f"Run {st.workflow_id}  agent {st.agent}  phase {st.phase}  turn {st.turn}")
    print(
        f"Usage: {st.usage.requests} model requests, {st.usage.input_tokens} in / "
        f"{st.usage.output_tokens} out tokens"
    )
    if st.final_output is not None:
        print(f"Final output: {st.final_output}")
    if st.error is not None:
        print(f"Failed: {st.error.type}: {st.error.message}")
    print("\nTranscript:")
    print("\n".join(_transcript_lines(snap)) or "  (empty)")
    if st.pending:
        print(f"\nPending approvals ({len(st.pending)}):")
    for n, p in enumerate(st.pending, 1):
        req = p.request
        print(f"\n[{n}] {req.title if req else p.tool_name}")
        print(
            f"    call {p.call_id}, path {_path_text(p.path or [p.agent_name], p.tool_name)}, "
            f"waiting since {p.requested_at} ({_ago(p.requested_at)})"
        )
        if p.workflow_id and p.workflow_id != st.workflow_id:
            print(f"    in nested run {p.workflow_id} (decide it here, on the root run)")
        if req is not None:
            for line in req.message.splitlines():
                print(f"    {line}")
            if req.preview:
                print(f"    --- {req.preview_label or 'Preview'} ---")
                for line in req.preview.splitlines():
                    print(f"    {line}")
                print("    ---")
            if req.note:
                print(f"    note: {req.note}")
            print(f"    [{req.primary_label}] hitl approve {st.workflow_id} {p.call_id}")
            print(
                f"    [{req.secondary_label}] hitl reject {st.workflow_id} {p.call_id} "
                '--message "..."'
            )
        else:
            print(f"    arguments: {p.arguments}")
    if st.decisions:
        print("\nDecisions:")
        for d in st.decisions:
            who = d.approver or d.source.replace("_", " ")
            extra = f": {d.message}" if d.message else ""
            print(f"  {d.call_id} {d.tool_name}: {d.kind} by {who} ({d.source}){extra}")
    if st.refused:
        print("\nRefused signals:")
        for r in st.refused:
            print(f"  {r.received_at} {r.name}: {r.error_type}: {r.message}")
    return EXIT_OK


async def _no_worker_message(client: Client, handle: WorkflowHandle[Any, Any]) -> str:
    """Why a decision is not applied yet, and until when it still can be (honestly)."""
    from hitl.serving import live_pollers

    deadline = None
    try:
        desc = await handle.describe()
        queue = desc.task_queue
        deadline = desc.typed_search_attributes.get(_DEADLINE_KEY)
        pollers = await live_pollers(client, queue)
    except RPCError:
        queue, pollers = "?", 0
    who = "no worker is polling" if pollers == 0 else "no worker answered on"
    until = (
        f" It can still apply until {deadline.isoformat()} (the earliest approval deadline of "
        "the run's pending calls); one that arrives later is refused and recorded on the run."
        if deadline is not None
        else ""
    )
    return (
        f"{who} task queue {queue!r}: the decision is queued on the server, which holds it in "
        f"memory until a worker takes it (a server restart loses it).{until} Re-run the same "
        "command to see its outcome (it is deduplicated)."
    )


def _decided_text(rec: DecisionRecord) -> str:
    """What a recorded decision says: `approve by alice (always, for the rest of the run)`."""
    who = rec.approver or rec.source.replace("_", " ")
    text = f"{rec.kind} by {who}"
    if rec.approver and rec.source != "person":
        text += f" ({rec.source.replace('_', ' ')})"
    if rec.always:
        text += " (always, for the rest of the run)"
    if rec.message:
        text += f", message {json.dumps(rec.message)}"
    if rec.reason:
        text += f", reason {json.dumps(rec.reason)}"
    return text


def _outcome(
    run_id: str, decisions: Sequence[DecisionRequest], recorded: dict[str, DecisionRecord]
) -> list[DecisionRecord]:
    """The recorded decision for each request, or `Refused` when one was decided otherwise."""
    records = []
    for d in decisions:
        rec = recorded.get(d.call_id)
        if rec is None:
            raise Refused(f"run {run_id} recorded no decision for call '{d.call_id}'")
        if not rec.answers(d.kind, d):
            raise Refused(
                f"refused: call '{d.call_id}' was already decided: {_decided_text(rec)} "
                "(AlreadyDecided)"
            )
        records.append(rec)
    return records


async def _finished_run_decisions(
    handle: WorkflowHandle[Any, Any], timeout: float
) -> dict[str, DecisionRecord]:
    """The decisions a closed run recorded (its result), or `Refused` saying why there are none."""
    try:
        desc = await handle.describe(rpc_timeout=timedelta(seconds=timeout))
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise Refused(f"no run {handle.id!r} in this namespace") from None
        raise Refused(f"cannot read run {handle.id}: {exc.message} ({_code(exc)})") from None
    if desc.status == WorkflowExecutionStatus.COMPLETED:
        out: RunOutput = await handle.result(rpc_timeout=timedelta(seconds=timeout))
        return {d.call_id: d for d in out.decisions}
    state = desc.status.name.lower() if desc.status else "unknown"
    raise Refused(f"run {handle.id} has finished ({state}); it takes no more decisions")


async def cmd_decide(client: Client, args: argparse.Namespace, kind: DecisionKind) -> int:
    """Approve or reject one call, or all pending calls of a run.

    What is printed is what the run recorded (returned by the update), never the flags given:
    a call decided earlier in another way is reported as refused (AlreadyDecided, exit 1).
    """
    handle = await _handle(client, args.run)
    approver = args.as_ or os.environ.get("HITL_APPROVER") or getpass.getuser()
    if args.all:
        try:
            status = await _status(client, handle, args.timeout)
        except Refused as exc:
            raise Refused(
                f"{exc}; --all needs a worker to list the calls (name a CALL_ID to queue a "
                "decision until one runs)"
            ) from None
        call_ids = [p.call_id for p in status.pending]
        if not call_ids:
            raise Refused(f"run {args.run} has no pending approvals")
    else:
        call_ids = [args.call_id]
    message = getattr(args, "message", None)
    decisions = [
        DecisionRequest(
            kind=kind,
            call_id=c,
            always=args.always,
            message=message,
            approver=approver,
            reason=args.reason,
        )
        for c in call_ids
    ]
    update = kind if len(decisions) == 1 else UPDATE_DECIDE
    uid = decision_update_id(args.run, update, decisions)
    timeout = timedelta(seconds=args.timeout)
    recorded: dict[str, DecisionRecord]
    try:
        if len(decisions) == 1:
            d = decisions[0]
            payload = DecisionInput(
                call_id=d.call_id,
                always=d.always,
                message=d.message,
                approver=d.approver,
                reason=d.reason,
            )
            rec: DecisionRecord = await handle.execute_update(
                kind, payload, id=uid, rpc_timeout=timeout, result_type=DecisionRecord
            )
            recorded = {rec.call_id: rec}
        else:
            after: RunStatus = await handle.execute_update(
                "decide",
                DecideInput(decisions=decisions, wait=False),
                id=uid,
                rpc_timeout=timeout,
                result_type=RunStatus,
            )
            recorded = {r.call_id: r for r in after.decisions}
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError):
            raise Refused(f"refused: {cause.message} ({cause.type})") from None
        raise Refused(f"refused: {cause}") from None
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        raise Refused(await _no_worker_message(client, handle)) from None
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise Refused(
                f"cannot decide on run {args.run}: {exc.message} ({_code(exc)})"
            ) from None
        # A closed run takes no new update; what it recorded is the outcome.
        recorded = await _finished_run_decisions(handle, args.timeout)
    for rec in _outcome(args.run, decisions, recorded):
        verb, _, rest = _decided_text(rec).partition(" ")
        verb = "approved" if verb == "approve" else "rejected"
        print(f"{verb} {rec.call_id} ({rec.tool_name}) on {args.run} {rest}")
    return EXIT_OK


async def cmd_run(client: Client, args: argparse.Namespace) -> int:
    """Start a run by agent name; with --wait, wait until it pauses or finishes.

    A business id (`--id`) names one run for good, as with `Runner.run`: if its run has closed,
    nothing starts and its outcome is reported.
    """
    from hitl.starting import StartRequest

    request = StartRequest.build(args.agent, args.input, workflow_id=args.id)
    wid = request.workflow_id
    try:
        handle = await request.start(client, args.task_queue)
    except WorkflowAlreadyStartedError:
        print(f"run {wid} already exists and has closed; nothing was started")
        return _report(await _closed_status(client.get_workflow_handle(wid, result_type=RunOutput)))
    except RPCError as exc:
        raise Refused(f"cannot start {wid}: {exc.message}") from None
    print(f"started {wid}")
    if not args.wait:
        return EXIT_OK
    try:
        status: RunStatus = await handle.execute_update(
            "wait", WaitInput(), result_type=RunStatus, rpc_timeout=timedelta(seconds=args.timeout)
        )
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        raise Refused(await _no_worker_message(client, handle)) from None
    except WorkflowUpdateFailedError as exc:
        raise Refused(f"the run failed: {exc.cause}") from None
    except RPCError:
        status = await _closed_status(handle)
    if status.phase == "completed" and status.final_output is None:
        status = await _closed_status(handle)  # a large output is left out of `wait`'s answer
    return _report(status)


async def _closed_status(handle: WorkflowHandle[Any, Any]) -> RunStatus:
    from hitl.run import _typed

    try:
        out: RunOutput = await handle.result()
    except Exception as exc:
        err = _typed(exc)
        raise Refused(f"the run failed: {err.type_name}: {err.message}") from None
    return RunStatus(
        workflow_id=handle.id,
        run_id=out.run_id,
        phase="completed",
        agent="",
        final_output=out.final_output,
        decisions=out.decisions,
        usage=out.usage,
    )


def _report(status: RunStatus) -> int:
    if status.phase == "failed" and status.error:
        print(f"failed: {status.error.type}: {status.error.message}")
        return EXIT_FAILED
    if status.phase == "completed":
        print(f"completed: {status.final_output}")
        return EXIT_OK
    print(f"{status.phase}: {len(status.pending)} pending approval(s)")
    for p in status.pending:
        title = p.request.title if p.request else p.tool_name
        print(f"  {p.call_id}  {p.tool_name}  {_short(title)}")
    print(f"see them with: hitl show {status.workflow_id}")
    return EXIT_OK


def format_event(event: RunEvent) -> str:
    """One line per event for `hitl watch`."""
    head = f"[{event.offset}] turn {event.turn}"
    who = f" {event.agent}" if event.agent else ""
    kind = event.type
    if kind == "message":
        return f"{head}{who}: {_short(event.text or '', 100)}"
    if kind == "model_text_delta":
        return f"{head}{who} ...{event.text}"
    if kind == "tool_called":
        args = _short(str(event.data.get("arguments", "")), 60)
        return f"{head}{who} calls {event.tool}({args})  [{event.call_id}]"
    if kind == "tool_started":
        return f"{head} running {event.tool} [{event.call_id}]"
    if kind == "tool_finished":
        return f"{head} {event.call_id} -> {_short(event.text or '', 80)}"
    if kind == "approval_requested":
        return f"{head} WAITING FOR APPROVAL {event.tool} [{event.call_id}]: {event.text or ''}"
    if kind == "approval_decided":
        who_decided = event.data.get("approver") or event.data.get("source")
        return f"{head} {event.text} {event.tool} [{event.call_id}] by {who_decided}"
    if kind == "handoff":
        return f"{head} handoff {event.data.get('from')} -> {event.data.get('to')}"
    if kind == "paused":
        return f"{head} paused: waiting for {', '.join(event.data.get('pending', []))}"
    if kind == "final_output":
        return f"{head} final output: {event.text}"
    if kind == "run_failed":
        return f"{head} FAILED ({event.data.get('type')}): {event.text}"
    return f"{head} {kind}"


async def cmd_watch(client: Client, args: argparse.Namespace) -> int:
    """Follow a run's event stream, as it runs and while it waits, until it finishes."""
    from hitl.stream import stream_events

    last: RunEvent | None = None
    try:
        async for event in stream_events(client, args.run, from_offset=args.from_offset):
            print(format_event(event), flush=True)
            last = event
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise Refused(f"no run {args.run!r} in this namespace") from None
        raise Refused(f"cannot follow run {args.run}: {exc.message}") from None
    if last is not None and last.type == "run_failed":
        return EXIT_FAILED
    return EXIT_OK


async def cmd_setup(client: Client, args: argparse.Namespace) -> int:
    """Register our search attributes on the connected namespace."""
    from hitl.admin import register_search_attributes

    try:
        added = await register_search_attributes(client)
    except RPCError as exc:
        raise Refused(
            f"cannot register search attributes in {client.namespace!r}: {exc.message}. On "
            "Temporal Cloud add them with `tcld namespace search-attributes add` "
            "(HitlStatus Keyword, HitlPendingTools KeywordList, HitlAgent Keyword, "
            "HitlPendingSince Datetime, HitlDeadline Datetime)."
        ) from None
    if added:
        print(f"registered {', '.join(added)} in namespace {client.namespace!r}")
    else:
        print(f"search attributes already registered in namespace {client.namespace!r}")
    return EXIT_OK


def cmd_codec_server(args: argparse.Namespace) -> int:
    """Serve the payload codec (HITL_ENCRYPTION_KEY) to the temporal CLI and the Web UI."""
    from hitl.codec import EncryptionCodec, serve_codec

    codec = EncryptionCodec.from_env()
    if codec is None:
        print("hitl: HITL_ENCRYPTION_KEY is not set; nothing to encode or decode", file=sys.stderr)
        return EXIT_FAILED
    server = serve_codec(codec, args.host, args.port, tuple(args.cors_origin))
    url = f"http://{args.host}:{server.server_address[1]}"
    print(f"codec server on {url}", flush=True)
    print(f"  temporal workflow show -w RUN --codec-endpoint {url}")
    print(f"  temporal server start-dev --ui-codec-endpoint {url}  (or the UI's codec setting)")
    stop = {"now": False}
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    while not stop["now"]:
        time.sleep(0.2)
    server.shutdown()
    return EXIT_OK


def _signal_pending(stop: dict[str, bool], grace: float = 1.0) -> bool:
    """True when a stop was requested, allowing `grace` seconds for its handler to run."""
    deadline = time.monotonic() + grace
    while not stop["now"] and time.monotonic() < deadline:
        time.sleep(0.05)
    return stop["now"]


def cmd_dev(args: argparse.Namespace) -> int:
    """The local stack: dev server (persistent, UI), search attributes, a worker. Ctrl-C stops."""
    from hitl.serving import DevServer, free_port, port_free

    state = Path(args.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    port = args.port or (7233 if port_free(7233) else free_port())
    ui_port = args.ui_port or (8233 if port_free(8233) else free_port())
    server = DevServer(
        port=port,
        ui_port=ui_port,
        db_filename=state / "dev.sqlite",
        log_file=state / "dev-server.log",
    )
    stop = {"now": False}

    def on_signal(*_: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    server.start()
    agents = args.agents or os.environ.get("HITL_AGENTS", "hitl.examples.refund_desk:agent").split(
        ","
    )
    cmd = [
        sys.executable,
        "-m",
        "worker",
        "--address",
        server.address,
        "--task-queue",
        args.task_queue,
    ]
    for a in agents:
        cmd += ["--agents", a]
    for a in args.allow or []:
        cmd += ["--allow", a]
    worker = subprocess.Popen(cmd)
    print(f"Temporal dev server  {server.address}  (SQLite {state / 'dev.sqlite'})")
    print(f"Web UI               http://127.0.0.1:{ui_port}")
    print(
        f"Approval inbox       http://127.0.0.1:{ui_port}/namespaces/default/workflows"
        "?query=HitlStatus%3D%22awaiting_approval%22%20AND%20ExecutionStatus%3D%22Running%22"
    )
    print(f"Worker               {', '.join(agents)} on task queue {args.task_queue!r}")
    print(f"Connect              export TEMPORAL_ADDRESS={server.address}")
    print("Ctrl-C stops everything.", flush=True)
    code = EXIT_OK
    try:
        while not stop["now"]:
            worker_gone = worker.poll() is not None
            server_gone = server.process is None or server.process.poll() is not None
            # Ctrl-C reaches the whole process group: the children may stop on their own
            # signal a moment before ours is handled. That is a requested stop, not a crash.
            if (worker_gone or server_gone) and _signal_pending(stop):
                break
            if worker_gone:
                print(f"the worker exited with code {worker.returncode}", file=sys.stderr)
                code = EXIT_FAILED
                break
            if server_gone:
                print("the dev server exited", file=sys.stderr)
                code = EXIT_FAILED
                break
            time.sleep(0.2)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                worker.kill()
        server.stop()
        print("stopped")
    return code


# ----------------------------------------------------------------------------- entry point


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(
        prog="hitl",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--address", help="Temporal frontend host:port (default: envconfig)")
    p.add_argument("--namespace", help="namespace (default: envconfig, else default)")
    p.add_argument("--profile", help="envconfig profile")
    p.add_argument("--task-queue", default=os.environ.get("HITL_TASK_QUEUE", DEFAULT_TASK_QUEUE))
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    dev = sub.add_parser("dev", help="run the local stack (dev server, UI, worker)")
    dev.add_argument("--agents", action="append", help="module:attr to serve (repeatable)")
    dev.add_argument(
        "--allow",
        action="append",
        metavar="MODULE:ATTR",
        help="what runs may name besides the agents' code (see python -m hitl.worker --allow)",
    )
    dev.add_argument("--port", type=int, default=None)
    dev.add_argument("--ui-port", type=int, default=None)
    dev.add_argument("--state-dir", default=".hitl")

    sub.add_parser("setup", help="register the search attributes on the cluster")

    codec = sub.add_parser(
        "codec-server", help="serve /encode and /decode for the temporal CLI and Web UI"
    )
    codec.add_argument("--host", default="127.0.0.1")
    codec.add_argument("--port", type=int, default=8081)
    codec.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        help="Web UI origin allowed to call it (e.g. http://127.0.0.1:8233)",
    )

    run = sub.add_parser("run", help="start a run of a registered agent")
    run.add_argument("agent")
    run.add_argument("input")
    run.add_argument("--id", help="business workflow id (never started twice)")
    run.add_argument("--wait", action="store_true", help="wait until it pauses or finishes")
    run.add_argument("--timeout", type=float, default=30.0)

    pending = sub.add_parser("pending", help="list pending approvals across runs")
    pending.add_argument("--agent")
    pending.add_argument("--queue", dest="task_queue_filter", help="only this task queue")
    pending.add_argument("--json", action="store_true")
    pending.add_argument("--limit", type=int, default=1000)
    pending.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="seconds to wait for each run's worker to answer (unanswered runs are still listed)",
    )
    pending.add_argument(
        "--runs",
        action="store_true",
        help="one row per paused run, from search attributes only (no per-run query, so it "
        "is fast for large inboxes and works while no worker runs)",
    )

    show = sub.add_parser("show", help="show a run with its pending requests")
    show.add_argument("run")
    show.add_argument("--json", action="store_true")
    show.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the run's worker"
    )

    for name in ("approve", "reject"):
        d = sub.add_parser(name, help=f"{name} a pending call (or --all)")
        d.add_argument("run")
        d.add_argument("call_id", nargs="?")
        d.add_argument("--all", action="store_true", help="every pending call of the run")
        d.add_argument("--always", action="store_true", help="also for later calls of the tool")
        d.add_argument("--as", dest="as_", metavar="NAME", help="approver (default: OS user)")
        d.add_argument("--reason")
        d.add_argument(
            "--timeout",
            type=float,
            default=10.0,
            help="seconds to wait for a worker to take the decision",
        )
        if name == "reject":
            d.add_argument("--message", help="what the model sees instead of the tool output")

    watch = sub.add_parser("watch", help="follow a run's events until it finishes")
    watch.add_argument("run")
    watch.add_argument(
        "--from-offset",
        type=int,
        default=0,
        help="resume after a disconnect: the offset after the last one seen",
    )
    return p


async def _main(args: argparse.Namespace) -> int:
    client = await connect(profile=args.profile, address=args.address, namespace=args.namespace)
    if args.command == "pending":
        return await cmd_pending(client, args)
    if args.command == "show":
        return await cmd_show(client, args)
    if args.command == "approve":
        return await cmd_decide(client, args, "approve")
    if args.command == "reject":
        return await cmd_decide(client, args, "reject")
    if args.command == "run":
        return await cmd_run(client, args)
    if args.command == "watch":
        return await cmd_watch(client, args)
    if args.command == "setup":
        return await cmd_setup(client, args)
    raise AssertionError(args.command)


def _usage(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    parser.error(message)


def hard_exit(code: int) -> NoReturn:
    """Exit without interpreter teardown.

    The Temporal client's Rust threads can outlive the event loop, and CPython's finalization
    then sometimes aborts with `PyGILState_Release` (temporalio/sdk-python#300). Short-lived
    commands flush their output and leave directly.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `hitl` console script."""
    hard_exit(run(argv))


def run(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` and run the command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in ("approve", "reject") and bool(args.call_id) == bool(args.all):
        _usage(parser, f"{args.command} needs a CALL_ID or --all (not both)")
    try:
        if args.command == "dev":
            return cmd_dev(args)
        if args.command == "codec-server":
            return cmd_codec_server(args)
        return asyncio.run(_main(args))
    except Refused as exc:
        print(f"hitl: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except UserError as exc:
        print(f"hitl: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    except RPCError as exc:
        # A server answer no command expected: still one typed line, not a traceback.
        print(f"hitl: the server refused: {exc.message} ({_code(exc)})", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    main()
