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
    hitl verify RUN | --since 7d [--json]      prove every executed call had its decisions
    hitl insights [--since 7d] [--json] [--limit N]
                                               decision counts, time to decide, what waits
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
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeAlias

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
from hitl.cli.insights import DEFAULT_LIMIT, cmd_insights
from hitl.cli.keys import cmd_keys
from hitl.cli.policy import add_parser as add_policy_parser
from hitl.cli.policy import cmd_policy
from hitl.cli.running import cmd_run, cmd_watch, format_event
from hitl.cli.stack import cmd_codec_server, cmd_dev, cmd_setup
from hitl.cli.verify import add_parser as add_verify_parser
from hitl.cli.verify import cmd_verify
from hitl.client import connect, core_logs_to_stderr, hard_exit
from hitl.errors import UserError
from hitl.wire import DEFAULT_TASK_QUEUE

Subcommand: TypeAlias = "tuple[str, str, list[Argument]] | Callable[[Any], None]"
"""A row of `COMMANDS`: (name, help, its arguments), or a module's own `add_parser(sub)`."""
Argument: TypeAlias = "tuple[tuple[str, ...], dict[str, Any]] | list[Argument]"
"""(flags, `add_argument` settings); a list of them is a mutually exclusive group."""


def build_parser() -> argparse.ArgumentParser:
    """The command line: the global options, then the subcommands of `COMMANDS`, in order."""
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
    for command in COMMANDS:
        if callable(command):
            command(sub)
        else:
            name, help, arguments = command
            _add_arguments(sub.add_parser(name, help=help), arguments)
    return p


def _add_arguments(parser: Any, arguments: list[Argument]) -> None:
    for argument in arguments:
        if isinstance(argument, list):
            _add_arguments(parser.add_mutually_exclusive_group(), argument)
        else:
            flags, settings = argument
            parser.add_argument(*flags, **settings)


def _timeout(help: str) -> Argument:
    """`--timeout SECONDS` (10 by default): how long to wait for a worker."""
    return (("--timeout",), {"type": float, "default": 10.0, "help": help})


def _as(help: str = "who (default: OS user)") -> Argument:
    return (("--as",), {"dest": "as_", "metavar": "NAME", "help": help})


def _decision(name: str) -> tuple[str, str, list[Argument]]:
    """`hitl approve` or `hitl reject`: one call (or `--all`), as a person decides it."""
    own: list[Argument] = (
        [(("--message",), {"help": "what the model sees instead of the tool output"})]
        if name == "reject"
        else [
            (
                ("--set",),
                {
                    "action": "append",
                    "metavar": "NAME=VALUE",
                    "help": "edit an argument before approving (VALUE is JSON, else text); "
                    "repeatable",
                },
            ),
            (
                ("--args-file",),
                {"metavar": "FILE", "help": "approve with these arguments (a JSON object)"},
            ),
        ]
    )
    return (
        name,
        f"{name} a pending call (or --all)",
        [
            (("run",), {}),
            (("call_id",), {"nargs": "?"}),
            (("--all",), {"action": "store_true", "help": "every pending call of the run"}),
            (("--always",), {"action": "store_true", "help": "also for later calls of the tool"}),
            _as("approver (default: OS user)"),
            (("--reason",), {}),
            _timeout("seconds to wait for a worker to take the decision"),
            *own,
        ],
    )


def _keys(sub: Any) -> None:
    """`hitl keys new` and `hitl keys show`."""
    keys = sub.add_parser("keys", help="key pairs for signed decisions")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    new_key = keys_sub.add_parser("new", help="create an approver's key pair")
    new_key.add_argument("--approver", required=True)
    new_key.add_argument("--groups", default="", help="comma-separated groups")
    new_key.add_argument("--out", help="private key file (default: ./<approver>.key)")
    show_key = keys_sub.add_parser("show", help="print a private key file's key id and public key")
    show_key.add_argument("file")


