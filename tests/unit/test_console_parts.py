"""The console's parts without a server: sessions, users, forms, diffs and markdown escaping."""

from __future__ import annotations

import json
import re
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from starlette.datastructures import FormData

from hitl.console.app import diff_class, is_diff
from hitl.console.auth import Authenticator, Sessions, add_user, load_users
from hitl.console.forms import edited_arguments, form_fields
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
    fields = {f["name"]: f for f in form_fields(schema, call)}
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
    assert edited_arguments(form) == (
        {"order": 8, "amount": 12.5, "note": "<b>hi</b>", "rush": False, "tags": ["a"]},
        None,
    )
    assert edited_arguments(FormData([("type.order", "integer"), ("arg.order", "8.5")]))[1] == (
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
    assert [f["name"] for f in form_fields(None, asked)] == ["confirm"]


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
        assert again.status_code == 403 and "This link was used or replaced" in again.text
        # Signed in: a POST without the session's form token is refused.
        assert client.post("/logout", follow_redirects=False).status_code == 403
        page = client.get("/call?ns=nowhere&run=r&call=c")
        assert page.status_code == 404 and "Nothing to show" in page.text
        assert "nowhere" not in page.text, "the reason is for viewers only"


def test_a_signed_out_person_asks_for_a_new_link_and_comes_back_where_they_were() -> None:
    """Sign-in by link once worked once per console process: after signing out, or in a second
    browser, the only way back was a restart."""
    from starlette.testclient import TestClient

    from hitl.console.app import create_app
    from hitl.console.data import ConsoleData

    printed: list[str] = []
    base = "http://127.0.0.1:8090"
    auth = Authenticator(mode="link", user="ann", base_url=base, announce=printed.append)
    app = create_app(ConsoleData({}), auth)
    first = auth.login_link(base)
    with TestClient(app, base_url=base) as client:
        assert client.get(first, follow_redirects=False).status_code == 303
        # Elsewhere (a second browser, or after signing out): the page asks for a new link.
        other = TestClient(app, base_url=base)
        page = other.get("/audit?ns=default&run=r", follow_redirects=False)
        assert page.headers["location"] == "/login?next=%2Faudit%3Fns%3Ddefault%26run%3Dr"
        form = {"action": "new-link", "next": "/audit?ns=default&run=r"}
        # A request naming another host never gets a link pointing there.
        asked = other.post("/login", data=form, headers={"host": "evil.example"})
        assert asked.status_code == 200 and "A new sign-in link was printed" in asked.text
        [line] = printed
        link = line.split(": ", 1)[1]
        assert link.startswith(base + "/login?token=") and "evil" not in link
        assert "A link was printed a moment ago" in other.post("/login", data=form).text
        assert len(printed) == 1, "at most one new link per few seconds"
        assert other.get(first).status_code == 403, "the old link no longer works"
        back = other.get(link, follow_redirects=False)
        assert back.headers["location"] == "/audit?ns=default&run=r"
        # htmx polling without a session takes the whole tab to sign in, never a fragment.
        gone = TestClient(app, base_url=base).get(
            "/inbox/rows", headers={"HX-Request": "true", "HX-Current-URL": base + "/?q=ada"}
        )
        assert gone.headers["hx-redirect"] == "/login?next=%2F%3Fq%3Dada" and gone.text == ""
        # A decision posted after the session ended: nothing decided, on to the call after.
        late = TestClient(app, base_url=base).post(
            "/decide?ns=default&run=r&call=c", data={"action": "approve", "reason": "ok"}
        )
        assert late.status_code == 401 and "nothing was decided" in late.text
        assert 'value="/call?ns=default&amp;run=r&amp;call=c"' in late.text


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


# ----------------------------------------------------------------------------- identifiers

HOSTILE_IDS = [
    "plain",
    "a/b",
    "VICTIM/calls/t1.1/decide?x",
    "x?run=other&call=t9.9",
    "frag#ment",
    "per%2Fcent%",
    "..",
    "../../audit",
    "sp ace+plus",
    "ünïcødé/😀",
    "t2.1/t1.1",
    "'\"<>&",
    "x" * 255,
    "/" * 255,
]


@pytest.mark.parametrize("value", HOSTILE_IDS, ids=range(len(HOSTILE_IDS)))
def test_console_addresses_carry_any_id_whole(value: str) -> None:
    from starlette.datastructures import URL, QueryParams

    from hitl.console.urls import audit_url, call_url, decide_url, ids_of

    for url, names, given in [
        (call_url(value, value, value), ("ns", "run", "call"), [value] * 3),
        (decide_url("default", value, "t1.1"), ("ns", "run", "call"), ["default", value, "t1.1"]),
        (call_url("default", "run", value), ("ns", "run", "call"), ["default", "run", value]),
        (audit_url("default", value), ("ns", "run"), ["default", value]),
    ]:
        path, _, query = url.partition("?")
        assert path in ("/call", "/decide", "/audit"), "ids never reach the path"
        assert not any(c in query for c in "/?# "), query
        assert re.fullmatch(r"([^%]|%[0-9A-F]{2})*", query), "every % starts an escape"
        assert ids_of(url, names) == given
        # As Starlette reads it (the console's own parsing): the same values.
        parsed = QueryParams(URL("http://127.0.0.1:8090" + url).query)
        assert [parsed.getlist(n) for n in names] == [[g] for g in given]


def test_an_address_naming_a_run_twice_names_none() -> None:
    from hitl.console.urls import call_url, ids_of

    url = call_url("default", "a", "t1.1") + "&run=b"
    assert ids_of(url, ("ns", "run", "call")) is None
    assert ids_of("/call?ns=default&call=t1.1", ("ns", "run", "call")) is None


# ----------------------------------------------------------------------------- who sees what


def test_calls_are_seen_by_their_approvers_and_viewers() -> None:
    from hitl.console.rules import Rules
    from hitl.wire import ApproverDirectory, ApproverEntry

    directory = ApproverDirectory(
        approvers={
            "ann": ApproverEntry(groups=["finance"]),
            "vic": ApproverEntry(groups=["audit"]),
        }
    )
    rules = Rules.of(directory, ["group:audit", "olga", " "])
    finance = ["group:finance"]
    assert rules.may_decide("ann", finance) and rules.may_see("ann", finance)
    assert not rules.may_decide("cy", finance) and not rules.may_see("cy", finance)
    assert rules.may_decide("cy", []), "an empty list means anyone"
    assert rules.may_decide("cy", ["cy"]) and not rules.may_decide("cy", ["group:cy"])
    assert rules.may_see("vic", finance) and not rules.may_decide("vic", finance)
    assert rules.may_see("olga", finance) and not rules.may_decide("olga", finance)
    assert not Rules().may_see("ann", finance), "without the directory, groups match nobody"
    assert not rules.is_viewer(""), "a blank viewer entry names nobody"


def test_a_ticket_is_for_one_person_and_one_call_as_seen() -> None:
    sessions = Sessions(key=b"k" * 32, seconds=60)
    ticket = sessions.ticket("ann", "default", "run-1", "t1.1", "abc", "0")
    assert sessions.check(ticket, "ann", "default", "run-1", "t1.1", "abc", "0")
    assert not sessions.check(ticket, "bob", "default", "run-1", "t1.1", "abc", "0")
    assert not sessions.check(ticket, "ann", "default", "run-2", "t1.1", "abc", "0")
    assert not sessions.check(ticket, "ann", "default", "run-1", "t1.1", "abd", "0")
    assert not sessions.check(ticket, "ann", "default", "run-1", "t1.1", "abc", "1")
    assert not sessions.check(ticket + "0", "ann", "default", "run-1", "t1.1", "abc", "0")
    assert not sessions.check("", "ann") and not sessions.check("x.y", "ann")
    old = Sessions(key=b"k" * 32, seconds=-1).ticket("ann", "x")
    assert not sessions.check(old, "ann", "x"), "expired"
    other = Sessions(key=b"z" * 32, seconds=60).ticket("ann", "x")
    assert not sessions.check(other, "ann", "x"), "another console's"
    cookie, _ = sessions.issue("ann")
    assert not sessions.check(cookie, "ann"), "a cookie is no ticket"


# ----------------------------------------------------------------------------- the inbox


def test_the_inbox_lists_the_configured_task_queues(monkeypatch: pytest.MonkeyPatch) -> None:
    from hitl.cli.inbox import QUEUES_ENV, allowed_queues, queue_clause

    monkeypatch.delenv(QUEUES_ENV, raising=False)
    assert allowed_queues() == ["hitl"]
    assert allowed_queues(None, "mine") == ["mine"]
    monkeypatch.setenv(QUEUES_ENV, " a, b ,,a")
    assert allowed_queues(None, "mine") == ["a", "b"]
    assert allowed_queues(["c", "c", " "], "mine") == ["c"]
    assert queue_clause(["a"]) == "TaskQueue = 'a'"
    assert queue_clause(["a", "o'q"], outside=True) == "TaskQueue NOT IN ('a', 'o\\'q')"
    assert queue_clause(['say "hi"']) is None, "matched on the client instead"


async def test_a_memo_counts_only_when_it_names_its_own_run() -> None:
    from types import SimpleNamespace

    from hitl.cli.inbox import memo_confirmed
    from hitl.wire import InboxMemo

    described: list[str] = []

    class Handle:
        def __init__(self, first: str) -> None:
            self.first = first

        async def describe(self, **_: object) -> object:
            described.append(self.first)
            info = SimpleNamespace(first_run_id=self.first)
            return SimpleNamespace(raw_description=SimpleNamespace(workflow_execution_info=info))

    def run(run_id: str, first_in_visibility: str, first_described: str = "") -> object:
        raw = SimpleNamespace(first_run_id=first_in_visibility)
        client = SimpleNamespace(get_workflow_handle=lambda *a, **k: Handle(first_described))
        return client, SimpleNamespace(id="w", run_id=run_id, raw_info=raw)

    async def confirmed(memo_run: str, *args: str) -> bool:
        client, w = run(*args)
        return await memo_confirmed(client, w, InboxMemo(run=memo_run))  # type: ignore[arg-type]

    assert not await confirmed("", "r1", "r1"), "a memo naming no run"
    assert await confirmed("r1", "r2", "r1"), "visibility's first run id"
    assert not await confirmed("r2", "r2", "r1"), "visibility says another first run"
    assert await confirmed("r1", "r1", "") and described == [], "a first run: no call"
    assert await confirmed("r1", "r2", "", "r1"), "a continued run: the server says"
    assert not await confirmed("spoofed", "r2", "", "r1")


class _Forms(HTMLParser):
    """The forms of a page: (action, {name: value}) of their inputs; and its links."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, dict[str, str]]] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append((a.get("action", ""), {}))
        elif tag == "input" and self.forms and "name" in a:
            self.forms[-1][1][a["name"]] = a.get("value", "")
        elif tag == "a":
            self.links.append(a.get("href", ""))


@pytest.mark.parametrize("wid", ["VICTIM/calls/t1.1/decide?x", "a&run=b#c", "ü/../%2F"])
def test_a_call_page_names_its_call_whole_and_its_post_must_match(wid: str) -> None:
    from datetime import UTC, datetime

    from starlette.testclient import TestClient

    from hitl.console.app import create_app
    from hitl.console.data import ConsoleData, Inbox, Outcome, Row
    from hitl.console.urls import call_url, ids_of
    from hitl.wire import RunSnapshot, RunStatus
    from hitl.wire.runs import text_digest

    cid = "t2.1/t1.1"
    call = PendingApproval(
        call_id=cid, tool_name="pay", agent_id="A", agent_name="A", turn=1,
        arguments='{"amount": 5}', arguments_sha256=text_digest('{"amount": 5}'), round=3,
        requested_at=datetime.now(UTC),
    )  # fmt: skip
    snap = RunSnapshot(
        status=RunStatus(workflow_id=wid, run_id="r", phase="awaiting_approval", agent="A",
                         pending=[call]),
        input_items=[], new_items=[],
    )  # fmt: skip
    sent: list[tuple[tuple[object, ...], dict[str, object]]] = []

    class Canned(ConsoleData):
        async def inbox(self) -> Inbox:
            return Inbox(rows=[Row.of_pending("default", wid, "A", "hitl", call)], read_at=1e12)

        async def snapshot(self, namespace: str, workflow_id: str) -> RunSnapshot:
            assert (namespace, workflow_id) == ("default", wid)
            return snap

        async def decide(self, *args: object, **kw: object) -> Outcome:  # type: ignore[override]
            sent.append((args, kw))
            return Outcome(True, "Done")

    auth = Authenticator(mode="link", user="ann")
    app = create_app(Canned({"default": None}), auth)  # type: ignore[dict-item]
    with TestClient(app, base_url="http://127.0.0.1:8090") as client:
        client.get(auth.login_link("http://127.0.0.1:8090"))
        inbox = _Forms()
        inbox.feed(client.get("/").text)
        assert call_url("default", wid, cid) in inbox.links
        page = client.get(call_url("default", wid, cid))
        assert page.status_code == 200, page.text
        parsed = _Forms()
        parsed.feed(page.text)
        decides = [(action, fields) for action, fields in parsed.forms if "ticket" in fields]
        assert decides, "the approve and reject forms"
        for action, fields in decides:
            assert ids_of(action, ("ns", "run", "call")) == ["default", wid, cid]
            assert (fields["ns"], fields["run"], fields["call"]) == ("default", wid, cid)
            assert (fields["seen"], fields["round"]) == (call.arguments_sha256, "3")
        action, fields = decides[0]
        # The same form posted to another call's address, or naming another run: refused.
        other = call_url("default", "VICTIM", "t1.1").replace("/call", "/decide")
        assert client.post(other, data=fields | {"action": "approve"}).status_code == 400
        renamed = fields | {"run": "VICTIM", "action": "approve"}
        assert client.post(action, data=renamed).status_code == 400
        assert sent == []
        done = client.post(action, data=fields | {"action": "approve", "approver": "bob"})
        assert done.status_code == 200, done.text
    [(args, kw)] = sent
    assert args == ("default", wid, cid, "ann", "approve")
    assert kw["seen_sha256"] == call.arguments_sha256


async def test_answers_and_extensions_are_bound_and_signed_for_the_person() -> None:
    """An answer and an extension through the console name the arguments seen and the round,
    and carry the gateway's signature over exactly that, which the run's own check accepts for
    the signed-in person (approvals: tests/e2e/test_console_signing.py)."""
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from hitl.console.data import ConsoleData
    from hitl.signing import key_id_for, new_key_pair, verify_decision
    from hitl.wire import ApproverDirectory, ApproverEntry, Extension, InputAnswer

    key, public = new_key_pair()
    kid = key_id_for(public)
    directory = ApproverDirectory(
        approvers={"console": ApproverEntry(gateway=True, keys={kid: public})}
    )
    sent: list[tuple[str, object]] = []
    now = datetime.now(UTC)

    class Handle:
        async def execute_update(self, name: str, payload: object, **_: object) -> object:
            sent.append((name, payload))
            if name == "extend":
                return Extension(
                    call_id="t1.1", seconds=3600, extended_at=now, previous=now, deadline=now
                )
            if name == "answer":
                return InputAnswer.model_construct(call_id="t1.1", action="accept")
            raise AssertionError(name)

    client = SimpleNamespace(get_workflow_handle=lambda *a, **k: Handle())
    data = ConsoleData({"default": client}, signing=(kid, key))  # type: ignore[dict-item]
    seen = "ab" * 32
    extended = await data.extend(
        "default", "run/1?x", "t1.1", "ann", 3600, seen_sha256=seen, round=4
    )
    answered = await data.answer(
        "default", "run/1?x", "t1.1", "ann", "accept", {"ok": True}, seen_sha256=seen, round=5
    )
    assert extended.ok and answered.ok
    for name, payload in sent:
        assert getattr(payload, "seen_sha256") == seen, name  # noqa: B009
        assert getattr(payload, "client") == "console"  # noqa: B009
        who = verify_decision(directory, payload, workflow_id="run/1?x", now=now)  # type: ignore[arg-type]
        assert who == "ann", name
    assert [getattr(p, "round") for _, p in sent] == [4, 5]  # noqa: B009


def test_a_runs_audit_lists_only_the_calls_a_person_may_see() -> None:
    """A run with a decided finance call (ann approved it) and a pending call only cy may
    decide: cy's audit lists her call's refusals and not ann's decision; ann's lists her own
    decision; a viewer's lists everything; dan, who may see none of it, gets the not-found
    page, the same as for a run that does not exist."""
    from datetime import UTC, datetime

    from starlette.testclient import TestClient

    from hitl.console.app import create_app
    from hitl.console.auth import COOKIE
    from hitl.console.data import ConsoleData
    from hitl.console.rules import Rules
    from hitl.console.urls import audit_url
    from hitl.wire import DecisionRecord, RefusedDecision, RunSnapshot, RunStatus

    now = datetime.now(UTC)
    mine = PendingApproval(
        call_id="t1.2", tool_name="note", agent_id="A", agent_name="A", turn=1,
        arguments="{}", approvers=["cy"],
    )  # fmt: skip
    snap = RunSnapshot(
        status=RunStatus(
            workflow_id="w", run_id="r", phase="awaiting_approval", agent="A", pending=[mine],
            decisions=[DecisionRecord(call_id="t1.1", tool_name="pay_secret_supplier",
                                      kind="approve", approver="ann", decided_at=now)],
            refused=[
                RefusedDecision(received_at=now, name="approve", payload="{}",
                                error_type="NotAuthorized", message="finance-only", call_id="t1.1"),
                RefusedDecision(received_at=now, name="approve", payload="{}",
                                error_type="Stale", message="cy-visible", call_id="t1.2"),
            ],
        ),
        input_items=[], new_items=[],
    )  # fmt: skip

    class Canned(ConsoleData):
        async def snapshot(self, namespace: str, workflow_id: str) -> RunSnapshot:
            if workflow_id != "w":
                from hitl.cli.common import _Gone

                raise _Gone("no such run")
            return snap

    auth = Authenticator(mode="link", user="ann")
    rules = Rules.of(None, ["olga"])
    app = create_app(Canned({"default": None}), auth, rules=rules)  # type: ignore[dict-item]

    def audit(who: str, run: str = "w") -> tuple[int, str]:
        cookie, _ = auth.sessions.issue(who)
        with TestClient(app, base_url="http://127.0.0.1:8090", cookies={COOKIE: cookie}) as c:
            page = c.get(audit_url("default", run))
            return page.status_code, page.text.replace(cookie, "")

    code, cy = audit("cy")
    assert code == 200 and "cy-visible" in cy
    assert "pay_secret_supplier" not in cy and "finance-only" not in cy
    code, ann = audit("ann")
    assert code == 200 and "pay_secret_supplier" in ann and "finance-only" in ann
    assert "cy-visible" not in ann
    code, olga = audit("olga")
    assert code == 200 and all(t in olga for t in ("pay_secret_supplier", "cy-visible"))
    assert "Only the calls you may see" not in olga
    code, dan = audit("dan")
    assert code == 404 and "pay_secret_supplier" not in dan and "cy-visible" not in dan
    code, nowhere = audit("dan", "no-such-run")
    assert code == 404
    strip = re.compile(r'value="[^"]*"|"X-CSRF-Token": "[^"]*"')
    assert strip.sub("", nowhere) == strip.sub("", dan), "no oracle: the same page"


def test_an_edit_keeps_what_nobody_touched_byte_for_byte() -> None:
    body = "Dear Ada,\r\n\r\nYour refund went out.\n\n  Indented line\n"
    original = {"subject": "Refund", "body": body, "amount": 1250, "rush": False, "x": [1, 2.0]}
    call = PendingApproval(
        call_id="t1.1", tool_name="send_email", agent_id="a", agent_name="A",
        arguments=json.dumps(original), turn=1,
    )  # fmt: skip
    schema = {
        "properties": {
            "subject": {"type": "string"},
            "body": {"type": "string"},
            "amount": {"type": "number"},
            "rush": {"type": "boolean"},
            "cc": {"type": "string"},
        }
    }
    fields = {f["name"]: f for f in form_fields(schema, call)}
    # What a browser sends back: text areas with CRLF line breaks, numbers as printed.
    posted = [("type.subject", "string"), ("arg.subject", "Your refund")]
    shown = fields["body"]["value"].replace("\r\n", "\n")  # as the page parses it
    posted += [("type.body", "string"), ("arg.body", shown.replace("\n", "\r\n"))]
    posted += [("type.amount", "number"), ("arg.amount", "1250.0")]
    posted += [("type.rush", "boolean"), ("type.cc", "string"), ("arg.cc", "")]
    edited, problem = edited_arguments(FormData(posted), original)
    assert problem is None
    assert edited == original | {"subject": "Your refund"}
    assert edited["body"] == body and type(edited["amount"]) is int  # untouched: as it was
    assert "cc" not in edited  # shown empty, left empty
    # An edited text field keeps its line breaks (as \n) and the field's own text.
    posted[3] = ("arg.body", "Line one\r\nLine two\r\n")
    assert edited_arguments(FormData(posted), original)[0]["body"] == "Line one\nLine two\n"
    # An emptied number removes its argument; a changed one is the person's.
    posted[5] = ("arg.amount", "")
    assert "amount" not in edited_arguments(FormData(posted), original)[0]
    posted[5] = ("arg.amount", "99.5")
    assert edited_arguments(FormData(posted), original)[0]["amount"] == 99.5


def test_a_call_page_reads_as_a_person_reads() -> None:
    from datetime import UTC, datetime, timedelta

    from hitl.console.app import _env, _transcript, due_in, message_of
    from hitl.wire import ApprovalRequestData, RunItem, RunSnapshot, RunStatus

    now = datetime.now(UTC)
    assert due_in(now + timedelta(days=2, hours=3, minutes=5)) == "in 2d 3h"
    assert due_in(now + timedelta(hours=3, minutes=12, seconds=30)) == "in 3h 12m"
    assert due_in(now + timedelta(seconds=30)) == "in under a minute"
    assert due_in(now - timedelta(minutes=5, seconds=30)) == "overdue by 5m"
    # A tool with no text of its own: its arguments are shown once, under Arguments.
    args = {"subject": "환불", "n": 1}
    shown = json.dumps(args, indent=2, ensure_ascii=False)
    call = PendingApproval(
        call_id="t1.1", tool_name="send_email", agent_id="a", agent_name="A", turn=1,
        arguments=json.dumps(args),
        request=ApprovalRequestData(title="t", message=f"Send an email.\n\nArguments:\n{shown}"),
    )  # fmt: skip
    assert message_of(call) == "Send an email."
    custom = call.model_copy(update={"request": ApprovalRequestData(title="t", message="Mine")})
    assert message_of(custom) == "Mine"
    # A diff's lines are one line each (once two: a block span and a newline).
    page = _env().from_string(
        '{% for line in text.splitlines() %}<span class="{{ diff_class(line) }}">'
        '{{ line or " " }}</span>{% endfor %}'
    )
    assert "\n" not in page.render(text="--- a\n+++ b\n@@ -1 +1 @@\n-x\n\n+y")
    # The transcript shows Korean, Chinese and emoji as themselves, and says where it is cut.
    said = json.dumps({"body": "환불 退款 🙂" + "x" * 600})  # escaped: \uXXXX
    item = RunItem(
        type="tool_call_item", agent_name="A", agent_id="a",
        raw_item={"type": "function_call", "name": "send_email", "arguments": said},
    )  # fmt: skip
    status = RunStatus(workflow_id="w", run_id="r", phase="awaiting_approval", agent="A")
    snap = RunSnapshot(status=status, input_items=[], new_items=[item])
    [(_who, text)] = _transcript(snap)
    assert "환불 退款 🙂" in text and "\\u" not in text
    assert len(text) == 501 and text.endswith("…")


def test_the_inbox_pages_through_many_calls() -> None:
    from datetime import UTC, datetime, timedelta

    from starlette.testclient import TestClient

    from hitl.console.app import PAGE_SIZE, create_app
    from hitl.console.auth import COOKIE
    from hitl.console.data import ConsoleData, Inbox, Row

    start = datetime(2026, 11, 1, tzinfo=UTC)
    rows = [
        Row("default", f"run-{n:03}", "Desk", "q", "t1.1", "refund", f"Refund order {n:03}",
            requested_at=start + timedelta(minutes=n))
        for n in range(2 * PAGE_SIZE + 7)
    ]  # fmt: skip

    class Canned(ConsoleData):
        async def inbox(self) -> Inbox:
            return Inbox(rows=rows)

    auth = Authenticator(mode="link", user="ann")
    app = create_app(Canned({"default": None}), auth)  # type: ignore[dict-item]
    cookie, _ = auth.sessions.issue("ann")
    with TestClient(app, base_url="http://127.0.0.1:8090", cookies={COOKIE: cookie}) as c:
        first = c.get("/").text
        assert "Refund order 000" in first and f"Refund order {PAGE_SIZE - 1:03}" in first
        assert f"Refund order {PAGE_SIZE:03}" not in first
        shown = f"1\u2013{PAGE_SIZE} of {2 * PAGE_SIZE + 7} shown"  # an en dash
        assert shown in first and "Page 1 of 3" in first
        last = c.get("/?page=3").text
        assert f"Refund order {2 * PAGE_SIZE + 6:03}" in last and "Refund order 000" not in last
        assert "Previous page" in last and "Next page" not in last
        # Filters and a page: the page counts within what the filters find.
        found = c.get("/?q=order+00&page=9").text  # past the end: the last page there is
        assert "Refund order 009" in found and "10 shown" in found and "Page" not in found
        assert c.get("/?page=-1").status_code == 200 and c.get("/?page=x").status_code == 200
        # Polling a page: unchanged rows are not sent again.
        polled = c.get("/inbox/rows?page=2")
        version = re.search(r'v=([0-9a-f]{16})"', polled.text)
        assert polled.status_code == 200 and version is not None
        assert c.get(f"/inbox/rows?page=2&v={version.group(1)}").status_code == 204


@pytest.mark.parametrize(
    ("text", "html"),
    [
        ("Refund **$250.00** to *Ada*", "<p>Refund <strong>$250.00</strong> to <em>Ada</em></p>"),
        ("- one\n- two", "<ul><li>one</li><li>two</li></ul>"),
        ("1. a\n2. b", "<ol><li>a</li><li>b</li></ol>"),
        ("# Heading", "<p><strong>Heading</strong></p>"),
        ("a\nb\n\nc", "<p>a<br>b</p><p>c</p>"),
        ("2 * 3 * 4 and snake_case and $5 ~x~", "<p>2 * 3 * 4 and snake_case and $5 ~x~</p>"),
        ("```\n<b>x</b> **no**\n```", "<pre><code>&lt;b&gt;x&lt;/b&gt; **no**</code></pre>"),
        ("`<i>` **b**", "<p><code>&lt;i&gt;</code> <strong>b</strong></p>"),
    ],
)
def test_approval_messages_render_as_a_small_safe_markdown(text: str, html: str) -> None:
    from hitl.console.md import render

    assert str(render(text)) == html


@pytest.mark.parametrize(
    "hostile",
    [
        "<script>window.__xss=1</script>",
        '<img src=x onerror="window.__xss=1">',
        "[click](javascript:alert(1))",
        "[click](data:text/html,<script>alert(1)</script>)",
        '[x](https://ok.example/" onmouseover="alert(1))',
        "**<b onclick=alert(1)>x</b>**",
        "[*a*](https://a.example) [b](//evil.example)",
    ],
)
def test_no_markdown_makes_markup_of_its_own(hostile: str) -> None:
    from hitl.console.md import render

    html = str(render(hostile))
    tags = re.findall(r"<\s*([a-zA-Z]+)", html)
    assert set(tags) <= {"p", "strong", "em", "code", "pre", "ul", "ol", "li", "br", "a", "span"}
    assert "javascript:" not in re.sub(r">[^<]*<", "><", html), "never in an attribute"
    for href in re.findall(r'href="([^"]*)"', html):
        assert href.startswith(("https://", "http://")) and '"' not in href
    assert not re.search(r"<[^>]+\son\w+=", html), "no event handler attribute"
    assert "evil.example" not in re.findall(r'href="([^"]*)"', html).__str__()


def test_a_link_in_a_message_shows_where_it_goes() -> None:
    from hitl.console.md import render

    html = str(render("[Approve here](https://evil.example/approve)"))
    assert 'rel="noopener noreferrer nofollow"' in html and 'target="_blank"' in html
    assert '<span class="host">(evil.example)</span>' in html


def test_the_inbox_status_views() -> None:
    from datetime import UTC, datetime

    from starlette.testclient import TestClient

    from hitl.console.app import create_app
    from hitl.console.auth import COOKIE
    from hitl.console.data import ConsoleData, Inbox, Row
    from hitl.console.rules import Rules

    at = datetime(2026, 11, 1, tzinfo=UTC)

    def row(title: str, kind: str = "approval", **kw: Any) -> Row:
        return Row("default", f"run-{title}", "Desk", "q", "t1.1", "refund", title, kind,
                   requested_at=at, **kw)  # fmt: skip

    rows = [
        row("Mine"),
        row("FourEyesIApproved", required_approvals=2, approved=1, approved_by=["ann"]),
        row("BobsOnly", approvers=["bob"]),
        row("Uncertain", "uncertain"),
        row("Question", "input"),
    ]

    class Canned(ConsoleData):
        async def inbox(self) -> Inbox:
            return Inbox(rows=rows)

    auth = Authenticator(mode="link", user="ann")
    app = create_app(Canned({"default": None}), auth, rules=Rules.of(None, ["ann"]))  # type: ignore[dict-item]
    cookie, _ = auth.sessions.issue("ann")
    titles = [r.title for r in rows]
    with TestClient(app, base_url="http://127.0.0.1:8090", cookies={COOKIE: cookie}) as c:

        def view(name: str) -> list[str]:
            page = c.get(f"/?view={name}").text
            return [t for t in titles if f">{t}</a>" in page]

        assert view("") == titles
        assert view("mine") == ["Mine", "Question"]
        assert view("others") == ["FourEyesIApproved", "BobsOnly"]
        assert view("uncertain") == ["Uncertain"] and view("questions") == ["Question"]
        assert view("nonsense") == titles
        assert "Waiting for me (2)" in c.get("/").text
