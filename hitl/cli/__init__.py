"""`hitl`: the operator's console for durable agent runs.

    hitl dev                                   the local stack (dev server, UI, worker)
    hitl setup                                 register our search attributes on a cluster
    hitl doctor [--task-queue Q]               what is wrong with this deployment, and the fixes
    hitl run AGENT "input" [--id ID] [--wait]  start a run
    hitl pending [--agent A] [--json] [--runs] every pending approval, across all runs
    hitl show RUN [--json]                     a run: status, transcript, pending requests
    hitl approve RUN [CALL_ID | --all] [--always] [--as NAME] [--reason TEXT]
                 [--set NAME=VALUE ... | --args-file FILE]
    hitl reject RUN [CALL_ID | --all] [--always] [--message TEXT] [--as NAME]
    hitl extend RUN CALL_ID 2d [--as NAME] [--reason TEXT]
    hitl resolve RUN CALL_ID happened|retry|give-up [--output TEXT | --message TEXT]
    hitl answer RUN CALL_ID [--set NAME=VALUE ... | --decline | --cancel]
                                               answer the question a tool asks (MCP)
    hitl keys new --approver NAME [--groups a,b] [--out FILE]
                                               a key pair for signed decisions
    hitl keys show FILE                        a private key's key id and public key
    hitl watch RUN [--from-offset N]           follow a run until it finishes
    hitl codec-server [--port 8081]            decrypt payloads for the temporal CLI and UI
    hitl console [--port 8090] [--auth link|tokens|header] [--signing-key FILE]
                                               the approval console: a web inbox for people
    hitl console-user NAME --users FILE        add a person to the console's users file

Exit codes: 0 done, 1 refused or failed (the typed reason is printed), 2 usage error.
`pending` exits 0 when some runs could not be asked for their calls (no worker answered within
--timeout): they are listed from their search attributes, and a note on stderr says why.
Connection settings are the `temporal` CLI's (envconfig profile, TEMPORAL_ADDRESS, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from temporalio.service import RPCError

from hitl.cli.audit import cmd_audit
from hitl.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    Refused,
    SafeStream,
    _code,
    one_line,
    parse_span,
)
from hitl.cli.console import add_parsers as add_console_parsers
from hitl.cli.console import cmd_console, cmd_console_user
from hitl.cli.deciding import cmd_answer, cmd_decide, cmd_extend, cmd_resolve
from hitl.cli.doctor import add_parser as add_doctor_parser
from hitl.cli.doctor import cmd_doctor
from hitl.cli.inbox import cmd_pending, cmd_show
from hitl.cli.keys import cmd_keys
from hitl.cli.running import cmd_run, cmd_watch, format_event
from hitl.cli.stack import cmd_codec_server, cmd_dev, cmd_setup
from hitl.client import connect, hard_exit
from hitl.errors import UserError
from hitl.wire import DEFAULT_TASK_QUEUE


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

    dev.add_argument(
        "--console-port", type=int, default=None, help="the approval console's port (0: none)"
    )

    sub.add_parser("setup", help="register the search attributes on the cluster")
    add_doctor_parser(sub)
    add_console_parsers(sub)

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
        else:
            d.add_argument(
                "--set",
                action="append",
                metavar="NAME=VALUE",
                help="edit an argument before approving (VALUE is JSON, else text); repeatable",
            )
            d.add_argument(
                "--args-file", metavar="FILE", help="approve with these arguments (a JSON object)"
            )

    resolve = sub.add_parser("resolve", help="settle an uncertain call (its attempt died)")
    resolve.add_argument("run")
    resolve.add_argument("call_id")
    resolve.add_argument("outcome", choices=["happened", "retry", "give-up"])
    resolve.add_argument("--output", help="happened: the result the model reads")
    resolve.add_argument("--message", help="give-up: the error the model reads")
    resolve.add_argument("--as", dest="as_", metavar="NAME", help="who (default: OS user)")
    resolve.add_argument("--reason")
    resolve.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for a worker to take it"
    )

    answer = sub.add_parser("answer", help="answer the question a tool asks (MCP elicitation)")
    answer.add_argument("run")
    answer.add_argument("call_id")
    answer.add_argument(
        "--set",
        action="append",
        metavar="NAME=VALUE",
        help="a field of the form (VALUE is JSON, else text); repeatable",
    )
    answer.add_argument("--args-file", metavar="FILE", help="the form's content (a JSON object)")
    choice = answer.add_mutually_exclusive_group()
    choice.add_argument("--decline", action="store_true", help="say no to the question")
    choice.add_argument("--cancel", action="store_true", help="dismiss it without a choice")
    answer.add_argument("--as", dest="as_", metavar="NAME", help="who (default: OS user)")
    answer.add_argument("--reason")
    answer.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for a worker to take it"
    )

    keys = sub.add_parser("keys", help="key pairs for signed decisions")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    new_key = keys_sub.add_parser("new", help="create an approver's key pair")
    new_key.add_argument("--approver", required=True)
    new_key.add_argument("--groups", default="", help="comma-separated groups")
    new_key.add_argument("--out", help="private key file (default: ./<approver>.key)")
    show_key = keys_sub.add_parser("show", help="print a private key file's key id and public key")
    show_key.add_argument("file")

    extend = sub.add_parser("extend", help="move a pending call's approval deadline later")
    extend.add_argument("run")
    extend.add_argument("call_id")
    extend.add_argument("span", help="how much later: 2d, 12h, 30m, 45s")
    extend.add_argument("--as", dest="as_", metavar="NAME", help="who (default: OS user)")
    extend.add_argument("--reason")
    extend.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for a worker to take it"
    )

    audit = sub.add_parser(
        "audit", help="every decision and refused attempt, of one run or across runs"
    )
    audit.add_argument("run", nargs="?", help="one run (default: every run within --since)")
    audit.add_argument("--since", default="7d", help="runs started within this span (7d, 12h)")
    audit.add_argument("--agent", help="only runs of this agent")
    audit.add_argument("--csv", action="store_true", help="CSV instead of JSON lines")
    audit.add_argument("--limit", type=int, default=1000, help="at most this many runs")
    audit.add_argument(
        "--worker-log",
        action="append",
        default=[],
        metavar="FILE",
        help="a worker's refused-updates file (python -m hitl.worker --audit-log); repeatable",
    )
    audit.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for each run's worker"
    )

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
    if args.command == "audit":
        return await cmd_audit(client, args)
    if args.command == "resolve":
        return await cmd_resolve(client, args)
    if args.command == "answer":
        return await cmd_answer(client, args)
    if args.command == "extend":
        return await cmd_extend(client, args)
    raise AssertionError(args.command)


def _usage(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    parser.error(message)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `hitl` console script."""
    hard_exit(run(argv))