COMMANDS: list[Subcommand] = [
    (
        "dev",
        "run the local stack (dev server, UI, worker)",
        [
            (("--agents",), {"action": "append", "help": "module:attr to serve (repeatable)"}),
            (
                ("--allow",),
                {
                    "action": "append",
                    "metavar": "MODULE:ATTR",
                    "help": "what runs may name besides the agents' code (see python -m "
                    "hitl.worker --allow)",
                },
            ),
            (
                ("--policy",),
                {"metavar": "FILE", "help": "the approval policy the worker's runs pin"},
            ),
            (("--port",), {"type": int, "default": None}),
            (("--ui-port",), {"type": int, "default": None}),
            (("--state-dir",), {"default": ".hitl"}),
            (
                ("--console-port",),
                {"type": int, "default": None, "help": "the approval console's port (0: none)"},
            ),
        ],
    ),
    ("setup", "register the search attributes on the cluster", []),
    add_doctor_parser,
    add_verify_parser,
    add_policy_parser,
    add_console_parsers,
    (
        "codec-server",
        "serve /encode and /decode for the temporal CLI and Web UI",
        [
            (("--host",), {"default": "127.0.0.1"}),
            (("--port",), {"type": int, "default": 8081}),
            (
                ("--cors-origin",),
                {
                    "action": "append",
                    "default": [],
                    "help": "Web UI origin allowed to call it (e.g. http://127.0.0.1:8233)",
                },
            ),
        ],
    ),
    (
        "run",
        "start a run of a registered agent",
        [
            (("agent",), {}),
            (("input",), {"help": "what the agent is asked ('-': read it from standard input)"}),
            (("--id",), {"help": "business workflow id (never started twice)"}),
            (("--wait",), {"action": "store_true", "help": "wait until it pauses or finishes"}),
            (("--timeout",), {"type": float, "default": 30.0}),
        ],
    ),
    (
        "pending",
        "list pending approvals across runs",
        [
            (("--agent",), {}),
            (("--queue",), {"dest": "task_queue_filter", "help": "only this task queue"}),
            (
                ("--task-queue",),
                {
                    "dest": "task_queues",
                    "action": "append",
                    "metavar": "QUEUE",
                    "help": "a task queue your workers serve (repeatable): only runs there "
                    "are listed (default $HITL_TASK_QUEUES, comma-separated, else the global "
                    "--task-queue)",
                },
            ),
            (("--json",), {"action": "store_true"}),
            (("--limit",), {"type": int, "default": 1000}),
            _timeout(
                "seconds to wait for each run's worker to answer (unanswered runs are still listed)"
            ),
            (
                ("--runs",),
                {
                    "action": "store_true",
                    "help": "one row per paused run, from search attributes only (no "
                    "per-run query, so it is fast for large inboxes and works while no "
                    "worker runs)",
                },
            ),
        ],
    ),
    (
        "show",
        "show a run with its pending requests",
        [
            (("run",), {}),
            (("--json",), {"action": "store_true"}),
            _timeout("seconds to wait for the run's worker"),
        ],
    ),
    _decision("approve"),
    _decision("reject"),
    (
        "resolve",
        "settle an uncertain call (its attempt died)",
        [
            (("run",), {}),
            (("call_id",), {}),
            (("outcome",), {"choices": ["happened", "retry", "give-up"]}),
            (("--output",), {"help": "happened: the result the model reads"}),
            (("--message",), {"help": "give-up: the error the model reads"}),
            _as(),
            (("--reason",), {}),
            _timeout("seconds to wait for a worker to take it"),
        ],
    ),
    (
        "answer",
        "answer the question a tool asks (MCP elicitation)",
        [
            (("run",), {}),
            (("call_id",), {}),
            (
                ("--set",),
                {
                    "action": "append",
                    "metavar": "NAME=VALUE",
                    "help": "a field of the form (VALUE is JSON, else text); repeatable",
                },
            ),
            (
                ("--args-file",),
                {"metavar": "FILE", "help": "the form's content (a JSON object)"},
            ),
            [
                (("--decline",), {"action": "store_true", "help": "say no to the question"}),
                (
                    ("--cancel",),
                    {"action": "store_true", "help": "dismiss it without a choice"},
                ),
            ],
            _as(),
            (("--reason",), {}),
            _timeout("seconds to wait for a worker to take it"),
        ],
    ),
    _keys,
    (
        "extend",
        "move a pending call's approval deadline later",
        [
            (("run",), {}),
            (("call_id",), {}),
            (("span",), {"help": "how much later: 2d, 12h, 30m, 45s"}),
            _as(),
            (("--reason",), {}),
            _timeout("seconds to wait for a worker to take it"),
        ],
    ),
    (
        "audit",
        "every decision and refused attempt, of one run or across runs",
        [
            (("run",), {"nargs": "?", "help": "one run (default: every run within --since)"}),
            (
                ("--since",),
                {"default": "7d", "help": "runs started within this span (7d, 12h)"},
            ),
            (("--agent",), {"help": "only runs of this agent"}),
            (("--queue",), {"dest": "task_queue_filter", "help": "only runs on this task queue"}),
            (("--csv",), {"action": "store_true", "help": "CSV instead of JSON lines"}),
            (("--limit",), {"type": int, "default": 1000, "help": "at most this many runs"}),
            (
                ("--worker-log",),
                {
                    "action": "append",
                    "default": [],
                    "metavar": "FILE",
                    "help": "a worker's refused-updates file (python -m hitl.worker "
                    "--audit-log); repeatable",
                },
            ),
            _timeout("seconds to wait for each run's worker"),
        ],
    ),
    (
        "insights",
        "decision figures of a window: counts, time to decide, what waits",
        [
            (
                ("--since",),
                {"default": "7d", "help": "runs open at some point of this span (7d, 12h)"},
            ),
            (("--json",), {"action": "store_true", "help": "JSON instead of text"}),
            (
                ("--limit",),
                {
                    "type": int,
                    "default": DEFAULT_LIMIT,
                    "help": "at most this many runs, newest first (now %(default)s)",
                },
            ),
            (
                ("--task-queue",),
                {
                    "action": "append",
                    "dest": "task_queues",
                    "metavar": "QUEUE",
                    "help": "a task queue your workers serve (repeatable; default "
                    "HITL_TASK_QUEUES, else the global --task-queue)",
                },
            ),
            _timeout("seconds to wait for each run's worker"),
        ],
    ),
    (
        "watch",
        "follow a run's events until it finishes",
        [
            (("run",), {}),
            (
                ("--from-offset",),
                {
                    "type": int,
                    "default": 0,
                    "help": "resume after a disconnect: the offset after the last one seen",
                },
            ),
        ],
    ),
]
"""Every subcommand, in the order `hitl --help` lists them."""


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
    if args.command == "insights":
        return await cmd_insights(client, args)
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
    core_logs_to_stderr()  # before any client: standard output is the command's alone
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
    if args.command in ("audit", "extend", "insights"):
        try:
            parse_span(args.span if args.command == "extend" else args.since)
        except ValueError as exc:
            _usage(parser, str(exc))
    if args.command == "insights" and args.limit < 1:
        _usage(parser, "--limit must be at least 1")
    try:
        if args.command == "dev":
            return cmd_dev(args)
        if args.command == "codec-server":
            return cmd_codec_server(args)
        if args.command == "keys":
            return cmd_keys(args)
        if args.command == "doctor":
            return cmd_doctor(args)
        if args.command == "verify":
            return cmd_verify(args)
        if args.command == "policy":
            return cmd_policy(args)
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
