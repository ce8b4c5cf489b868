"""Notifications over simulated days (time-skipping server): a webhook receives HMAC-signed
bodies (after retries), a callback hears every moment, and a dead webhook changes nothing."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from hitl import CallbackNotifier, Runner, WebhookNotifier, verify_webhook
from hitl.wire import DecisionInput, NotifyInput, RunOutput
from tests.helpers import Ledger, serving, wait_for
from tests.workflows.test_escalation import DIRECTORY, desk

SECRET = "s3cret-for-tests"


class Hook:
    """A local webhook receiver: fails the first `fail` requests with 500, records the rest."""

    def __init__(self, fail: int = 0) -> None:
        self.fail, self.seen, self.requests = fail, 0, []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.seen += 1
                if hook.seen <= hook.fail:
                    self.send_response(500)
                else:
                    hook.requests.append((dict(self.headers), body))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/hitl"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[str]:
        return [json.loads(body)["event"] for _, body in self.requests]


@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook(fail=2)
    yield h
    h.server.shutdown()


async def test_notifiers_hear_every_moment_and_a_dead_one_changes_nothing(
    ts_env: WorkflowEnvironment, ledger: Ledger, hook: Hook, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HITL_TEST_HOOK_SECRET", SECRET)
    heard: list[NotifyInput] = []
    notifiers = [
        WebhookNotifier(hook.url, secret_env="HITL_TEST_HOOK_SECRET", backoff=0.01),
        WebhookNotifier("http://127.0.0.1:9/nobody-listens", attempts=2, backoff=0.01),
        CallbackNotifier(heard.append, name="chat"),
    ]
    client = ts_env.client
    async with serving(client, desk, directory=DIRECTORY, notifiers=notifiers) as tq:
        result = await Runner.run(desk, "refund", client=client, task_queue=tq, serve=False)
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        call_id = result.interruptions[0].call_id
        await wait_for(lambda: [n.event for n in heard] == ["waiting"], what="the waiting note")
        await ts_env.sleep(timedelta(hours=26))
        await wait_for(lambda: len(heard) == 3, what="the reminder and the escalation")
        await handle.execute_update("approve", DecisionInput(call_id=call_id, approver="lee"))
        out = await handle.result()
        await wait_for(lambda: len(heard) == 4, what="the decision note")
    assert out.final_output == "refunded $1200 on order 5", "the dead webhook changed nothing"
    assert [n.event for n in heard] == ["waiting", "reminder", "escalated", "decided"]
    assert heard[-1].decision is not None and heard[-1].decision.approver == "lee"
    assert heard[2].approvers == ["group:finance", "group:finance-leads"]
    assert hook.events() == ["waiting", "reminder", "escalated", "decided"]
    assert hook.seen == 6, "the first two posts failed with 500 and were retried"
    for headers, body in hook.requests:
        stamp, signature = headers["X-Hitl-Timestamp"], headers["X-Hitl-Signature"]
        assert verify_webhook(body, stamp, signature, SECRET)
        assert not verify_webhook(body + b" ", stamp, signature, SECRET), "altered body"
        assert not verify_webhook(body, stamp, signature, "wrong"), "wrong secret"
        assert not verify_webhook(body, str(int(stamp) - 3600), signature, SECRET), "stale"
        assert b'"amount"' not in body, "no arguments in a notification"