def run(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` and run the command; returns the exit code.

    Everything the command prints goes through `SafeStream`: control and bidirectional
    characters in what runs hold (anyone may have put them there) are written escaped.
    """
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(out), SafeStream(err)
    try:
        return _run(argv)
    except BrokenPipeError:
        # `hitl show RUN | head`: the reader left; that is not an error of ours.
        sys.stdout = out
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
        return EXIT_OK
    finally:
        sys.stdout, sys.stderr = out, err


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in ("approve", "reject") and bool(args.call_id) == bool(args.all):
        _usage(parser, f"{args.command} needs a CALL_ID or --all (not both)")
    if args.command == "approve" and (args.set or args.args_file) and args.all:
        _usage(parser, "--set and --args-file edit one call: name its CALL_ID, not --all")
    if args.command in ("audit", "extend"):
        try:
            parse_span(args.since if args.command == "audit" else args.span)
        except ValueError as exc:
            _usage(parser, str(exc))
    try:
        if args.command == "dev":
            return cmd_dev(args)
        if args.command == "codec-server":
            return cmd_codec_server(args)
        if args.command == "keys":
            return cmd_keys(args)
        if args.command == "doctor":
            return cmd_doctor(args)
        if args.command == "console":
            if not args.namespaces and args.namespace:
                args.namespaces = [args.namespace]
            return cmd_console(args)
        if args.command == "console-user":
            return cmd_console_user(args)
        return asyncio.run(_main(args))
    except Refused as exc:
        print(f"hitl: {one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except UserError as exc:
        print(f"hitl: {one_line(exc.message)}", file=sys.stderr)
        return EXIT_FAILED
    except RPCError as exc:
        # A server answer no command expected: still one typed line, not a traceback.
        print(f"hitl: the server refused: {one_line(exc.message)} ({_code(exc)})", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Refused",
    "build_parser",
    "format_event",
    "hard_exit",
    "main",
    "run",
]
