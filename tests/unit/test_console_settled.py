"""The settled views' rules (who sees a decided or expired call) and their page, hostile text
included: pure, no server (the browser tests `tests/browser/test_console_settled.py` read real
runs)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from starlette.testclient import TestClient

from hitl.console.app import create_app
from hitl.console.auth import Authenticator
from hitl.console.data import ConsoleData, Inbox
from hitl.console.rules import Rules
from hitl.console.settled import Settled, SettledRow, visible
from hitl.wire import Approval, ApproverDirectory, ApproverEntry, DecisionRecord

NOW = datetime.now(UTC)
DIRECTORY = ApproverDirectory(
    approvers={"ann": ApproverEntry(groups=["finance"]), "bob": ApproverEntry(groups=["finance"])}
)


def record(**kw: object) -> DecisionRecord:
    fields: dict[str, object] = {"call_id": "t2.1", "tool_name": "refund", "kind": "approve"}
    fields |= {"approver": "bob", "decided_at": NOW, "source": "person"}
    return DecisionRecord.model_validate(fields | kw)


def test_who_sees_a_settled_call() -> None:
    rules = Rules.of(DIRECTORY, ["vic"])
    listed = SettledRow("default", "w", "Desk", record(), ["group:finance"])
    assert visible(rules, "ann", listed), "she could have decided it when it was listed"
    assert not visible(rules, "mallory", listed)
    assert visible(rules, "vic", listed), "a viewer"
    never = SettledRow("default", "w", "Desk", record(), None)  # never listed pending here
    assert visible(rules, "bob", never), "he decided it"
    assert not visible(rules, "ann", never)
    four = SettledRow("default", "w", "Desk", record(approvals=[
        Approval(approver="ann", approved_at=NOW), Approval(approver="bob", approved_at=NOW)
    ]), None)  # fmt: skip
    assert visible(rules, "ann", four) and four.who == "ann, bob"
    expired = SettledRow("default", "w", "Desk", record(kind="expired", approver=None,
                                                        source="deadline"), [])  # fmt: skip
    assert expired.view == "expired" and visible(rules, "anyone", expired), "named nobody"


def test_the_settled_views_render_hostile_text_inert(monkeypatch: pytest.MonkeyPatch) -> None:
    evil = '<img src=x onerror="alert(1)">'
    rows = [
        SettledRow("default", "run<b>1", "Desk", record(kind="reject", message=evil), []),
        SettledRow("default", "run2", "Desk", record(call_id="t3.1", kind="expired",
                                                     approver=None, source="deadline"), []),
    ]  # fmt: skip

    async def canned(self: Settled) -> list[SettledRow]:
        return rows

    class NoPending(ConsoleData):
        async def inbox(self) -> Inbox:
            return Inbox(read_at=1e12)

    monkeypatch.setattr(Settled, "rows", canned)
    auth = Authenticator(mode="link", user="ann")
    app = create_app(NoPending({"default": None}), auth)  # type: ignore[dict-item]
    with TestClient(app, base_url="http://127.0.0.1:8090") as client:
        client.get(auth.login_link("http://127.0.0.1:8090"))
        decided = client.get("/?view=decided").text
        assert "Rejected by bob" in decided and "run&lt;b&gt;1" in decided
        assert evil not in decided and "&lt;img src=x" in decided
        assert "Decided (1)" in decided and "Expired (1)" in decided
        assert "t3.1" not in decided, "the expired call is in its own view"
        expired = client.get("/?view=expired").text
        assert "Expired: nobody decided before its deadline" in expired and "t3.1" in expired
        empty = client.get("/").text
        assert "Nothing waits for a decision that you may see" in empty
        assert "a call that names other approvers is not shown here" in empty


async def test_a_slow_inbox_reading_is_served_after_it_arrives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 10,000 pending calls took seconds to read (bench/console_live.py): stamped when it began,
    # the reading was stale on arrival and every request read everything again.
    import asyncio

    from hitl.console import data as console_data

    monkeypatch.setattr(console_data, "INBOX_SECONDS", 0.2)
    reads = 0

    async def slow(*args: object) -> None:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.3)  # longer than the reading is served for

    data = ConsoleData({"default": None})  # type: ignore[dict-item]
    # On this instance only: a console another test left serving reads through the class.
    monkeypatch.setattr(data, "_read_namespace", slow)
    import time

    first = await data.inbox()
    age = time.monotonic() - first.read_at
    assert reads == 1 and first.took >= 0.3
    assert age < first.took, "stamped when it arrived, not when it began"
    assert await data.inbox() is first, "and served to the next request"


async def test_a_stale_reading_is_served_while_the_next_is_read_and_a_decision_reads_anew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # At 10,000 calls a reading takes seconds: a page is answered from the last reading (up to
    # INBOX_STALE_SECONDS old) while the next one is read; after a decision (`forget`) the next
    # request reads anew, and a background reading begun before the decision is dropped.
    import asyncio

    from hitl.console import data as console_data

    monkeypatch.setattr(console_data, "INBOX_SECONDS", 0.0)
    gates: list[asyncio.Event] = []

    async def gated(inbox: object, *args: object) -> None:
        gate = asyncio.Event()
        gates.append(gate)
        inbox.left_out = len(gates)  # type: ignore[attr-defined]  # which reading this is
        if len(gates) != 2:
            gate.set()
        await gate.wait()

    data = ConsoleData({"default": None})  # type: ignore[dict-item]
    monkeypatch.setattr(data, "_read_namespace", gated)  # this instance only
    assert (await data.inbox()).left_out == 1
    served = await asyncio.wait_for(data.inbox(), 1.0)  # reading 2 is held back
    assert served.left_out == 1 and len(gates) == 2, "the last reading, at once"
    data.forget()  # a decision; readings here are quick
    assert (await data.inbox()).left_out == 3, "read anew, not served stale"
    gates[1].set()
    assert data._refresh is not None
    await data._refresh
    assert (await data.inbox()).left_out in (3, 4), "reading 2 (from before) was dropped"
    # A slow reading (10,000 calls: seconds) is not waited for after a decision either.
    await data._refresh  # (the one the line above may have begun)
    data._inbox.took = 5.0
    before = data._inbox
    data.forget()
    assert await asyncio.wait_for(data.inbox(), 1.0) is before, "served what it has"
    assert data._refresh is not None
    await data._refresh
    after = await asyncio.wait_for(data.inbox(), 1.0)
    assert after.left_out > before.left_out, "and read anew in the background"


async def test_a_request_gets_its_reading_when_the_next_one_began_meanwhile() -> None:
    """Two requests (a page and a poll): the first's reading ends, and the second begins the
    next before the first resumes. The first once read the second's unfinished reading and
    failed with InvalidStateError, answering 500 (a page that then never polled again)."""
    first = SettledRow("default", "w1", "Desk", record())
    second = SettledRow("default", "w2", "Desk", record())
    later: list[asyncio.Future[list[SettledRow] | None]] = []
    released = asyncio.Event()  # the second reading ends only once the first request has

    class Racing(Settled):
        async def rows(self) -> list[SettledRow]:
            if not later:  # the first reading: a second request arrives as it ends
                later.append(asyncio.ensure_future(self.rows_within(5)))
                return [first]
            await released.wait()
            return [second]

    settled = Racing(ConsoleData({}))
    assert await settled.rows_within(5) == [first]
    released.set()
    assert await later[0] == [second]
