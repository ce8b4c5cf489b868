"""Approvals from chat: a Slack button decides a call as the person the console knows.

A `hitl.notify.SlackNotifier` posts each waiting call to a Slack channel with *Approve* and
*Reject* buttons whose value names the call as the note showed it (namespace, run, call, and
the digest of its arguments). A click reaches the console's `POST /chat/slack` (the Slack app's
interactivity URL), which takes it only when:

1. Slack signed it: `X-Slack-Signature` is `v0=` + HMAC-SHA256, under the app's signing secret,
   of `v0:{timestamp}:{body}`, the timestamp is within five minutes, and this exact request was
   not taken before (a replay is refused);
2. the Slack user is mapped to an approver (`--chat-users FILE`: `{"slack:U123": "ann"}`);
3. that person may decide the call by the run's rules, and the call still waits with the
   arguments the note named.

Then the console decides as that person, exactly as from its own pages (signed with its
gateway key when it has one, `client` `console/slack`), and tells Slack the outcome through
the request's `response_url` (only to the hosts allowed, `https://hooks.slack.com/` by
default). Nothing in a click names who decides but Slack's signed user id.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs

from hitl.console.auth import NAME
from hitl.errors import UserError
from hitl.notify import CHAT_APPROVE, CHAT_REJECT

__all__ = ["SlackGateway", "load_chat_users", "slack_signature"]

WINDOW = 300.0
"""Seconds a Slack request's timestamp may differ from now (Slack's own advice)."""
MAX_BODY = 64 * 1024
SLACK_REPLIES = ("https://hooks.slack.com/",)


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    """The `X-Slack-Signature` Slack sends: `v0=` + HMAC-SHA256 of `v0:{timestamp}:{body}`."""
    base = b"v0:" + timestamp.encode("ascii") + b":" + body
    return "v0=" + hmac.new(secret.encode("utf-8"), base, hashlib.sha256).hexdigest()


def load_chat_users(path: str | Path) -> dict[str, str]:
    """`{"slack:U123": "ann"}` from a JSON file (`UserError` naming what is wrong)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"chat users file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f'chat users file {path}: a JSON object of "slack:ID": "name"')
    for key, name in data.items():
        if not (isinstance(key, str) and key.startswith("slack:") and len(key) <= 100):
            raise UserError(f'chat users file {path}: {key!r} is not "slack:<user id>"')
        if not (isinstance(name, str) and NAME.match(name)):
            raise UserError(f"chat users file {path}: {key}: {name!r} is not an approver name")
    return dict(data)


@dataclass(frozen=True)
class Click:
    """One verified button click: who (mapped), which call as the note showed it, and what."""

    person: str
    kind: str
    """`approve` or `reject`."""
    ns: str
    run: str
    call: str
    seen: str
    reply_to: str | None


Decide = Callable[[Click], Awaitable[str]]
"""Decides a click as its person; returns the line to tell Slack."""


@dataclass
class SlackGateway:
    """Verifies Slack's interactivity requests and hands each click to the console to decide."""

    secret: str
    users: dict[str, str]
    reply_hosts: tuple[str, ...] = SLACK_REPLIES
    _seen: dict[str, float] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def verify(self, body: bytes, timestamp: str, signature: str, now: float | None = None) -> str:
        """Why this request is not Slack's, fresh and new (`""`: it is)."""
        now = time.time() if now is None else now
        if len(body) > MAX_BODY:
            return "too large"
        try:
            sent = float(timestamp)
        except ValueError:
            return "no timestamp"
        if abs(now - sent) > WINDOW:
            return "stale timestamp"
        if not hmac.compare_digest(slack_signature(self.secret, timestamp, body), signature):
            return "bad signature"
        self._seen = {s: t for s, t in self._seen.items() if now - t <= 2 * WINDOW}
        if signature in self._seen:
            return "replayed"
        self._seen[signature] = now
        return ""

    def click(self, body: bytes) -> Click | str:
        """The click a verified request makes, or why it makes none."""
        try:
            [raw] = parse_qs(body.decode("utf-8"), strict_parsing=True)["payload"]
            payload = json.loads(raw)
            user = payload["user"]["id"]
            [action] = payload["actions"]
            value = json.loads(action["value"])
            ids = [value[k] for k in ("ns", "run", "call", "seen")]
        except (KeyError, ValueError, TypeError, UnicodeDecodeError):
            return "not a hitl button click"
        if payload.get("type") != "block_actions" or not all(
            isinstance(i, str) and 0 < len(i) <= 1000 for i in [user, *ids]
        ):
            return "not a hitl button click"
        kind = {CHAT_APPROVE: "approve", CHAT_REJECT: "reject"}.get(action.get("action_id"))
        if kind is None:
            return "not a hitl button click"
        person = self.users.get(f"slack:{user}")
        if person is None:
            return f"Slack user {user} is not mapped to an approver: nothing was decided"
        reply = payload.get("response_url")
        ok_reply = isinstance(reply, str) and reply.startswith(self.reply_hosts)
        ns, run, call, seen = ids
        return Click(person, kind, ns, run, call, seen, reply if ok_reply else None)

    def later(self, click: Click, decide: Decide) -> None:
        """Decide `click` after answering Slack (which waits 3 s), then reply with the outcome."""

        async def run() -> None:
            line = await decide(click)
            if click.reply_to is not None:
                await asyncio.to_thread(_reply, click.reply_to, line)

        task = asyncio.get_running_loop().create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


def _reply(url: str, text: str) -> None:
    """Tell Slack the outcome (replacing the note's buttons with it); failures are dropped."""
    body = json.dumps({"replace_original": True, "text": text}).encode()
    req = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            resp.read(1024)
    except OSError:
        pass
