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
    "CallbackNotifier",
    "Notifier",
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
        delay = self.backoff
        for attempt in range(1, self.attempts + 1):
            self.last_attempts = attempt
            try:
                await asyncio.to_thread(self._post, body, event.event)
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


def notifiers_from_env() -> list[Any]:
    """A `WebhookNotifier` for `HITL_WEBHOOK_URL`, or none.

    Its secret is in the variable `HITL_WEBHOOK_SECRET_ENV` names (default
    `HITL_WEBHOOK_SECRET`).
    """
    url = os.environ.get("HITL_WEBHOOK_URL")
    if not url:
        return []
    secret_env = os.environ.get("HITL_WEBHOOK_SECRET_ENV", "HITL_WEBHOOK_SECRET")
    return [WebhookNotifier(url, secret_env=secret_env)]
