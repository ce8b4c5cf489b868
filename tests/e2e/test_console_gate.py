"""The console's own checks on a post, each against a real run (dev server): a post that
fails one of them decides nothing, as the run's record shows, and the same post without the
fault is taken (so the refusal was that check's, not an accident of the test).

- the origin: a post from another origin, with a valid session and form token, is refused;
- `header` mode: the session stands only while the proxy names the same person;
- the person deciding is the signed-in one, whatever the form says;
- the form names the call of its address, with the ticket the page gave (no other call's).

The app runs in the test's event loop, reached through httpx's ASGI transport (no browser).
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import httpx
import pytest_asyncio
from temporalio.client import Client

from hitl import Runner
from hitl.cli import inbox
from hitl.cli.inbox import count_runs, list_runs
from hitl.console.app import create_app
from hitl.console.auth import COOKIE, Authenticator, AuthMode, token_digest
from hitl.console.data import SEARCHES_KEPT, ConsoleData
from hitl.console.urls import call_url, decide_url
from hitl.console.window import COUNT_KEPT_SECONDS, Counts, search_clause
from hitl.wire import RunOutput, RunStatus
from tests.agents import support_agent
from tests.helpers import serving, wait_for

BASE = "http://127.0.0.1:8090"
TOKENS = {"ann": "ann-token-0123456789", "bob": "bob-token-0123456789"}


@pytest_asyncio.fixture(scope="module")
async def queue(dev_client: Client) -> AsyncIterator[str]:
    async with serving(dev_client, support_agent) as tq:
        yield tq


def console(client: Client, tq: str, mode: AuthMode) -> httpx.AsyncClient:
    """A browser-like client of a console in `mode` (tokens: ann and bob)."""
    auth = Authenticator(mode=mode, users={n: token_digest(t) for n, t in TOKENS.items()})
    app = create_app(ConsoleData({client.namespace: client}, task_queues=[tq]), auth)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)


async def park(client: Client, tq: str, text: str) -> tuple[str, str]:
    result = await Runner.run(support_agent, text, client=client, task_queue=tq, serve=False)
    return result.workflow_id, result.interruptions[0].call_id


def form_of(page: str) -> dict[str, str]:
    """The hidden fields of a call page's approve form (the first form that posts a decision)."""
    start = page.index('class="decide"')
    form = page[start : page.index("</form>", start)]
    fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form)
    return {name: html.unescape(value) for name, value in fields}


async def recorded(client: Client, wid: str) -> list[tuple[str, str | None]]:
    got: RunStatus = await client.get_workflow_handle(wid).query("status", result_type=RunStatus)
    return [(d.kind, d.approver) for d in got.decisions]


async def signed_in(web: httpx.AsyncClient, who: str) -> None:
    answer = await web.post("/login", data={"name": who, "token": TOKENS[who]})
    assert answer.status_code == 303 and COOKIE in web.cookies


async def test_a_post_from_another_origin_decides_nothing(dev_client: Client, queue: str) -> None:
    wid, call = await park(dev_client, queue, "cancel order 51")
    async with console(dev_client, queue, "tokens") as web:
        await signed_in(web, "ann")
        page = await web.get(call_url("default", wid, call))
        assert page.status_code == 200, page.text
        form = form_of(page.text) | {"action": "approve"}
        url = decide_url("default", wid, call)
        evil = await web.post(url, data=form, headers={"Origin": "http://evil.example"})
        assert (evil.status_code, evil.text) == (403, "cross-site request refused")
        assert await recorded(dev_client, wid) == []
        ours = await web.post(url, data=form, headers={"Origin": BASE})
        assert ours.status_code == 200, ours.text
    out = await dev_client.get_workflow_handle(wid, result_type=RunOutput).result()
    assert [(d.kind, d.approver) for d in out.decisions] == [("approve", "ann")]


