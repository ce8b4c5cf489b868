"""Notifications: tell people when a call waits, is reminded, escalates, is decided, expires.

Also when a call becomes uncertain. Notifiers are configured on the worker
(`build_worker(..., notifiers=[...])`, or `HITL_WEBHOOK_URL` for `python -m hitl.worker`) and
run in the `notify` activity, which the run starts and never waits for: a notifier that fails,
hangs or is down never blocks or fails a run. Events carry no tool arguments (they may be
personal data): only what a person needs to find and decide the call.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from hitl._user_code import call_user
from hitl.wire import NotifyInput

__all__ = [
    "CHAT_APPROVE",
    "CHAT_REJECT",
    "CallbackNotifier",
    "Notifier",
    "SlackNotifier",
    "WebhookNotifier",
    "notifiers_from_env",
    "signature_header",
    "verify_webhook",
]


@runtime_checkable
class Notifier(Protocol):
    """Anything with a `name` and `async notify(event)`; raise to report a failure."""

    name: str

    async def notify(self, event: NotifyInput) -> None:
        """Deliver `event`; raise if it could not be delivered."""
        ...


class CallbackNotifier:
    """A Python callable (sync or async) that takes the `NotifyInput`: chat, email, anything."""

    def __init__(
        self, fn: Callable[[NotifyInput], Awaitable[None] | None], name: str | None = None
    ) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", "callback")

    async def notify(self, event: NotifyInput) -> None:
        """Call the callable with `event`."""
        await call_user(self.fn, event, what=f"notifier {self.name!r}")


def signature_header(secret: str, timestamp: str, body: bytes) -> str:
    """The `X-Hitl-Signature` value: `sha256=` + HMAC-SHA256 of `"{timestamp}." + body`."""
    mac = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify_webhook(
    body: bytes,
    timestamp: str,
    signature: str,
    secret: str,
    *,
    tolerance: float = 300.0,
    now: float | None = None,
) -> bool:
    """What a receiver runs on a webhook: the body is ours, unaltered, and recent.

    `timestamp` and `signature` are the `X-Hitl-Timestamp` and `X-Hitl-Signature` headers.
    """
    try:
        sent = float(timestamp)
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - sent) > tolerance:
        return False
    return hmac.compare_digest(signature_header(secret, timestamp, body), signature)


def webhook_host(url: str) -> str:
    """`scheme://host[:port]` of a webhook URL: what may be shown of it (no user, path, query)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:  # IPv6
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}"


class WebhookError(Exception):
    """A webhook was not delivered (after its attempts)."""


