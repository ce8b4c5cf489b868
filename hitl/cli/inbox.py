"""`hitl pending`: what waits for people, across runs; and what an inbox believes.

Which runs an inbox lists (`allowed_queues`, `queue_clause`, `left_out`) and when a run's memo
is its own (`memo_confirmed`, `inbox_memo`) are the console's rules too (`hitl.console.data`).
`hitl show` (one run) is `hitl.cli.show`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsRequest
from temporalio.client import (
    Client,
    WorkflowExecution,
)
from temporalio.service import RPCError

from hitl.cli.common import (
    _AGENT_KEY,
    _SINCE_KEY,
    _TOOLS_KEY,
    EXIT_OK,
    Refused,
    _ago,
    _code,
    _Gone,
    _iso,
    _json,
    _literal,
    _path_text,
    _Pollers,
    _query,
    _short,
    _table,
    _Unreadable,
    one_line,
)
from hitl.cli.show import cmd_show as cmd_show  # also here, where `hitl show` used to be
from hitl.wire import (
    DEFAULT_TASK_QUEUE,
    INBOX_MEMO,
    QUERY_STATUS,
    SA_AGENT,
    SA_PENDING_SINCE,
    SA_PENDING_TOOLS,
    SA_STATUS,
    WORKFLOW_TYPE,
    InboxEntry,
    InboxMemo,
    PendingApproval,
    RunStatus,
)

QUEUES_ENV = "HITL_TASK_QUEUES"
"""Comma-separated task queues whose runs an inbox lists (`hitl pending`, `hitl console`)."""


def allowed_queues(given: Sequence[str] | None = None, fallback: str | None = None) -> list[str]:
    """The task queues our workers serve, whose paused runs an inbox lists.

    `given` (`--task-queue`, repeatable) when set, else `HITL_TASK_QUEUES` (comma-separated),
    else `fallback` (the queue `hitl` itself starts runs on), else `DEFAULT_TASK_QUEUE`. Runs
    on any other queue are not listed: nobody vouches for what a workflow there says about
    itself (any worker may poll a queue, and anyone may start a run on one).
    """
    queues = [q.strip() for q in (given or []) if q.strip()]
    if not queues:
        queues = [q.strip() for q in os.environ.get(QUEUES_ENV, "").split(",") if q.strip()]
    if not queues:
        queues = [fallback or DEFAULT_TASK_QUEUE]
    return list(dict.fromkeys(queues))


def unregistered(exc: RPCError) -> bool:
    """Whether a listing was refused because our search attributes are not registered here.

    Anything else (a deadline, a server that is down or busy) is a passing fault, never a
    reason to fall back to asking every run.
    """
    return SA_STATUS in exc.message or "search attribute" in exc.message.lower()


def queue_clause(queues: Sequence[str], *, outside: bool = False) -> str | None:
    """`TaskQueue IN (...)` (or `NOT IN`) over the queues a literal can name; `None`: none can.

    A queue no literal can express (`_literal`) is matched on the client instead.
    """
    literals = [lit for q in queues if (lit := _literal(q)) is not None]
    if not literals:
        return None
    if len(literals) == 1:
        return f"TaskQueue {'!=' if outside else '='} {literals[0]}"
    return f"TaskQueue {'NOT IN' if outside else 'IN'} ({', '.join(literals)})"


PAGE = 1000
"""Runs per visibility page: the most the server returns in one (`visibilityMaxPageSize`)."""


async def list_runs(
    client: Client,
    query: str,
    limit: int,
    keep: Sequence[str] = (SA_AGENT,),
    rpc_timeout: timedelta | None = None,
) -> tuple[list[WorkflowExecution], bool]:
    """The newest-started `limit` runs `query` finds, and whether more match.

    What an inbox reads of each run, for less client CPU than `Client.list_workflows`: that
    decodes every search attribute of every run twice (untyped and typed), 4/5 of a 1,000-run
    reading's client CPU; here only the attributes named in `keep` are decoded (the others are
    dropped from the listed runs). Pages are as large as the server allows, and whether more
    match is asked for with one more run, not one more page.
    """
    found: list[WorkflowExecution] = []
    token, limit = b"", max(limit, 0)
    while True:
        size = min(PAGE, limit - len(found)) or 1  # 1: only whether another run matches
        page = await client.workflow_service.list_workflow_executions(
            ListWorkflowExecutionsRequest(
                namespace=client.namespace, query=query, page_size=size, next_page_token=token
            ),
            retry=True,
            timeout=rpc_timeout,
        )
        if len(found) == limit:
            return found, bool(page.executions)
        for info in page.executions[: limit - len(found)]:
            fields = info.search_attributes.indexed_fields
            for name in [name for name in fields if name not in keep]:
                del fields[name]
            found.append(
                WorkflowExecution._from_raw_info(info, client.namespace, client.data_converter)
            )
        token = page.next_page_token
        if not token:
            return found, False


async def count_runs(
    client: Client, query: str, rpc_timeout: timedelta | None = None
) -> int | None:
    """How many runs `query` finds (`None`: the server could not say, within `rpc_timeout`)."""
    try:
        found = await client.count_workflows(query, rpc_timeout=rpc_timeout)
    except RPCError:
        return None
    return int(found.count)


async def left_out(client: Client, clauses: Sequence[str], queues: Sequence[str]) -> int | None:
    """How many runs the query `clauses` finds on task queues outside `queues` (`None`: unknown).

    One count query, for the note that says so; eventually consistent like every listing.
    """
    outside = queue_clause(queues, outside=True)
    return None if outside is None else await count_runs(client, " AND ".join([*clauses, outside]))


def left_out_note(n: int, queues: Sequence[str], how: str) -> str:
    """The one line saying that `n` paused runs on other task queues were not listed."""
    listed = ", ".join(repr(q) for q in queues)
    return (
        f"{n} paused run(s) on task queues other than {listed} are not listed (nothing "
        f"vouches for runs on queues our workers do not serve): {how}"
    )


async def memo_confirmed(client: Client, w: WorkflowExecution, memo: InboxMemo) -> bool:
    """Whether run `w` wrote its inbox memo itself: it names the first run id of `w`'s chain.

    The server assigns run ids when a run starts, so a starter that writes our memo on a
    workflow cannot know the id to put in it; only the run's own code (`InboxMemo.run`) can.
    Visibility says the first run id (`first_run_id`); where it leaves that empty (the dev
    server does), a memo naming the run's own id is the first run's, which has not continued
    as new, and a continued run's chain is asked of the server (`describe`, no worker).
    """
    if not memo.run:
        return False
    first = w.raw_info.first_run_id
    if first:
        return memo.run == first
    if memo.run == w.run_id:
        return True
    try:
        desc = await client.get_workflow_handle(w.id, run_id=w.run_id).describe(
            rpc_timeout=timedelta(seconds=10)
        )
    except RPCError:
        return False
    return bool(memo.run == desc.raw_description.workflow_execution_info.first_run_id)


@dataclass
class Unconfirmed:
    """A paused run whose memo its run did not write, and which could not be asked."""

    reason: str
    memo: InboxMemo


async def _listed(
    client: Client, query: str, limit: int, timeout: timedelta
) -> list[WorkflowExecution]:
    """`hitl pending`'s runs: the newest-started `limit`, with a note when more match."""
    found, more = await list_runs(
        client, query, limit, (SA_AGENT, SA_PENDING_TOOLS, SA_PENDING_SINCE), timeout
    )
    if more:
        print(
            f"note: more than {limit} paused runs match; these are the newest-started "
            f"{limit} (raise --limit, or narrow with --agent or --queue)",
            file=sys.stderr,
        )
    return found