async def test_in_header_mode_the_proxy_must_name_the_sessions_person(
    dev_client: Client, queue: str
) -> None:
    wid, call = await park(dev_client, queue, "cancel order 52")
    async with console(dev_client, queue, "header") as web:
        page = await web.get(call_url("default", wid, call), headers={"X-Forwarded-User": "ann"})
        assert page.status_code == 200 and COOKIE in web.cookies, page.text
        form = form_of(page.text) | {"action": "approve"}
        url = decide_url("default", wid, call)
        # ann's session and form, but the proxy now says bob: signed out, for either of them.
        as_bob = await web.post(url, data=form, headers={"X-Forwarded-User": "bob"})
        assert as_bob.status_code == 401 and "nothing was decided" in as_bob.text
        # ann's session and form, and no proxy header at all (a request around the proxy).
        around = await web.post(url, data=form)
        assert around.status_code == 401 and "nothing was decided" in around.text
        assert await recorded(dev_client, wid) == []
        # The proxy says ann, as the session does: taken, as ann.
        as_ann = await web.post(url, data=form, headers={"X-Forwarded-User": "ann"})
        assert as_ann.status_code == 200, as_ann.text
    out = await dev_client.get_workflow_handle(wid, result_type=RunOutput).result()
    assert [(d.kind, d.approver) for d in out.decisions] == [("approve", "ann")]


async def test_the_form_cannot_name_who_decides(dev_client: Client, queue: str) -> None:
    wid, call = await park(dev_client, queue, "cancel order 53")
    async with console(dev_client, queue, "tokens") as web:
        await signed_in(web, "ann")
        page = await web.get(call_url("default", wid, call))
        form: dict[str, Any] = form_of(page.text) | {"action": "approve"}
        form |= {"approver": "bob", "person": "bob", "as": "bob", "client": "hitl"}
        done = await web.post(decide_url("default", wid, call), data=form)
        assert done.status_code == 200, done.text
    out = await dev_client.get_workflow_handle(wid, result_type=RunOutput).result()
    [d] = out.decisions
    assert (d.approver, d.client) == ("ann", "console")


async def test_a_form_for_one_call_cannot_decide_another(dev_client: Client, queue: str) -> None:
    """Two paused runs; ann's page of the first gives a form. Posted to the second run's address
    (or with the second run's id in its fields), it is refused and neither run is decided."""
    first, first_call = await park(dev_client, queue, "cancel order 54")
    second, second_call = await park(dev_client, queue, "cancel order 55")
    async with console(dev_client, queue, "tokens") as web:
        await signed_in(web, "ann")
        page = await web.get(call_url("default", first, first_call))
        form = form_of(page.text) | {"action": "approve"}
        elsewhere = await web.post(decide_url("default", second, second_call), data=form)
        assert elsewhere.status_code == 400
        renamed = form | {"run": second, "call": second_call}
        forged = await web.post(decide_url("default", second, second_call), data=renamed)
        assert forged.status_code == 404, "no ticket for the second call: as if it did not exist"
        twice = await web.post(
            decide_url("default", first, first_call) + "&" + "run=" + second, data=form
        )
        assert twice.status_code == 400, "a run named twice is not guessed at"
        assert await recorded(dev_client, first) == [] and await recorded(dev_client, second) == []
        ok = await web.post(decide_url("default", first, first_call), data=form)
        assert ok.status_code == 200, ok.text
    out = await dev_client.get_workflow_handle(first, result_type=RunOutput).result()
    assert [(d.kind, d.approver) for d in out.decisions] == [("approve", "ann")]
    assert await recorded(dev_client, second) == []
    await dev_client.get_workflow_handle(second).terminate("test over")


