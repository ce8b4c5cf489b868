"""Approvals from chat without a server: Slack's signature, the click's shape, the note."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

import pytest

from hitl.console.chat import Click, SlackGateway, load_chat_users, slack_signature
from hitl.errors import UserError
from hitl.notify import CHAT_APPROVE, CHAT_REJECT, slack_message
from hitl.wire import NotifyInput

SECRET = "s"
NOW = 1_800_000_000.0
VALUE = json.dumps({"ns": "default", "run": "w", "call": "t1.1", "seen": "a" * 64})


def gateway() -> SlackGateway:
    return SlackGateway(SECRET, {"slack:U1": "ann"}, ("https://hooks.slack.com/",))


def body(**payload: object) -> bytes:
    base: dict[str, object] = {
        "type": "block_actions",
        "user": {"id": "U1"},
        "actions": [{"action_id": CHAT_APPROVE, "value": VALUE}],
        "response_url": "https://hooks.slack.com/actions/1",
    }
    return urlencode({"payload": json.dumps(base | payload)}).encode()


def test_only_a_fresh_request_signed_with_the_apps_secret_is_taken_once() -> None:
    gate, b, stamp = gateway(), body(), str(int(NOW))
    good = slack_signature(SECRET, stamp, b)
    assert gate.verify(b, stamp, slack_signature("other", stamp, b), now=NOW) == "bad signature"
    assert gate.verify(b + b"x", stamp, good, now=NOW) == "bad signature"
    assert gate.verify(b, "soon", good, now=NOW) == "no timestamp"
    assert gate.verify(b, stamp, good, now=NOW + 301) == "stale timestamp"
    assert gate.verify(b, stamp, good, now=NOW) == ""
    assert gate.verify(b, stamp, good, now=NOW + 1) == "replayed"
    huge = b"payload=" + b"x" * 70_000
    assert gate.verify(huge, stamp, slack_signature(SECRET, stamp, huge), now=NOW) == "too large"


def test_a_click_names_one_call_and_its_person_comes_from_the_mapping() -> None:
    gate = gateway()
    got = gate.click(body())
    assert got == Click("ann", "approve", "default", "w", "t1.1", "a" * 64,
                        "https://hooks.slack.com/actions/1")  # fmt: skip
    rejected = gate.click(body(actions=[{"action_id": CHAT_REJECT, "value": VALUE}]))
    assert isinstance(rejected, Click) and rejected.kind == "reject"
    elsewhere = gate.click(body(response_url="https://evil.example/x"))
    assert isinstance(elsewhere, Click) and elsewhere.reply_to is None
    assert "not mapped" in str(gate.click(body(user={"id": "U2"})))
    for bad in (
        body(type="view_submission"),
        body(actions=[{"action_id": "hitl.delete", "value": VALUE}]),
        body(actions=[{"action_id": CHAT_APPROVE, "value": VALUE}] * 2),
        body(actions=[{"action_id": CHAT_APPROVE, "value": "{}"}]),
        body(
            actions=[
                {
                    "action_id": CHAT_APPROVE,
                    "value": json.dumps({"ns": 1, "run": "w", "call": "c", "seen": "s"}),
                }
            ]
        ),
        body(user={"id": ["U1"]}),
        b"payload=%7Bnot-json",
        b"",
        "payload=\xff".encode("latin-1"),
    ):
        assert gate.click(bad) == "not a hitl button click", bad[:80]


def test_the_chat_users_file_is_checked(tmp_path: Path) -> None:
    f = tmp_path / "chat.json"
    f.write_text(json.dumps({"slack:U1": "ann"}))
    assert load_chat_users(f) == {"slack:U1": "ann"}
    for bad in ([], {"U1": "ann"}, {"slack:U1": "ann smith"}, {"slack:U1": 3}):
        f.write_text(json.dumps(bad))
        with pytest.raises(UserError):
            load_chat_users(f)


def test_a_note_offers_buttons_only_while_the_call_waits_and_links_nothing_it_was_told() -> None:
    event = NotifyInput(
        event="waiting", workflow_id="w", run_id="r", call_id="t1.1", tool_name="refund",
        agent_name="Desk", title="Refund <https://evil.example|click> @channel",
        at=datetime(2026, 11, 26, tzinfo=UTC), arguments_sha256="a" * 64, namespace="default",
    )  # fmt: skip
    msg = slack_message(event, "https://console.example")
    texts = [b["text"] for b in msg["blocks"] if "text" in b]
    assert all(t["type"] == "plain_text" for t in texts), "nothing a run wrote is mrkdwn"
    [actions] = [b for b in msg["blocks"] if b["type"] == "actions"]
    ids = [e["action_id"] for e in actions["elements"]]
    assert ids == [CHAT_APPROVE, CHAT_REJECT, "hitl.open"]
    assert (
        actions["elements"][2]["url"] == "https://console.example/call?ns=default&run=w&call=t1.1"
    )
    decided = slack_message(event.model_copy(update={"event": "decided"}))
    assert not [b for b in decided["blocks"] if b["type"] == "actions"]
    unbound = slack_message(event.model_copy(update={"arguments_sha256": None}))
    assert not [b for b in unbound["blocks"] if b["type"] == "actions"]
