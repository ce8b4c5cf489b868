"""The console's parts without a server: sessions, users, forms, diffs and markdown escaping."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from starlette.datastructures import FormData

from hitl.console.app import _edited, _fields, diff_class, is_diff
from hitl.console.auth import Authenticator, Sessions, add_user, load_users
from hitl.errors import UserError
from hitl.markdown import fence, md_text
from hitl.wire import InputRequest, PendingApproval


def test_sessions_are_signed_and_expire() -> None:
    sessions = Sessions(key=b"k" * 32, seconds=60)
    cookie, session = sessions.issue("ann")
    assert sessions.read(cookie) == session
    data, mac = cookie.rsplit(".", 1)
    forged = Sessions(key=b"x" * 32).issue("ann")[0]
    assert sessions.read(forged) is None, "another key's cookie"
    assert sessions.read(data + "." + "0" * len(mac)) is None
    assert sessions.read("garbage") is None and sessions.read(None) is None
    expired = Sessions(key=b"k" * 32, seconds=-1).issue("ann")[0]
    assert sessions.read(expired) is None
    assert session.expires > time.time()


def test_a_login_link_works_once_and_tokens_are_checked(tmp_path: Path) -> None:
    auth = Authenticator(mode="link", user="ann")
    assert auth.redeem_link("wrong") is None
    assert auth.redeem_link(auth.link_token) == "ann"
    assert auth.redeem_link(auth.link_token) is None, "a used link"
    users = tmp_path / "users.json"
    token = add_user(users, "bob")
    assert token not in users.read_text(), "only the digest is kept"
    assert users.stat().st_mode & 0o077 == 0
    team = Authenticator(mode="tokens", users=load_users(users))
    assert team.check_token("bob", token) == "bob"
    assert team.check_token("bob", token + "x") is None
    assert team.check_token("eve", token) is None
    with pytest.raises(UserError):
        add_user(users, "bad name<script>")
    users.write_text(json.dumps({"x": {"token_sha256": "short"}}))
    with pytest.raises(UserError, match="malformed"):
        load_users(users)


def test_a_trusted_header_names_a_person_only_in_header_mode() -> None:
    proxy = Authenticator(mode="header")
    assert proxy.from_header(" ann@example.com ") == "ann@example.com"
    assert proxy.from_header("ann\nSet-Cookie: x") is None
    assert Authenticator(mode="link").from_header("ann") is None


def test_the_edit_form_follows_the_schema() -> None:
    call = PendingApproval(
        call_id="c",
        tool_name="refund",
        agent_id="a",
        agent_name="A",
        arguments='{"order": 7, "amount": 40.5, "note": "x", "rush": true}',
        turn=1,
    )
    schema = {
        "properties": {
            "order": {"type": "integer"},
            "amount": {"type": "number"},
            "note": {"type": "string", "description": "why"},
            "rush": {"type": "boolean"},
            "tags": {"type": "array"},
        },
        "required": ["order"],
    }
    fields = {f["name"]: f for f in _fields(schema, call)}
    assert fields["order"]["type"] == "integer" and fields["order"]["required"]
    assert fields["tags"]["type"] == "json" and fields["note"]["description"] == "why"
    form = FormData(
        [
            ("type.order", "integer"),
            ("arg.order", "8"),
            ("type.amount", "number"),
            ("arg.amount", "12.5"),
            ("type.note", "string"),
            ("arg.note", "<b>hi</b>"),
            ("type.rush", "boolean"),
            ("type.tags", "json"),
            ("arg.tags", '["a"]'),
        ]
    )
    assert _edited(form) == (
        {"order": 8, "amount": 12.5, "note": "<b>hi</b>", "rush": False, "tags": ["a"]},
        None,
    )
    assert _edited(FormData([("type.order", "integer"), ("arg.order", "8.5")]))[1] == (
        "order must be an integer"
    )
    asked = call.model_copy(
        update={
            "kind": "input",
            "input_request": InputRequest(
                server="s",
                message="Sure?",
                requested_schema={"properties": {"confirm": {"type": "boolean"}}},
                since="2026-11-25T00:00:00Z",
            ),
        }
    )
    assert [f["name"] for f in _fields(None, asked)] == ["confirm"]


def test_diffs_are_recognized_and_classed() -> None:
    assert is_diff("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b", None)
    assert is_diff("anything", "Diff") and not is_diff("To: ann", "Email")
    assert [diff_class(x) for x in ["--- a", "@@ -1 @@", "+b", "-a", " c"]] == [
        "file",
        "hunk",
        "add",
        "del",
        "ctx",
    ]


def test_markdown_text_is_literal() -> None:
    assert md_text("refund $250.00 of the $250.00") == r"refund \$250.00 of the \$250.00"
    assert md_text("# h\n- l\n*b* <i>[a](b)") == r"\# h" + "  \n" + r"\- l" + "  \n" + (
        r"\*b\* \<i\>\[a\](b)"
    )
    assert fence("a ``` b") == ["````", "a ``` b", "````"]


def test_the_login_link_signs_in_once_and_only_redirects_inside_the_console() -> None:
    from starlette.testclient import TestClient

    from hitl.console.app import create_app
    from hitl.console.data import ConsoleData

    auth = Authenticator(mode="link", user="ann")
    app = create_app(ConsoleData({}), auth)
    with TestClient(app, base_url="http://127.0.0.1:8090") as client:
        assert client.get("/", follow_redirects=False).headers["location"] == "/login"
        link = auth.login_link("http://127.0.0.1:8090", "//evil.example/x")
        first = client.get(link, follow_redirects=False)
        assert first.status_code == 303 and first.headers["location"] == "/"
        assert "hitl_console" in first.cookies
        assert "default-src 'none'" in first.headers["content-security-policy"]
        again = TestClient(app, base_url="http://127.0.0.1:8090").get(link)
        assert again.status_code == 403 and "This link was used." in again.text
        # Signed in: a POST without the session's form token is refused.
        assert client.post("/logout", follow_redirects=False).status_code == 403
        page = client.get("/n/nowhere/runs/r/calls/c")
        assert page.status_code == 404 and "does not serve namespace" in page.text


def test_the_codec_server_admits_the_ui_origin_only() -> None:
    from starlette.testclient import TestClient

    from hitl.codec import EncryptionCodec, new_key, parse_keys
    from hitl.codec.server import codec_app

    ui = "http://127.0.0.1:8233"
    app = codec_app(EncryptionCodec(*parse_keys(new_key())), (ui,))
    with TestClient(app) as client:
        allowed = client.options(
            "/encode",
            headers={"Origin": ui, "Access-Control-Request-Method": "POST"},
        )
        assert allowed.headers.get("access-control-allow-origin") == ui
        other = client.options(
            "/encode",
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert "access-control-allow-origin" not in other.headers
        plain = {"payloads": [{"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": "MQ=="}]}
        encoded = client.post("/default/encode", json=plain, headers={"Origin": ui}).json()
        assert encoded["payloads"][0]["data"] != "MQ=="
        decoded = client.post("/decode", json=encoded).json()
        assert decoded == plain
        assert client.post("/decode", content=b"not json").status_code == 400