async def test_an_inbox_with_more_runs_than_one_reading_lists_says_so_and_searches_past_it(
    dev_client: Client,
) -> None:
    # The console lists at most `max_runs` paused runs per namespace (`hitl console --max-runs`):
    # past that it says so, and a search or a filter reaches the runs it did not list.
    async with serving(dev_client, support_agent) as tq:
        # The first (oldest) run also waits on an email.
        texts = ["cancel order 60 and email about the refund", "cancel order 61", "cancel order 62"]
        runs = [(await park(dev_client, tq, text))[0] for text in texts]
        awaiting = f"TaskQueue = '{tq}' AND HitlStatus = 'awaiting_approval'"
        kind = "WorkflowType = 'AgentRun'"
        await wait_for(
            lambda: counted(dev_client, awaiting, 3), what="three runs visible as awaiting"
        )
        auth = Authenticator(mode="tokens", users={n: token_digest(t) for n, t in TOKENS.items()})
        pages = {}
        for limit in (2, 3):
            data = ConsoleData({dev_client.namespace: dev_client}, limit=limit, task_queues=[tq])
            transport = httpx.ASGITransport(app=create_app(data, auth))
            async with httpx.AsyncClient(transport=transport, base_url=BASE) as web:
                await signed_in(web, "ann")
                # Counts a reading does not wait for (over 0.5 s) are shown by the next one.
                await data.inbox()
                await wait_for(lambda c=data._counts: not c.counting(), what="the reading's counts")
                data.forget()
                pages[limit] = (await web.get("/inbox/rows")).text
                if limit == 2:
                    for q in (runs[0], runs[0][:-3], HOSTILE, 'x" \\'):
                        pages[q] = (await web.get("/inbox/rows", params={"q": q})).text
                    for name, params in {
                        "tool": {"tool": "send_email"},
                        "age": {"age": "1h"},
                        "tool, hostile text": {"tool": "cancel_order", "q": HOSTILE},
                    }.items():
                        pages[name] = (await web.get("/inbox/rows", params=params)).text
                    # A browser sending many searches holds at most 8 of them, 1,000 runs each.
                    for k in range(12):
                        await web.get("/inbox/rows", params={"q": f"{runs[0]}-{k}"})
                    assert len(data._searches) <= SEARCHES_KEPT
        # The hostile text is one literal to the server: it finds nothing and escapes nothing.
        where = search_clause(HOSTILE, "", "cancel_order")
        assert where is not None
        assert (await dev_client.count_workflows(f"{awaiting} AND {where}")).count == 0
        # A count (it scans every paused run on SQLite) is kept for the readings that follow.
        counts, ns, began = Counts(), dev_client.namespace, time.monotonic()

        async def count(query: str = awaiting, keep: float = COUNT_KEPT_SECONDS) -> int | None:
            counts.start((ns, query), partial(count_runs, dev_client, query), keep=keep)
            await wait_for(lambda: not counts.counting(), what="the count")
            return await counts.value((ns, query), began)

        assert await count() == 3
        await park(dev_client, tq, "cancel order 63")
        await wait_for(lambda: counted(dev_client, awaiting, 4), what="a fourth run awaiting")
        assert await count() == 3, "kept"
        assert await count(f"{awaiting} AND {kind}") == 4, "another query"
        assert await count(keep=0.0) == 4, "counted again"
        # The listing pages (2 runs a page here), says whether more match, and decodes only the
        # search attributes asked for.
        inbox.PAGE, page = 2, inbox.PAGE
        try:
            three, more = await list_runs(dev_client, awaiting, 3)
            everything, no_more = await list_runs(dev_client, awaiting, 10)
        finally:
            inbox.PAGE = page
        assert (len(three), more, len(everything), no_more) == (3, True, 4, False)
        assert [w.id for w in three] == [w.id for w in everything[:3]]
        assert {w.id for w in everything} >= set(runs)
        assert {p.key.name for w in everything for p in w.typed_search_attributes} == {"HitlAgent"}
    cut, whole = pages[2], pages[3]
    assert 'data-testid="cut"' in cut and "3 paused runs wait" in cut
    assert "the 2 started last" in cut and "2 read of 3 pending" in cut
    assert 'data-testid="cut"' not in whole
    assert shown(whole) == set(runs)
    # Visibility lists the newest-started first: the oldest is left out of the reading.
    assert shown(cut) == {runs[1], runs[2]}
    # A search for it, by its id or the id's start, finds it past the reading.
    assert shown(pages[runs[0]]) == {runs[0]}
    # What a search found past the reading is listed, not counted as read.
    assert "2 read of 3 pending" in pages[runs[0]]
    assert runs[0] in shown(pages[runs[0][:-3]])
    # So does a filter: only the oldest waits on an email.
    assert shown(pages["tool"]) == {runs[0]}
    # None has waited an hour; what no literal expresses stays in the reading (no match there).
    assert shown(pages["age"]) == set()
    assert shown(pages[HOSTILE]) == shown(pages["tool, hostile text"]) == set()
    assert shown(pages['x" \\']) == set()


HOSTILE = "' OR WorkflowId != '"


def shown(page: str) -> set[str]:
    """The runs whose calls an inbox page lists."""
    return set(re.findall(r'<tr data-call="[^"]+" data-run="([^"]+)"', page))


async def counted(client: Client, query: str, n: int) -> bool:
    return bool((await client.count_workflows(query)).count == n)
