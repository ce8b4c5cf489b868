"""Notifiers without a server: the webhook's retries, refusals and timeouts; the activity."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from hitl import CallbackNotifier, WebhookNotifier
from hitl.activities.notify import NotifyActivities
from hitl.notify import SlackNotifier, WebhookError, notifiers_from_env
from hitl.wire import NotifyInput

EVENT = NotifyInput(
    event="waiting",
    workflow_id="w",
    run_id="r",
    call_id="c",
    tool_name="refund",
    agent_name="Desk",
    at=datetime(2026, 11, 24, tzinfo=UTC),
)


class Server:
    """Answers every POST with `status`, after `delay` seconds."""

    def __init__(self, status: int, delay: float = 0.0) -> None:
        self.hits = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                server.hits += 1
                if delay:
                    time.sleep(delay)  # a slow receiver, past the client's timeout
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


@pytest.fixture
def refusing() -> Iterator[Server]:
    s = Server(400)
    yield s
    s.http.shutdown()


@pytest.fixture
def slow() -> Iterator[Server]:
    s = Server(204, delay=1.0)
    yield s
    s.http.shutdown()


async def test_a_client_error_is_not_retried(refusing: Server) -> None:
    hook = WebhookNotifier(refusing.url, attempts=3, backoff=0.01)
    with pytest.raises(WebhookError, match="HTTP 400"):
        await hook.notify(EVENT)
    assert refusing.hits == 1


async def test_a_slow_receiver_times_out_and_is_retried(slow: Server) -> None:
    hook = WebhookNotifier(slow.url, attempts=2, backoff=0.01, timeout=0.2)
    with pytest.raises(WebhookError, match="after 2 attempts"):
        await hook.notify(EVENT)
    assert hook.last_attempts == 2


async def test_the_activity_reports_each_notifier_and_never_raises(refusing: Server) -> None:
    heard: list[NotifyInput] = []

    def broken(event: NotifyInput) -> None:
        raise RuntimeError("chat is down")

    acts = NotifyActivities(
        [
            WebhookNotifier(refusing.url, backoff=0.01, name="hook"),
            CallbackNotifier(broken, name="chat"),
            CallbackNotifier(heard.append, name="log"),
        ]
    )
    out = await ActivityEnvironment().run(acts.notify, EVENT)
    assert [(r.notifier, r.delivered) for r in out.results] == [
        ("hook", False),
        ("chat", False),
        ("log", True),
    ]
    assert "chat is down" in (out.results[1].error or "")
    assert heard == [EVENT.model_copy(update={"namespace": "default"})]  # the activity's


def test_notifiers_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HITL_WEBHOOK_URL", raising=False)
    monkeypatch.delenv("HITL_SLACK_WEBHOOK_URL", raising=False)
    assert notifiers_from_env() == []
    monkeypatch.setenv("HITL_WEBHOOK_URL", "https://hooks.example.com/hitl")
    [notifier] = notifiers_from_env()
    assert isinstance(notifier, WebhookNotifier) and notifier.secret_env == "HITL_WEBHOOK_SECRET"
    with pytest.raises(ValueError):
        WebhookNotifier("file:///etc/passwd")
    monkeypatch.setenv("HITL_SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T/B/SECRET")
    [_, slack] = notifiers_from_env()
    assert isinstance(slack, SlackNotifier) and "SECRET" not in slack.name


async def test_a_webhooks_name_never_holds_its_secret_path(refusing: Server) -> None:
    """Chat webhooks carry their secret in the URL's path (or query); the notifier's name is
    recorded in history (the `notify` activity's result) and logged, so it holds only the
    scheme and host."""
    secret = "T000/B000/XXXXsecretXXXX"
    hook = WebhookNotifier(f"https://hooks.example.com:8443/services/{secret}?token=abc")
    assert hook.name == "webhook https://hooks.example.com:8443"
    user = WebhookNotifier(f"https://bot:pa55@hooks.example.com/{secret}")
    assert user.name == "webhook https://hooks.example.com"
    # The failing webhook's own result (what history keeps) says nothing of the path either.
    failing = WebhookNotifier(f"{refusing.url}/{secret}?token=abc", backoff=0.01)
    out = await ActivityEnvironment().run(NotifyActivities([failing]).notify, EVENT)
    [result] = out.results
    assert not result.delivered
    assert secret not in result.model_dump_json() and "token" not in result.model_dump_json()
