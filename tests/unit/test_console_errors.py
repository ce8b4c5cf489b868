"""A request the console cannot answer: a page says so without a trace and asks again, a poll
gets a bare 500 (htmx swaps nothing and polls on), and a failed post says how to learn
whether it took effect. The fault is injected in the console's data access; the app, its
middleware and its templates are the real ones."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from hitl.console.app import create_app
from hitl.console.auth import Authenticator
from hitl.console.data import ConsoleData, Inbox, Outcome

SECRET = "SELECT * FROM executions -- the store's own words"


class Broken(ConsoleData):
    async def inbox(self) -> Inbox:
        raise RuntimeError(SECRET)

    async def decide(self, *args: object, **kw: object) -> Outcome:  # type: ignore[override]
        raise RuntimeError(SECRET)


@pytest.fixture
def web() -> TestClient:
    auth = Authenticator(mode="link", user="ann")
    app = create_app(Broken({}), auth)
    client = TestClient(app, base_url="http://127.0.0.1:8090", raise_server_exceptions=False)
    client.get(auth.login_link("http://127.0.0.1:8090"))
    return client


def test_a_page_the_console_cannot_answer_says_so_and_asks_again(web: TestClient) -> None:
    page = web.get("/")
    assert page.status_code == 500
    assert "The console could not answer" in page.text
    assert '<meta http-equiv="refresh" content="10">' in page.text
    assert SECRET not in page.text and "Traceback" not in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"


def test_a_poll_the_console_cannot_answer_gets_a_bare_500(web: TestClient) -> None:
    polled = web.get("/inbox/rows", headers={"HX-Request": "true"})
    assert polled.status_code == 500 and polled.text == ""
    assert polled.headers["x-content-type-options"] == "nosniff"


def test_a_decision_the_console_cannot_finish_says_how_to_check_and_is_never_resent() -> None:
    from datetime import UTC, datetime

    from hitl.console.data import Row
    from hitl.console.urls import call_url
    from hitl.wire import PendingApproval, RunSnapshot, RunStatus
    from hitl.wire.runs import text_digest
    from tests.unit.test_console_parts import _Forms

    call = PendingApproval(
        call_id="t1.1", tool_name="pay", agent_id="A", agent_name="A", turn=1,
        arguments="{}", arguments_sha256=text_digest("{}"), requested_at=datetime.now(UTC),
    )  # fmt: skip
    status = RunStatus(workflow_id="w", run_id="r", phase="awaiting_approval", agent="A",
                       pending=[call])  # fmt: skip

    class Deciding(Broken):
        async def inbox(self) -> Inbox:
            return Inbox(rows=[Row.of_pending("default", "w", "A", "hitl", call)], read_at=1e12)

        async def snapshot(self, namespace: str, workflow_id: str) -> RunSnapshot:
            return RunSnapshot(status=status, input_items=[], new_items=[])

    auth = Authenticator(mode="link", user="ann")
    app = create_app(Deciding({"default": None}), auth)  # type: ignore[dict-item]
    web = TestClient(app, base_url="http://127.0.0.1:8090", raise_server_exceptions=False)
    web.get(auth.login_link("http://127.0.0.1:8090"))
    page = web.get(call_url("default", "w", "t1.1"))
    assert page.status_code == 200, page.text
    forms = _Forms()
    forms.feed(page.text)
    [(action, fields), *_] = [(a, f) for a, f in forms.forms if "ticket" in f]
    answer = web.post(action, data=fields | {"action": "approve"})
    assert answer.status_code == 500
    assert "open the call again" in answer.text and "http-equiv" not in answer.text
    assert SECRET not in answer.text and "Traceback" not in answer.text