class WebhookNotifier:
    """POST each event as JSON to `url`, HMAC-signed, with a timeout and retries.

    Args:
        url: An http(s) URL.
        secret_env: The worker environment variable holding the signing secret (read at send
            time; never stored in history).
        secret: The secret itself (tests; prefer `secret_env`).
        timeout: Seconds per attempt.
        attempts: Tries, with exponential backoff from `backoff` seconds; connection errors,
            timeouts, 408, 429 and 5xx are retried, other 4xx are not.
    """

    def __init__(
        self,
        url: str,
        *,
        secret_env: str | None = None,
        secret: str | None = None,
        timeout: float = 5.0,
        attempts: int = 3,
        backoff: float = 0.5,
        headers: dict[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"a webhook URL is http(s), not {url[:50]!r}")
        self.url = url
        self.secret_env = secret_env
        self.secret = secret
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self.headers = dict(headers or {})
        # Never the path or query: a chat webhook's URL is its secret, and the name is
        # recorded (in the `notify` activity's result, in history) and logged.
        self.name = name or f"webhook {webhook_host(url)}"
        self.last_attempts = 0

    def _secret(self) -> str | None:
        if self.secret_env:
            return os.environ.get(self.secret_env) or None
        return self.secret

    def _post(self, body: bytes, event: str) -> None:
        stamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "hitl-webhook",
            "X-Hitl-Event": event,
            "X-Hitl-Timestamp": stamp,
            **self.headers,
        }
        secret = self._secret()
        if secret:
            headers["X-Hitl-Signature"] = signature_header(secret, stamp, body)
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            resp.read(1024)

    async def notify(self, event: NotifyInput) -> None:
        """POST `event` (retrying as configured); `WebhookError` when it was not delivered."""
        body = json.dumps(
            event.model_dump(mode="json"), sort_keys=True, separators=(",", ":")
        ).encode()
        await self._send(body, event.event)

    async def _send(self, body: bytes, event: str) -> None:
        delay = self.backoff
        for attempt in range(1, self.attempts + 1):
            self.last_attempts = attempt
            try:
                await asyncio.to_thread(self._post, body, event)
                return
            except urllib.error.HTTPError as exc:
                error = f"HTTP {exc.code}"
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    raise WebhookError(f"{error} (not retried)") from None
            except (OSError, TimeoutError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            if attempt < self.attempts:
                await asyncio.sleep(delay)
                delay *= 2
        raise WebhookError(f"{error} after {self.attempts} attempts")


CHAT_APPROVE = "hitl.approve"
"""The `action_id` of a chat note's approve button (the console's `/chat/slack` reads it)."""
CHAT_REJECT = "hitl.reject"
"""The `action_id` of a chat note's reject button."""

_ACTIONS_FOR = ("waiting", "reminder", "escalated")
"""The events whose note offers approve and reject (the call still waits)."""


def chat_value(event: NotifyInput) -> str:
    """What a note's buttons carry: the call as the note shows it (run, call, arguments)."""
    return json.dumps(
        {
            "ns": event.namespace or "",
            "run": event.workflow_id,
            "call": event.call_id,
            "seen": event.arguments_sha256 or "",
        },
        separators=(",", ":"),
    )


def slack_message(event: NotifyInput, console_url: str | None = None) -> dict[str, Any]:
    """A Slack Block Kit message for `event`: what waits, and approve / reject buttons.

    Buttons only while the call waits (and only for a call whose note names the arguments it
    waits with); text is Slack's `plain_text` wherever it comes from a run, so nothing a model
    wrote becomes a link or a mention.
    """
    title = event.title or f"{event.agent_name} wants to run {event.tool_name}"
    what = {
        "waiting": "waits for a decision",
        "reminder": "still waits for a decision",
        "escalated": "was escalated and waits for a decision",
        "decided": "was decided",
        "expired": "expired",
        "uncertain": "is uncertain: its attempt died midway",
    }.get(event.event, event.event)
    lines = [f"{event.tool_name} ({event.agent_name}) {what}", f"run {event.workflow_id}"]
    if event.approvers:
        lines.append("who may decide: " + ", ".join(event.approvers))
    if event.deadline is not None:
        lines.append("due " + event.deadline.strftime("%Y-%m-%d %H:%M UTC"))
    if event.decision is not None:
        who = event.decision.approver or event.decision.source
        lines.append(f"{event.decision.kind} by {who}")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
        {"type": "section", "text": {"type": "plain_text", "text": "\n".join(lines)[:2900]}},
    ]
    buttons: list[dict[str, Any]] = []
    if event.event in _ACTIONS_FOR and event.arguments_sha256:
        value = chat_value(event)
        buttons += [
            {"type": "button", "action_id": CHAT_APPROVE, "style": "primary", "value": value,
             "text": {"type": "plain_text", "text": "Approve"}},
            {"type": "button", "action_id": CHAT_REJECT, "style": "danger", "value": value,
             "text": {"type": "plain_text", "text": "Reject"}},
        ]  # fmt: skip
    if console_url:
        ids = {"ns": event.namespace or "default", "run": event.workflow_id, "call": event.call_id}
        link = console_url.rstrip("/") + "/call?" + urllib.parse.urlencode(ids)
        buttons.append({"type": "button", "action_id": "hitl.open", "url": link,
                        "text": {"type": "plain_text", "text": "Open in the console"}})  # fmt: skip
    if buttons:
        blocks.append({"type": "actions", "elements": buttons})
    return {"text": f"{title} {what}"[:300], "blocks": blocks}


class SlackNotifier(WebhookNotifier):
    """Post each event to a Slack incoming webhook as a message with approve / reject buttons.

    The buttons call the console's `/chat/slack` (the Slack app's interactivity URL), which
    checks Slack's signature, maps the Slack user to an approver, and decides as that person
    (see docs/console.md, "Approvals from chat").

    Args:
        url: The incoming webhook's URL (its path is its secret: it is never recorded).
        console_url: The console's public address, for an "Open in the console" button.
    """

    def __init__(self, url: str, *, console_url: str | None = None, **kw: Any) -> None:
        super().__init__(url, name=kw.pop("name", None) or f"slack {webhook_host(url)}", **kw)
        self.console_url = console_url

    async def notify(self, event: NotifyInput) -> None:
        """POST the event as a Slack message (retrying as configured)."""
        await self._send(json.dumps(slack_message(event, self.console_url)).encode(), event.event)


def notifiers_from_env() -> list[Any]:
    """The notifiers the environment names (none, one or both).

    A `WebhookNotifier` for `HITL_WEBHOOK_URL`, a `SlackNotifier` for `HITL_SLACK_WEBHOOK_URL`
    (with `HITL_CONSOLE_URL` for its console link). The webhook's secret is in the variable
    `HITL_WEBHOOK_SECRET_ENV` names (default `HITL_WEBHOOK_SECRET`).
    """
    found: list[Any] = []
    url = os.environ.get("HITL_WEBHOOK_URL")
    if url:
        secret_env = os.environ.get("HITL_WEBHOOK_SECRET_ENV", "HITL_WEBHOOK_SECRET")
        found.append(WebhookNotifier(url, secret_env=secret_env))
    slack = os.environ.get("HITL_SLACK_WEBHOOK_URL")
    if slack:
        found.append(SlackNotifier(slack, console_url=os.environ.get("HITL_CONSOLE_URL")))
    return found