async def _paused_runs(
    client: Client, args: argparse.Namespace
) -> tuple[list[WorkflowExecution], bool, list[str], list[str]]:
    """Runs waiting for a person (visibility query).

    Also: True when our search attributes are missing (then every running `AgentRun` is
    listed, to be asked one by one), the task queues listed, and the query's clauses without
    the queue's (to count the runs left out).

    Only `AgentRun` workflows on the allowed task queues (`allowed_queues`) are listed, in the
    query itself (so other workflows cannot crowd ours out of `--limit`) and again on the
    client. `--queue Q` lists Q alone: naming a queue is allowing it.
    """
    queues = (
        [args.task_queue_filter]
        if args.task_queue_filter
        else allowed_queues(getattr(args, "task_queues", None), getattr(args, "task_queue", None))
    )
    kind = f"WorkflowType = '{WORKFLOW_TYPE}'"
    clauses = [f"{SA_STATUS} = 'awaiting_approval'", "ExecutionStatus = 'Running'"]
    fallback = ["ExecutionStatus = 'Running'"]
    agent = _literal(args.agent) if args.agent else None
    if agent:
        clauses.append(f"{SA_AGENT} = {agent}")
    clauses.append(kind)
    fallback.append(kind)
    within = queue_clause(queues)
    timeout = timedelta(seconds=args.timeout)

    async def listing(query: list[str]) -> list[WorkflowExecution]:
        text = " AND ".join([*query, within] if within else query)
        return await _listed(client, text, args.limit, timeout)

    degraded = False
    try:
        found = await listing(clauses)
    except RPCError as exc:
        if not unregistered(exc):
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
            found = await listing(fallback)
        except RPCError as exc2:
            raise Refused(f"cannot list runs: {exc2.message} ({_code(exc2)})") from None
    # Exact matches on the client too: a value no literal can express was left out of the query.
    found = [w for w in found if w.workflow_type == WORKFLOW_TYPE and w.task_queue in queues]
    if args.agent and not degraded:
        found = [w for w in found if w.typed_search_attributes.get(_AGENT_KEY) == args.agent]
    return found, degraded, queues, fallback if degraded else clauses


