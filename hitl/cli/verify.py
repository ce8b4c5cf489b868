"""`hitl verify RUN` / `hitl verify --since 7d`: prove, from history alone, every executed call.

For each run (its continue-as-new chain and its nested runs), every tool call that executed is
checked against the rules the run pinned when it started: enough distinct authorized approvers,
valid signatures where required, for exactly the arguments that ran, before the deadline (see
`hitl.cli.proof`, and `hitl.cli.history` for what is read and how it is proven). One line per
executed call (`hitl.cli.verify_report`); exit 0 when every one is proven, 1 when any is not, 2
for usage and connection errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from hitl.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, _code, one_line, parse_span
from hitl.cli.history import load_tree, prove_tree
from hitl.cli.verify_report import Report, as_json
from hitl.cli.verify_report import render as render  # also here, where callers find it
from hitl.client import connect
from hitl.errors import UserError
from hitl.signing import load_directory
from hitl.wire import WORKFLOW_TYPE, ApproverDirectory, RunInput


def add_parser(sub: Any) -> None:
    """The `verify` subcommand."""
    p = sub.add_parser(
        "verify", help="prove from history that every executed call had the decisions it needed"
    )
    p.add_argument("run", nargs="?", help="one run (its chain and nested runs)")
    p.add_argument("--since", help="every run started within this span (7d, 12h)")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.add_argument(
        "--approvers",
        metavar="FILE",
        help="check signatures with this approver directory (HITL_APPROVERS' format) instead "
        "of the one each run pinned; pinned keys it lacks are reported",
    )
    p.add_argument("--limit", type=int, default=1000, help="at most this many runs (--since)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds for each server call")


class _Usage(Exception):
    """Bad usage or an unreachable server (exit 2)."""


def cmd_verify(args: argparse.Namespace) -> int:
    """Run `hitl verify` (connects by itself: connection errors exit 2, not 1)."""
    try:
        if bool(args.run) == bool(args.since):
            raise _Usage("verify needs a RUN or --since (not both)")
        if args.since:
            try:
                parse_span(args.since)
            except ValueError as exc:
                raise _Usage(str(exc)) from None
        keys = load_directory(args.approvers) if args.approvers else None
        reports = asyncio.run(_verify(args, keys))
    except _Usage as exc:
        print(f"hitl verify: {one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except UserError as exc:
        print(f"hitl verify: {one_line(exc.message)}", file=sys.stderr)
        return EXIT_USAGE
    except RPCError as exc:
        print(f"hitl verify: {one_line(exc.message)} ({_code(exc)})", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(as_json(reports), ensure_ascii=False, indent=2))
    else:
        for line in render(reports):
            print(line)
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILED


async def _verify(args: argparse.Namespace, keys: ApproverDirectory | None) -> list[Report]:
    client = await connect(profile=args.profile, address=args.address, namespace=args.namespace)
    timeout = timedelta(seconds=args.timeout)
    if args.run:
        roots = [await root_of(client, args.run, timeout)]
    else:
        roots = await roots_since(client, parse_span(args.since), args.limit, timeout)
    return [await verify_run(client, root, keys, timeout) for root in roots]


def fetcher(client: Client, timeout: timedelta | None = None) -> Any:
    """A `hitl.cli.history.Fetch` reading histories through `client` (its codec applies)."""

    async def fetch(workflow_id: str, run_id: str | None) -> tuple[str, WorkflowHistory]:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        try:
            if run_id is None:
                run_id = (await handle.describe(rpc_timeout=timeout)).run_id
                handle = client.get_workflow_handle(workflow_id, run_id=run_id)
            history = await handle.fetch_history(rpc_timeout=timeout)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise LookupError(f"no run {workflow_id!r} ({run_id})") from None
            raise
        return run_id, history

    return fetch


async def verify_run(
    client: Client,
    workflow_id: str,
    keys: ApproverDirectory | None = None,
    timeout: timedelta | None = None,
) -> Report:
    """Read and prove one root run (its chain and nested runs)."""
    try:
        tree = await load_tree(fetcher(client, timeout), workflow_id, client.data_converter)
    except LookupError:
        raise _Usage(f"no run {workflow_id!r} in this namespace") from None
    return prove_tree(tree, keys)


async def root_of(client: Client, workflow_id: str, timeout: timedelta | None = None) -> str:
    """The root run whose decisions cover `workflow_id` (itself, unless it is a nested run)."""
    try:
        _, history = await fetcher(client, timeout)(workflow_id, None)
    except LookupError:
        raise _Usage(f"no run {workflow_id!r} in this namespace") from None
    if not history.events:
        return workflow_id
    started = history.events[0].workflow_execution_started_event_attributes
    if not started.HasField("parent_workflow_execution"):
        return workflow_id
    try:
        [value] = await client.data_converter.decode(started.input.payloads[:1])
        inp = RunInput.model_validate(value)
    except Exception:
        return workflow_id
    return inp.parent.root_workflow_id if inp.parent else workflow_id


async def roots_since(
    client: Client, span: timedelta, limit: int, timeout: timedelta | None = None
) -> list[str]:
    """Root runs of every `AgentRun` (open or closed) started within `span`, oldest first."""
    since = datetime.now(UTC) - span
    query = f"WorkflowType = '{WORKFLOW_TYPE}' AND StartTime >= '{since.isoformat()}'"
    found = [w async for w in client.list_workflows(query, limit=limit, rpc_timeout=timeout)]
    found.sort(key=lambda w: w.start_time or since)
    roots: list[str] = []
    for w in found:
        root = await root_of(client, w.id, timeout) if w.parent_id else w.id
        if root not in roots:
            roots.append(root)
    return roots
