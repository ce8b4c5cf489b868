"""`hitl console`: the approval console, a web inbox for people who do not know Temporal.

Every pending approval across runs (and namespaces), one page per call with its request,
preview (diffs as diffs), arguments, deadline, approvals so far and the run's recent transcript,
buttons labelled with the request's own labels, rejection with a message for the model,
edit-then-approve with the tool's schema as a form, answers to tools' questions, deadline
extensions, and each run's audit. What a decision came to is what the run recorded, in words;
a refusal is its typed reason, never a stack trace.

The console is the approval gateway: it knows who the person is (`hitl.console.auth`) and, with
a signing key (`--signing-key`, listed as a gateway in the workers' approver directory), signs
each decision for them, so runs that require signed decisions accept only what came through it.
It shows a call only to the people who may decide it (its approver list, with groups from the
workers' approver directory, `--approvers`) and to viewers (`--viewers`), and lists only our
runs: `AgentRun` workflows on the task queues our workers serve (`--task-queue`), confirmed
against the run itself. Pages name runs and calls in their query strings, never in their paths
(`hitl.console.urls`). It listens on loopback by default. Needs the `console` extra.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass, field
from typing import Any

from hitl.console.auth import Authenticator, AuthMode, load_users

__all__ = ["ConsoleSettings", "start_console"]


@dataclass
class ConsoleSettings:
    """How a console runs.

    Attributes:
        host: The address to listen on (loopback by default; behind a proxy for a team).
        port: The port (0: any free one).
        namespaces: Namespaces whose runs it serves (the first is the default).
        auth: `link`, `tokens` or `header` (see `hitl.console.auth`).
        user: `link` mode: who the console is for (default: the OS user).
        users_file: `tokens` mode: the users file.
        header: `header` mode: the header the identity-aware proxy sets.
        signing_key: A PEM private key file; the console signs every decision with it.
        secure_cookie: Mark the session cookie `Secure` (when served over HTTPS).
        address: The Temporal address (default: the envconfig / `TEMPORAL_ADDRESS`).
        task_queues: The task queues our workers serve: runs on other queues are not listed
            (default `HITL_TASK_QUEUES`, comma-separated, else `HITL_TASK_QUEUE`, else `hitl`).
        approvers: The approver directory file the workers use, to fill `group:NAME` entries
            of approver lists (default `HITL_APPROVERS`; none: only names match).
        viewers: People (`NAME`) and groups (`group:NAME`) who see every call; they decide
            only what the call's approver list allows.
        chat_users: Approvals from Slack: a JSON file mapping `slack:USER_ID` to an approver
            name (`hitl.console.chat`); none: `/chat/slack` is off.
        slack_secret_env: The environment variable holding the Slack app's signing secret.
        chat_reply_hosts: Where outcomes may be posted back (a Slack request's
            `response_url` must start with one; default `https://hooks.slack.com/`).
        metrics_token_env: The environment variable holding the bearer token `/metrics`
            answers (unset or empty: `/metrics` is off).
        max_runs: Paused runs one reading of the inbox lists per namespace (the inbox says
            when there are more).
    """

    host: str = "127.0.0.1"
    port: int = 8090
    namespaces: list[str] = field(default_factory=list)
    auth: AuthMode = "link"
    user: str | None = None
    users_file: str | None = None
    header: str = "X-Forwarded-User"
    signing_key: str | None = None
    secure_cookie: bool = False
    address: str | None = None
    task_queues: list[str] = field(default_factory=list)
    approvers: str | None = None
    viewers: list[str] = field(default_factory=list)
    chat_users: str | None = None
    slack_secret_env: str = "HITL_SLACK_SIGNING_SECRET"
    chat_reply_hosts: list[str] = field(default_factory=lambda: ["https://hooks.slack.com/"])
    metrics_token_env: str = "HITL_CONSOLE_METRICS_TOKEN"
    max_runs: int = 1000


async def start_console(settings: ConsoleSettings) -> tuple[Any, Authenticator]:
    """Connect, build the app and serve it on the running loop: the server and the authenticator.

    The server is a `hitl.web.LoopServer` (`url`, `wait()`, `stop()`); in `link` mode,
    `auth.login_link(server.url)` is the one-time sign-in link, and the sign-in page asks for new
    ones (printed with `auth.announce`, by default to standard output).
    """
    from hitl.web import LoopServer, require_web

    require_web()
    from hitl.cli.inbox import allowed_queues
    from hitl.client import connect
    from hitl.console.app import create_app
    from hitl.console.data import ConsoleData
    from hitl.console.rules import Rules
    from hitl.signing import (
        directory_from_env,
        key_id_for,
        load_directory,
        load_private_key,
        public_key_b64,
    )

    namespaces = settings.namespaces or [""]
    clients = {}
    for ns in namespaces:
        client = await connect(address=settings.address, namespace=ns or None)
        clients[client.namespace] = client
    signing = None
    if settings.signing_key:
        key = load_private_key(settings.signing_key)
        signing = (key_id_for(public_key_b64(key)), key)
    auth = Authenticator(mode=settings.auth, header=settings.header)
    if settings.auth == "link":
        auth.user = settings.user or getpass.getuser()
    elif settings.auth == "tokens":
        if not settings.users_file:
            from hitl.errors import UserError

            raise UserError("--auth tokens needs --users FILE (add people with hitl console-user)")
        auth.users = load_users(settings.users_file)
    directory = load_directory(settings.approvers) if settings.approvers else directory_from_env()
    rules = Rules.of(directory, settings.viewers)
    queues = allowed_queues(settings.task_queues, os.environ.get("HITL_TASK_QUEUE"))
    data = ConsoleData(clients, signing, limit=settings.max_runs, task_queues=queues)
    chat = _chat_gateway(settings) if settings.chat_users else None
    app = create_app(
        data,
        auth,
        secure_cookie=settings.secure_cookie,
        rules=rules,
        chat=chat,
        metrics_token=os.environ.get(settings.metrics_token_env) or None,
    )
    server = LoopServer(app, settings.host, settings.port)
    auth.base_url = server.url
    return server, auth


def _chat_gateway(settings: ConsoleSettings) -> Any:
    """Approvals from Slack (`hitl.console.chat`): the app's signing secret and the users file."""
    from hitl.console.chat import SlackGateway, load_chat_users
    from hitl.errors import UserError

    assert settings.chat_users is not None
    secret = os.environ.get(settings.slack_secret_env)
    if not secret:
        raise UserError(
            f"--chat-users needs the Slack app's signing secret in ${settings.slack_secret_env}"
        )
    users = load_chat_users(settings.chat_users)
    return SlackGateway(secret, users, tuple(settings.chat_reply_hosts))