async def _note_left_out(
    client: Client, args: argparse.Namespace, clauses: list[str], queues: list[str]
) -> None:
    """One stderr note when paused runs on other task queues were left out."""
    if args.task_queue_filter:
        return  # one queue was asked for: the others are not news
    n = await left_out(client, clauses, queues)
    if n:
        how = "name each queue your workers serve with --task-queue QUEUE (repeatable) or "
        how += f"{QUEUES_ENV}=a,b"
        print(f"note: {left_out_note(n, queues, how)}", file=sys.stderr)


_Row = tuple[datetime, list[str], dict[str, Any]]
"""(sort key, table cells, `--json` object) of one line of `hitl pending`."""
_FAR = datetime.max.replace(tzinfo=UTC)

WAITS_FOR = {
    "approval": "approval",
    "uncertain": "uncertain: hitl resolve",
    "input": "input: hitl answer",
}
"""The WAITS FOR column of `hitl pending`: what settles the call (approve/reject otherwise)."""


def _unavailable_row(w: WorkflowExecution, why: str, memo: InboxMemo | None = None) -> _Row:
    """A paused run that could not be asked for its calls: what its search attributes say.

    Marked `(unconfirmed)`: nothing the run itself said vouches for it. A memo its run did not
    write (`memo`) is not shown at all, only counted.
    """
    agent = w.typed_search_attributes.get(_AGENT_KEY) or ""
    tools = list(w.typed_search_attributes.get(_TOOLS_KEY) or [])
    since = w.typed_search_attributes.get(_SINCE_KEY)
    cells = [
        one_line(w.id),
        "(unavailable)",
        "?",
        one_line(_path_text([agent] if agent else [], ", ".join(tools) or "?")),
        "(unconfirmed)",
        _ago(since),
    ]
    data: dict[str, Any] = {
        "workflow_id": w.id,
        "agent": agent,
        "call_id": None,
        "tool_name": None,
        "pending_tools": tools,
        "requested_at": _iso(since),
        "waiting_since": _iso(since),
        "path": [agent] if agent else [],
        "task_queue": w.task_queue,
        "unavailable": why,
        "confirmed": False,
        "unconfirmed_memo": memo is not None,
    }
    return (since or _FAR, cells, data)


