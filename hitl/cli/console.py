"""`hitl console` and `hitl console-user`: the approval console and its people."""

from __future__ import annotations

import argparse
import asyncio
import sys

from hitl.cli.common import EXIT_OK


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The console's subcommands."""
    c = sub.add_parser("console", help="the approval console: a web inbox for people")
    c.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback)")
    c.add_argument("--port", type=int, default=8090, help="port (0: any free one)")
    c.add_argument(
        "--namespace",
        dest="namespaces",
        action="append",
        default=[],
        help="a namespace whose runs it serves (repeatable; default the connection's)",
    )
    c.add_argument(
        "--auth",
        choices=["link", "tokens", "header"],
        default="link",
        help="link: a one-time sign-in link (local default); tokens: a users file; "
        "header: a trusted identity-aware proxy's header",
    )
    c.add_argument("--user", help="link: who signs in (default: the OS user)")
    c.add_argument("--users", metavar="FILE", help="tokens: the users file")
    c.add_argument("--header", default="X-Forwarded-User", help="header: the proxy's header")
    c.add_argument("--signing-key", metavar="FILE", help="sign decisions with this gateway key")
    c.add_argument("--secure-cookie", action="store_true", help="served over HTTPS")
    c.add_argument(
        "--max-runs",
        type=int,
        default=1000,
        metavar="N",
        help="paused runs one reading of the inbox lists per namespace (default 1000; the "
        "inbox says when there are more, and searches and filters reach them)",
    )
    c.add_argument(
        "--task-queue",
        dest="task_queues",
        action="append",
        metavar="QUEUE",
        help="a task queue your workers serve (repeatable): runs on other queues are not "
        "listed (default $HITL_TASK_QUEUES, comma-separated, else the global --task-queue)",
    )
    c.add_argument(
        "--approvers",
        metavar="FILE",
        help="the workers' approver directory, for group:NAME approvers (default $HITL_APPROVERS)",
    )
    c.add_argument(
        "--viewers",
        action="append",
        default=[],
        metavar="NAME",
        help="a person (NAME) or group (group:NAME) who sees every call, and decides only "
        "what each call's approvers allow (repeatable)",
    )
    _chat_options(c)
    u = sub.add_parser("console-user", help="add a person to a console users file")
    u.add_argument("name")
    u.add_argument("--users", metavar="FILE", required=True)


def _chat_options(c: argparse.ArgumentParser) -> None:
    """`hitl console`'s options for approvals from Slack (`hitl.console.chat`)."""
    c.add_argument(
        "--chat-users",
        metavar="FILE",
        help='approvals from Slack: a JSON file mapping "slack:USER_ID" to an approver name; '
        "the Slack app's signing secret is read from $HITL_SLACK_SIGNING_SECRET "
        "(see --slack-secret-env)",
    )
    c.add_argument(
        "--slack-secret-env",
        default="HITL_SLACK_SIGNING_SECRET",
        metavar="VAR",
        help="the environment variable holding the Slack app's signing secret",
    )


def cmd_console_user(args: argparse.Namespace) -> int:
    """Add a person (or renew their token); the token is printed once."""
    from hitl.console.auth import add_user

    token = add_user(args.users, args.name)
    print(f"{args.name} may sign in to the console with the token: {token}")
    print("(only its SHA-256 is kept in the users file; give it to them, it is not shown again)")
    return EXIT_OK


def cmd_console(args: argparse.Namespace) -> int:
    """Serve the console until Ctrl-C."""
    from hitl.cli.inbox import allowed_queues
    from hitl.console import ConsoleSettings, start_console

    settings = ConsoleSettings(
        host=args.host,
        port=args.port,
        namespaces=args.namespaces,
        auth=args.auth,
        user=args.user,
        users_file=args.users,
        header=args.header,
        signing_key=args.signing_key,
        secure_cookie=args.secure_cookie,
        address=args.address,
        task_queues=allowed_queues(args.task_queues, args.task_queue),
        approvers=args.approvers,
        viewers=args.viewers,
        chat_users=args.chat_users,
        slack_secret_env=args.slack_secret_env,
        max_runs=args.max_runs,
    )

    async def main() -> None:
        server, auth = await start_console(settings)
        print(f"approval console on {server.url}", flush=True)
        queues = ", ".join(settings.task_queues)
        print(f"listing runs on task queue(s) {queues} (--task-queue)", file=sys.stderr)
        if auth.mode == "link":
            print(f"sign in (once) as {auth.user}: {auth.login_link(server.url)}", flush=True)
        elif auth.mode == "header":
            print(f"trusting the {auth.header} header: serve it only through that proxy")
        await server.wait()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    print("console stopped", file=sys.stderr)
    return EXIT_OK
