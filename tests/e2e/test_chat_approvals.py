"""Approvals from chat, against a local fake Slack: the worker posts a waiting call's note with
Approve / Reject buttons to an incoming webhook; a click, signed as Slack signs it, reaches the
console's `/chat/slack`, which decides as the approver the Slack user is mapped to (signed by
the console's gateway key) and posts the outcome back to the click's `response_url`. Every way
a click can be wrong decides nothing."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client

from hitl import Runner
from hitl.console import ConsoleSettings, start_console
from hitl.console.auth import add_user
from hitl.console.chat import slack_signature
from hitl.notify import CHAT_APPROVE, CHAT_REJECT, SlackNotifier
from hitl.signing import key_id_for, new_key_pair, private_key_pem
from hitl.wire import ApproverDirectory, ApproverEntry, RunOutput, RunStatus
from hitl.worker.devserver import DevServer
from tests.agents import signed_treasury
from tests.helpers import serving, wait_for

SECRET = "slack-signing-secret-for-tests"


class FakeSlack:
    """A local stand-in for Slack: receives incoming-webhook notes and `response_url` replies."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                fake.posts.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def note_for(self, wid: str) -> dict[str, Any] | None:
        for path, body in self.posts:
            if path == "/services/T/B/X" and wid in json.dumps(body):
                return body
        return None

    def replies(self, path: str) -> list[str]:
        return [str(body.get("text")) for p, body in self.posts if p == path]


@pytest.fixture(scope="module")
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack()
    yield fake
    fake.server.shutdown()


@dataclass
class Chat:
    url: str
    task_queue: str
    client: Client


@pytest_asyncio.fixture
async def chat(
    dev_server: DevServer,
    dev_client: Client,
    slack: FakeSlack,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Chat]:
    key, public = new_key_pair()
    (tmp_path / "console.key").write_bytes(private_key_pem(key))
    directory = ApproverDirectory(
        approvers={
            "ann": ApproverEntry(groups=["finance"]),
            "cy": ApproverEntry(groups=[]),
            "console": ApproverEntry(gateway=True, keys={key_id_for(public): public}),
        }
    )
    (tmp_path / "approvers.json").write_text(directory.model_dump_json())
    add_user(tmp_path / "users.json", "ann")
    users = {"slack:U_ANN": "ann", "slack:U_CY": "cy"}
    (tmp_path / "chat.json").write_text(json.dumps(users))
    monkeypatch.setenv("HITL_TEST_SLACK_SECRET", SECRET)
    notifier = SlackNotifier(slack.base + "/services/T/B/X", backoff=0.01)
    async with serving(
        dev_client, signed_treasury, directory=directory, notifiers=[notifier]
    ) as tq:
        server, _ = await start_console(
            ConsoleSettings(
                port=0, address=dev_server.address, auth="tokens",
                users_file=str(tmp_path / "users.json"), task_queues=[tq],
                signing_key=str(tmp_path / "console.key"),
                approvers=str(tmp_path / "approvers.json"),
                chat_users=str(tmp_path / "chat.json"),
                slack_secret_env="HITL_TEST_SLACK_SECRET",
                chat_reply_hosts=[slack.base + "/reply/"],
            )
        )  # fmt: skip
        try:
            yield Chat(server.url, tq, dev_client)
        finally:
            await server.stop()


def click(
    value: str, user: str, reply: str, action: str = CHAT_APPROVE, at: float | None = None
) -> tuple[bytes, dict[str, str]]:
    """A button click as Slack sends it: the form body and its signed headers."""
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower()},
        "actions": [{"action_id": action, "value": value, "type": "button"}],
        "response_url": reply,
    }
    body = urlencode({"payload": json.dumps(payload)}).encode()
    stamp = str(int(time.time() if at is None else at))
    headers = {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": slack_signature(SECRET, stamp, body),
        "Content-Type": "application/x-www-form-urlencoded",
    }
    return body, headers


async def status(chat: Chat, wid: str) -> RunStatus:
    got: RunStatus = await chat.client.get_workflow_handle(wid).query(
        "status", result_type=RunStatus
    )
    return got


async def test_a_slack_click_decides_as_the_mapped_approver_and_nothing_else_does(
    chat: Chat, slack: FakeSlack
) -> None:
    run = await Runner.run(
        signed_treasury, "pay 779", client=chat.client, task_queue=chat.task_queue, serve=False
    )
    wid = run.workflow_id
    await wait_for(lambda: slack.note_for(wid) is not None, what="the waiting call's note")
    note = slack.note_for(wid)
    assert note is not None
    [actions] = [b for b in note["blocks"] if b["type"] == "actions"]
    buttons = {e["action_id"]: e for e in actions["elements"]}
    assert set(buttons) == {CHAT_APPROVE, CHAT_REJECT}
    value = buttons[CHAT_APPROVE]["value"]
    assert "779" not in value, "a button names the call, never its arguments"
    at = chat.url + "/chat/slack"

    async with httpx.AsyncClient() as http:

        async def send(body: bytes, headers: dict[str, str]) -> httpx.Response:
            return await http.post(at, content=body, headers=headers)

        # Not Slack: a wrong signature, an old timestamp.
        body, headers = click(value, "U_ANN", slack.base + "/reply/1")
        forged = dict(headers, **{"X-Slack-Signature": "v0=" + "0" * 64})
        assert (await send(body, forged)).status_code == 401
        old = click(value, "U_ANN", slack.base + "/reply/1", at=time.time() - 3600)
        assert (await send(*old)).status_code == 401
        # Someone Slack knows but the console does not.
        eve = await send(*click(value, "U_EVE", slack.base + "/reply/2"))
        assert eve.status_code == 200 and "not mapped to an approver" in eve.text
        # cy is mapped, and not in finance: refused, told so.
        await send(*click(value, "U_CY", slack.base + "/reply/3"))
        await wait_for(lambda: slack.replies("/reply/3"), what="cy's answer")
        assert slack.replies("/reply/3") == ["cy may not decide this call: nothing was decided"]
        # A button whose value was edited to name other arguments.
        bent = json.dumps(json.loads(value) | {"seen": "0" * 64})
        await send(*click(bent, "U_ANN", slack.base + "/reply/4"))
        await wait_for(lambda: slack.replies("/reply/4"), what="the changed call's answer")
        assert "changed since the note" in slack.replies("/reply/4")[0]
        assert (await status(chat, wid)).decisions == [], "nothing was decided"
        # ann's click: decided as ann, signed by the console's gateway key, told in Slack.
        good = click(value, "U_ANN", slack.base + "/reply/5")
        assert (await send(*good)).status_code == 200
        out = await chat.client.get_workflow_handle(wid, result_type=RunOutput).result()
        [d] = out.decisions
        assert (d.kind, d.approver, d.client, d.verified) == (
            "approve",
            "ann",
            "console/slack",
            True,
        )
        assert out.final_output == "Paid ACME $779"
        await wait_for(lambda: slack.replies("/reply/5"), what="ann's answer")
        assert slack.replies("/reply/5")[0].startswith("Approved by ann")
        # The same request again is a replay; a reply address elsewhere is never written to.
        assert (await send(*good)).status_code == 401
        away = click(value, "U_ANN", slack.base + "/elsewhere")
        await send(*away)
    await wait_for(lambda: len(slack.posts) > 0)
    assert not [p for p, _ in slack.posts if p == "/elsewhere"]