def _call_row(
    w: WorkflowExecution,
    workflow_id: str,
    agent: str,
    title: str,
    approved: int,
    call: PendingApproval | InboxEntry,
) -> _Row:
    """One line of `hitl pending`: its sort key, table cells and `--json` object."""
    if call.required_approvals > 1 and call.kind == "approval":
        title = f"[{approved}/{call.required_approvals} approved] {title}"
    # A memo entry's time is already the waiting-since time (`InboxEntry.requested_at`).
    since = call.waiting_since if isinstance(call, PendingApproval) else call.requested_at
    cells = [
        one_line(workflow_id),
        one_line(call.call_id),
        WAITS_FOR.get(call.kind, one_line(call.kind)),
        one_line(_path_text(call.path or [call.agent_name], call.tool_name)),
        _short(title),
        _ago(since),
    ]
    data = {
        **call.model_dump(mode="json", exclude={"workflow_id"}),
        "waiting_since": _iso(since),
        # Decisions go to the root run; the call's own (nested) run is named apart.
        "workflow_id": workflow_id,
        "owner_workflow_id": call.workflow_id or workflow_id,
        "agent": agent,
        "task_queue": w.task_queue,
        "unavailable": None,
        "confirmed": True,
    }
    return (since or _FAR, cells, data)


def _pending_rows(w: WorkflowExecution, status: RunStatus) -> list[_Row]:
    """One row per call the run waits on (from its `status` answer)."""
    return [
        _call_row(w, status.workflow_id, status.agent, _title(p), len(p.approvals), p)
        for p in status.pending
    ]


def _title(p: PendingApproval) -> str:
    """The TITLE of a call from its run's `status`: what its memo entry would say."""
    if p.kind == "input" and p.input_request is not None:
        return p.input_request.message  # the question, as `inbox_entry` lists it
    return p.request.title if p.request else f"{p.agent_name} wants to run {p.tool_name}"


async def inbox_memo(w: WorkflowExecution) -> InboxMemo | None:
    """The calls a paused run listed in its memo (`None`: an older run, or unreadable)."""
    if INBOX_MEMO not in w.raw_info.memo.fields:
        return None
    try:
        memo: InboxMemo = await w.memo_value(INBOX_MEMO, type_hint=InboxMemo)
    except Exception:  # written by someone else, or with another key: ask the run instead
        return None
    return memo


def _memo_rows(w: WorkflowExecution, memo: InboxMemo) -> list[_Row]:
    """One row per call a paused run's memo lists (no query, no worker)."""
    agent = w.typed_search_attributes.get(_AGENT_KEY) or ""
    rows = [_call_row(w, w.id, agent, c.title, len(c.approved_by), c) for c in memo.calls]
    if memo.total > len(memo.calls):
        more = memo.total - len(memo.calls)
        print(
            f"note: run {one_line(w.id)} waits on {more} more call(s): hitl show it",
            file=sys.stderr,
        )
    return rows


async def cmd_pending(client: Client, args: argparse.Namespace) -> int:
    """List every pending approval across runs.

    Only `AgentRun` workflows on the task queues our workers serve are listed (`--task-queue`,
    `HITL_TASK_QUEUES`; `_paused_runs`), with one note saying how many paused runs elsewhere
    were left out. A run's calls are read from its inbox memo when the memo names the run's own
    first run id (`memo_confirmed`: its run wrote it), else from its `status` query.

    A run that cannot be asked for its calls (no worker polls its task queue, or none answers
    within `--timeout` seconds) still appears, from its search attributes, marked
    `(unconfirmed)` with the call-level columns unavailable, and one note per reason goes to
    stderr. That is not a failure (exit 0): the listing is complete at the level of runs, and
    `--json` marks such rows `"confirmed": false` with an `unavailable` reason.
    """
    found, degraded, queues, clauses = await _paused_runs(client, args)
    await _note_left_out(client, args, clauses, queues)
    if args.runs:
        return _print_pending_runs(found, args)
    pollers = _Pollers(client)
    semaphore = asyncio.Semaphore(16)
    answers = await asyncio.gather(
        *(_ask(client, w, args.timeout, degraded, pollers, semaphore) for w in found)
    )
    rows = _rows(found, answers, args, degraded)
    if args.json:
        print(_json([data for _, _, data in rows]))
        return EXIT_OK
    if not rows:
        print("no pending approvals")
        return EXIT_OK
    print(
        _table(
            [cells for _, cells, _ in rows],
            ["RUN", "CALL ID", "WAITS FOR", "PATH", "TITLE", "WAITING SINCE"],
        )
    )
    return EXIT_OK


_Answer = RunStatus | InboxMemo | Unconfirmed | str | None
"""What asking a paused run for its calls came to (`_ask`)."""


async def _ask(
    client: Client,
    w: WorkflowExecution,
    timeout: float,
    degraded: bool,
    pollers: _Pollers,
    semaphore: asyncio.Semaphore,
) -> _Answer:
    """The run's calls (its own memo, else its status), or why it could not be asked.

    `None`: the run is gone. A reason (`str`), or `Unconfirmed` when the run carries a memo it
    did not write: it could not be asked.
    """
    memo = None
    if not degraded:
        memo = await inbox_memo(w)
        if memo is not None and await memo_confirmed(client, w, memo):
            return memo
    handle = client.get_workflow_handle(w.id)
    async with semaphore:
        try:
            status: RunStatus = await _query(
                client, handle, QUERY_STATUS, RunStatus, timeout, pollers, w.task_queue
            )
        except _Gone:
            return None
        except _Unreadable as exc:
            return Unconfirmed(exc.reason, memo) if memo is not None else exc.reason
    return status


def _rows(
    found: list[WorkflowExecution],
    answers: Sequence[_Answer],
    args: argparse.Namespace,
    degraded: bool,
) -> list[_Row]:
    """The lines of `hitl pending`, oldest first, from what each run answered.

    One stderr note per reason runs could not be asked, and one for memos their runs did not
    write.
    """
    rows: list[_Row] = []
    unavailable: dict[str, int] = {}
    spoofed = 0
    for w, answer in zip(found, answers, strict=True):
        if answer is None:
            continue
        if isinstance(answer, Unconfirmed):
            spoofed += 1
            unavailable[answer.reason] = unavailable.get(answer.reason, 0) + 1
            rows.append(_unavailable_row(w, answer.reason, answer.memo))
            continue
        if isinstance(answer, str):
            unavailable[answer] = unavailable.get(answer, 0) + 1
            if degraded:
                continue  # without search attributes, nothing says this run is even paused
            rows.append(_unavailable_row(w, answer))
            continue
        if isinstance(answer, InboxMemo):
            rows.extend(_memo_rows(w, answer))
            continue
        if args.agent and answer.agent != args.agent:
            continue
        rows.extend(_pending_rows(w, answer))
    rows.sort(key=lambda r: r[0])
    for why, n in unavailable.items():
        print(
            f"note: {n} run(s) could not be asked for their calls: {one_line(why)}",
            file=sys.stderr,
        )
    if spoofed:
        print(
            f"note: {spoofed} run(s) (unconfirmed) carry an inbox memo their run did not write "
            "(it does not name the run's own id): their calls are not shown until their "
            "worker answers",
            file=sys.stderr,
        )
    return rows


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
    rows = [
        [one_line(w.id), one_line(agent), one_line(", ".join(tools)), _ago(since)]
        for w, agent, tools, since in runs
    ]
    print(_table(rows, ["RUN", "AGENT", "PENDING TOOLS", "WAITING SINCE"]))
    return EXIT_OK
