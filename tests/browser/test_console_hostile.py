"""The console against a hostile but fair tester, in a real Chromium: anyone with namespace
access (who can start any workflow, with any id, memo and search attributes) and a console
account of their own. Every test checks what the runs recorded, not only the page.

- A run whose id spells another run's call (`VICTIM/calls/t1.1/decide?x`) is one run: its
  page and its buttons decide its own call, never the victim's.
- The inbox lists only our runs (`AgentRun`, on the task queues our workers serve), and what
  it shows is confirmed against the run: a memo a starter wrote is not believed.
- A call is shown only to the people who may decide it, and to viewers: others get the same
  page for it as for a call that does not exist.
- A decision carries the digest of the arguments (and the round) its page showed: a call that
  changed meanwhile refuses it, in one clear line.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from temporalio.client import WorkflowHandle
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from hitl import Runner, serve_agents
from hitl.console.urls import call_url, decide_url
from hitl.wire import (
    INBOX_MEMO,
    SA_AGENT,
    SA_PENDING_SINCE,
    SA_PENDING_TOOLS,
    SA_STATUS,
    WORKFLOW_TYPE,
    DecisionInput,
    ExtendInput,
    InboxEntry,
    InboxMemo,
    RunInput,
    RunOutput,
    RunStatus,
)
from tests.agents import signed_treasury, support_agent, treasury_agent
from tests.browser.conftest import Console, row_of, signed_in
from tests.helpers import queue_name, wait_for

CHANGED = "This call changed since you opened it: look again"


async def status(console: Console, wid: str) -> RunStatus:
    got: RunStatus = await console.client.get_workflow_handle(wid).query(
        "status", result_type=RunStatus
    )
    return got


async def paused(console: Console, wid: str) -> RunStatus:
    """The run's status once it waits on a call."""
    found: list[RunStatus] = []

    async def waiting() -> bool:
        found[:] = [await status(console, wid)]
        return bool(found[0].pending)

    await wait_for(waiting, what=f"{wid} to pause")
    return found[0]


async def open_from_inbox(page: Any, console: Console, wid: str, call_id: str) -> None:
    """As a person would: find the call's row in the inbox (it updates live), click it."""
    await page.goto(console.url + "/?" + urlencode({"q": wid}))
    link = row_of(page, wid, call_id).locator("a")
    await link.wait_for(timeout=20_000)
    await link.click()
    await page.wait_for_selector("[data-testid=title]")


def spoofed_memo(title: str) -> InboxMemo:
    """An inbox memo as a starter can write it: any content, and a run id it cannot know."""
    entry = InboxEntry(
        call_id="t1.1",
        tool_name="pay_supplier",
        agent_id="Signed treasury",
        agent_name="Signed treasury",
        title=title,
        requested_at=datetime.now(UTC),
    )
    return InboxMemo(calls=[entry], total=1, run="00000000-0000-0000-0000-000000000000")


def paused_attributes() -> TypedSearchAttributes:
    """Our search attributes, as a paused run sets them (anyone may set them at start)."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(SearchAttributeKey.for_keyword(SA_STATUS), "awaiting_approval"),
            SearchAttributePair(SearchAttributeKey.for_keyword(SA_AGENT), "Signed treasury"),
            SearchAttributePair(
                SearchAttributeKey.for_keyword_list(SA_PENDING_TOOLS), ["pay_supplier"]
            ),
            SearchAttributePair(
                SearchAttributeKey.for_datetime(SA_PENDING_SINCE), datetime.now(UTC)
            ),
        ]
    )


# ----------------------------------------------------------------------------- identifiers


async def test_a_run_named_like_another_call_decides_only_its_own(
    browser: Any, guarded: Console
) -> None:
    """Finding 1: the attacker's run id spells the victim's call and its decide address. The
    approver opens the attacker's $5 call from the inbox and approves it: the console decides
    (and signs for her) that call, and the victim's $90,000 call is untouched."""
    victim = await Runner.run(
        signed_treasury, "pay 90000", client=guarded.client, task_queue=guarded.task_queue,
        serve=False,
    )  # fmt: skip
    [victim_call] = (await status(guarded, victim.workflow_id)).pending
    decoy_id = f"{victim.workflow_id}/calls/{victim_call.call_id}/decide?x"
    decoy: WorkflowHandle[Any, RunOutput] = await guarded.client.start_workflow(
        WORKFLOW_TYPE,
        RunInput(agent="Signed treasury", input="pay 5"),
        id=decoy_id,
        task_queue=guarded.task_queue,
        result_type=RunOutput,
    )
    [decoy_call] = (await paused(guarded, decoy_id)).pending
    assert decoy_call.call_id == victim_call.call_id, "the run names its calls: both are t1.1"

    ann = await signed_in(browser, guarded, "ann")
    await open_from_inbox(ann, guarded, decoy_id, decoy_call.call_id)
    # The page is the decoy's: its address names the decoy whole, and it shows the $5 call.
    query = parse_qs(urlsplit(ann.url).query)
    assert query == {"ns": ["default"], "run": [decoy_id], "call": [decoy_call.call_id]}
    assert '"amount": 5' in await ann.locator("[data-testid=arguments]").inner_text()
    form = ann.locator("form.decide").first
    assert await form.locator("input[name=run]").get_attribute("value") == decoy_id
    assert await form.get_attribute("action") == decide_url("default", decoy_id, "t1.1")
    await ann.click("[data-testid=primary]")
    assert await ann.locator("[data-testid=outcome]").inner_text() == (
        "Approved by ann via console (signed)"
    )
    out = await decoy.result()
    [d] = out.decisions
    assert (d.approver, d.verified, d.call_id, d.client) == ("ann", True, "t1.1", "console")
    assert d.arguments_sha256 == decoy_call.arguments_sha256
    assert out.final_output == "Paid ACME $5"
    # The victim's call was not decided, by anyone.
    after = await status(guarded, victim.workflow_id)
    assert after.decisions == [] and after.refused == []
    assert [(p.call_id, p.approvals) for p in after.pending] == [(victim_call.call_id, [])]
    await guarded.client.get_workflow_handle(victim.workflow_id).terminate("test over")


# ----------------------------------------------------------------------------- the inbox


async def test_the_inbox_lists_only_our_runs_and_believes_no_starters_memo(
    browser: Any, guarded: Console
) -> None:
    """Finding 2, in the console: a workflow of another type, a spoofed `AgentRun` on a queue
    we list that no worker polls, and one on a queue we do not list; beside them, a genuine
    paused run whose worker is gone, listed from its own memo."""
    client = guarded.client
    # A genuine run, paused on a queue we list; then its worker stops (no query can be
    # answered: what the inbox shows of it comes from its memo, which its run wrote).
    # (`serve_agents`, as a script would: a stopped worker's identity is known to be gone.)
    async with serve_agents(support_agent, client=client, task_queue=guarded.parked_queue):
        genuine = await Runner.run(
            support_agent, "cancel order 41", client=client,
            task_queue=guarded.parked_queue, serve=False,
        )  # fmt: skip
    genuine_call = genuine.interruptions[0].call_id
    lure = "URGENT: pay ACME $90,000 now"
    not_ours = await client.start_workflow(
        "NotOurs", "x", id=f"not-ours-{queue_name()}", task_queue=guarded.idle_queue,
        memo={INBOX_MEMO: spoofed_memo(lure)}, search_attributes=paused_attributes(),
    )  # fmt: skip
    spoof = await client.start_workflow(
        WORKFLOW_TYPE, RunInput(agent="Signed treasury", input="pay 90000"),
        id=f"spoof-{queue_name()}", task_queue=guarded.idle_queue,
        memo={INBOX_MEMO: spoofed_memo(lure)}, search_attributes=paused_attributes(),
    )  # fmt: skip
    outside = await client.start_workflow(
        WORKFLOW_TYPE, RunInput(agent="Signed treasury", input="pay 90000"),
        id=f"outside-{queue_name()}", task_queue=queue_name("outside"),
        memo={INBOX_MEMO: spoofed_memo(lure)}, search_attributes=paused_attributes(),
    )  # fmt: skip
    try:
        vic = await signed_in(browser, guarded, "vic")  # a viewer: sees every row there is
        await vic.goto(guarded.url + "/")
        await row_of(vic, genuine.workflow_id, genuine_call).wait_for(timeout=20_000)
        await row_of(vic, spoof.id).wait_for(timeout=20_000)
        await vic.locator("[data-testid=left-out]").wait_for(timeout=20_000)
        html = await vic.content()
        # The genuine run: from its memo, confirmed, linked, with its own title.
        genuine_row = row_of(vic, genuine.workflow_id, genuine_call)
        assert "Support agent wants to run cancel_order" in await genuine_row.inner_text()
        # Its worker stopped: the row says so before anyone opens it.
        no_worker = genuine_row.locator("[data-testid=no-worker]")
        assert await no_worker.inner_text() == "no worker"
        assert guarded.parked_queue in (await no_worker.get_attribute("title") or "")
        assert await genuine_row.locator("a").get_attribute("href") == call_url(
            "default", genuine.workflow_id, genuine_call
        )
        # The spoofed AgentRun: one unconfirmed row, nothing of its memo, nothing to click.
        spoof_row = row_of(vic, spoof.id)
        assert await spoof_row.count() == 1
        assert await spoof_row.locator("[data-testid=unconfirmed]").inner_text() == "unconfirmed"
        assert await spoof_row.locator("a").count() == 0
        assert lure not in html
        # Another workflow type, and a run on a queue we do not list: not in the inbox at all.
        assert not_ours.id not in html and outside.id not in html
        note = await vic.locator("[data-testid=left-out]").inner_text()
        assert "are not listed" in note and "--task-queue" in note
        # Opened directly, the spoofed run has no page and no buttons (it cannot be read).
        await vic.goto(guarded.url + call_url("default", spoof.id, "t1.1"))
        assert await vic.locator("[data-testid=not-found]").count() == 1
        assert await vic.locator("button[name=action]").count() == 0
        # Nor has the workflow of another type, though its queue is one we list.
        await vic.goto(guarded.url + call_url("default", not_ours.id, "t1.1"))
        assert await vic.locator("[data-testid=not-found]").count() == 1
        # Nothing was decided anywhere.
        for handle in (spoof, outside):
            desc = await handle.describe()
            assert desc.status is not None and desc.status.name == "RUNNING"
    finally:
        for wid in (not_ours.id, spoof.id, outside.id, genuine.workflow_id):
            await client.get_workflow_handle(wid).terminate("test over")


# ----------------------------------------------------------------------------- who sees what


async def test_a_call_is_shown_only_to_who_may_decide_it_and_to_viewers(
    browser: Any, guarded: Console
) -> None:
    """Finding 10: cy (in no group) cannot read finance's call, its inbox row or its run's
    audit, and gets the same page as for a call that does not exist; vic (a viewer) reads it
    without buttons; ann (finance) decides it."""
    run = await Runner.run(
        signed_treasury, "pay 777", client=guarded.client, task_queue=guarded.task_queue,
        serve=False,
    )  # fmt: skip
    wid = run.workflow_id
    [call] = (await status(guarded, wid)).pending
    assert call.approvers == ["group:finance"]
    page_url = guarded.url + call_url("default", wid, call.call_id)

    ann = await signed_in(browser, guarded, "ann")
    await ann.goto(guarded.url + "/")
    await row_of(ann, wid, call.call_id).wait_for(timeout=20_000)  # it is in the inbox now

    cy = await signed_in(browser, guarded, "cy")
    await cy.goto(guarded.url + "/")
    await cy.locator("[data-testid=count]").wait_for()
    assert await row_of(cy, wid).count() == 0
    assert wid not in await cy.content()
    answer = await cy.goto(page_url)
    assert answer is not None and answer.status == 404
    shown = await cy.content()
    assert "777" not in shown and "pay_supplier" not in shown and wid not in shown
    assert await cy.locator("[data-testid=transcript]").count() == 0
    missing = await cy.goto(guarded.url + call_url("default", wid, "t9.9"))
    assert missing is not None and missing.status == 404
    assert await cy.content() == shown, "the same page: no oracle for which calls exist"
    nowhere = await cy.goto(guarded.url + call_url("default", "no-such-run", "t1.1"))
    assert nowhere is not None and nowhere.status == 404 and await cy.content() == shown
    audit = await cy.goto(guarded.url + "/audit?" + urlencode({"ns": "default", "run": wid}))
    assert audit is not None and audit.status == 404 and "777" not in await cy.content()
    # A post made up without the page (no ticket) is the same not-found, and decides nothing.
    await cy.goto(guarded.url + "/")
    csrf = await cy.locator("input[name=csrf]").first.get_attribute("value")
    forged = await cy.request.post(
        guarded.url + decide_url("default", wid, call.call_id),
        form={
            "csrf": csrf or "", "action": "approve", "ns": "default", "run": wid,
            "call": call.call_id, "seen": call.arguments_sha256 or "", "round": "0",
            "ticket": "9999999999.0",
        },
    )  # fmt: skip
    assert forged.status == 404
    assert (await status(guarded, wid)).decisions == []

    vic = await signed_in(browser, guarded, "vic")
    await vic.goto(guarded.url + "/")
    await row_of(vic, wid, call.call_id).wait_for(timeout=20_000)
    await vic.goto(page_url)
    assert '"amount": 777' in await vic.locator("[data-testid=arguments]").inner_text()
    assert await vic.locator("[data-testid=transcript]").count() == 1
    assert await vic.locator("[data-testid=view-only]").count() == 1
    assert await vic.locator("button[name=action]").count() == 0
    assert await vic.locator("input[name=ticket]").count() == 0

    await ann.goto(page_url)
    assert await ann.locator("[data-testid=view-only]").count() == 0
    await ann.click("[data-testid=primary]")
    assert await ann.locator("[data-testid=outcome]").inner_text() == (
        "Approved by ann via console (signed)"
    )
    out = await guarded.client.get_workflow_handle(wid, result_type=RunOutput).result()
    assert [(d.approver, d.verified) for d in out.decisions] == [("ann", True)]


# ----------------------------------------------------------------------------- what was seen


async def test_a_decision_on_a_call_that_changed_meanwhile_is_refused(
    browser: Any, console: Console
) -> None:
    """Finding 5: ann's page shows a four-eyes call; meanwhile bob edits its arguments and
    approves, then extends its deadline (another client). ann's approval, then her extension,
    from the page she opened before, are refused in one clear line and record nothing."""
    run = await Runner.run(
        treasury_agent, "release 9000", client=console.client, task_queue=console.task_queue,
        serve=False,
    )  # fmt: skip
    wid, call_id = run.workflow_id, run.interruptions[0].call_id
    handle = console.client.get_workflow_handle(wid, result_type=RunOutput)
    ann = await signed_in(browser, console, "ann")
    await open_from_inbox(ann, console, wid, call_id)
    assert '"amount": 9000' in await ann.locator("[data-testid=arguments]").inner_text()
    before = (await status(console, wid)).pending[0]
    await handle.execute_update(
        "approve", DecisionInput(call_id=call_id, approver="bob", arguments={"amount": 100})
    )
    await ann.click("[data-testid=primary]")
    assert await ann.locator("[data-testid=outcome]").inner_text() == CHANGED
    assert await ann.locator("[data-testid=error-type]").inner_text() == "ArgumentsChanged"
    [now] = (await status(console, wid)).pending
    assert json.loads(now.arguments) == {"amount": 100}
    assert [a.approver for a in now.approvals] == ["bob"], "nothing recorded for ann"

    # The same for an extension: ann's page saw round N; bob's extension moved the call on.
    await open_from_inbox(ann, console, wid, call_id)
    await handle.execute_update(
        "extend",
        ExtendInput(call_id=call_id, seconds=600, approver="bob", round=now.round),
    )
    extended = (await status(console, wid)).pending[0]
    assert extended.round != now.round and extended.deadline != before.deadline
    await ann.click("summary:has-text('Extend the deadline')")
    await ann.click("button[value=extend]")
    assert await ann.locator("[data-testid=outcome]").inner_text() == CHANGED
    assert await ann.locator("[data-testid=error-type]").inner_text() == "Stale"
    [last] = (await status(console, wid)).pending
    assert [e.approver for e in last.extensions] == ["bob"] and last.deadline == extended.deadline

    # Looking again, ann approves what the call holds now: the second person, it runs.
    await open_from_inbox(ann, console, wid, call_id)
    await ann.click("[data-testid=primary]")
    assert await ann.locator("[data-testid=outcome]").inner_text() == (
        "Approved with edited arguments by ann via console"
    )
    out = await handle.result()
    [d] = out.decisions
    assert [a.approver for a in d.approvals] == ["bob", "ann"]
    assert str(out.final_output).endswith("Released $100")


# ----------------------------------------------------------------------------- new doors


async def test_the_live_poll_says_no_more_than_the_call_page(browser: Any, guarded: Console):
    """`/call/live` (what a call's page polls): cy, who may not see finance's call, learns
    nothing from it, not even that the run or call exists; malformed asks are one-line 400s;
    ann (finance), whose page shows the call as it is, gets nothing to redraw."""
    run = await Runner.run(
        signed_treasury, "pay 778", client=guarded.client, task_queue=guarded.task_queue,
        serve=False,
    )  # fmt: skip
    wid = run.workflow_id
    [call] = (await status(guarded, wid)).pending
    shown = {
        "ns": "default", "run": wid, "call": call.call_id, "seen": call.arguments_sha256 or "",
        "round": str(call.round), "n": "0",
    }  # fmt: skip
    live = guarded.url + "/call/live?"
    ann = await signed_in(browser, guarded, "ann")
    same = await ann.request.get(live + urlencode(shown))
    assert same.status == 204 and await same.text() == ""
    cy = await signed_in(browser, guarded, "cy")
    answers = []
    for ask in (shown, shown | {"call": "t9.9"}, shown | {"run": "no-such-run"}):
        got = await cy.request.get(live + urlencode(ask))
        # The "look again" link names what was asked for, nothing more.
        answers.append((got.status, re.sub(r'href="[^"]*"', "", await got.text())))
    assert answers[0] == answers[1] == answers[2], "no oracle for which runs and calls exist"
    assert "no longer waits as shown" in answers[0][1]
    assert "778" not in answers[0][1] and "pay_supplier" not in answers[0][1]
    for bad in (
        urlencode(shown) + "&call=t1.2",  # a repeated id names nothing
        urlencode(shown | {"ns": "elsewhere"}),  # a namespace this console does not serve
        urlencode({k: v for k, v in shown.items() if k != "n"}),
    ):
        refused = await cy.request.get(live + bad)
        assert refused.status == 400 and "\n" not in (await refused.text()).strip()
    assert (await status(guarded, wid)).decisions == []
    await guarded.client.get_workflow_handle(wid).terminate("test over")


async def test_sign_in_never_sends_anyone_to_another_site(browser: Any, console: Console):
    """The `next` a sign-in comes back to is a path of this console, whatever a link, a form
    or htmx's headers name."""
    context = await browser.new_context()
    page = await context.new_page()
    for bad in ("//evil.example/x", "https://evil.example/", "/\\evil.example", "javascript:1"):
        await page.goto(console.url + "/login?" + urlencode({"next": bad}))
        await page.fill("input[name=name]", "ann")
        await page.fill("input[name=token]", console.tokens["ann"])
        await page.click("button:has-text('Sign in')")
        await page.wait_for_selector("[data-testid=person]")
        assert page.url.startswith(console.url + "/"), bad
        await page.click("button:has-text('Sign out')")
    gone = await page.request.get(
        console.url + "/inbox/rows",
        headers={"HX-Request": "true", "HX-Current-URL": "https://evil.example/?q=1"},
    )
    assert gone.headers["hx-redirect"] == "/login?next=%2F"
    await context.close()


async def test_approving_a_whole_run_approves_only_what_was_shown(
    browser: Any, console: Console
) -> None:
    """`POST /decide-run`: each call with the ticket its run page gave for it, as shown;
    anything else (a made-up or swapped ticket, a call named twice, lists that do not line up,
    another run in the form) decides nothing."""
    run = await Runner.run(
        support_agent, "cancel order 46, email them a refund", client=console.client,
        task_queue=console.task_queue, serve=False,
    )  # fmt: skip
    wid = run.workflow_id
    first, second = (i.call_id for i in run.interruptions)
    ann = await signed_in(browser, console, "ann")
    await ann.goto(console.url + "/run?" + urlencode({"ns": "default", "run": wid}))
    await ann.wait_for_selector("[data-testid=approve-all]")
    form = ann.locator("form[data-draft=run]")

    async def values(name: str) -> list[str]:
        got = await form.locator(f"input[name={name}]").evaluate_all("es => es.map(e => e.value)")
        return [str(v) for v in got]

    calls, seens, rounds, tickets = [await values(n) for n in ("call", "seen", "round", "ticket")]
    assert calls == [first, second]
    csrf = (await values("csrf"))[0]
    url = console.url + "/decide-run?" + urlencode({"ns": "default", "run": wid})

    async def post(fields: list[tuple[str, str]]) -> int:
        body = urlencode([("csrf", csrf), ("action", "approve-all"), *fields])
        answer = await ann.request.post(
            url, data=body, headers={"content-type": "application/x-www-form-urlencoded"}
        )
        return answer.status

    def one(call: str, seen: str, round_: str, ticket: str) -> list[tuple[str, str]]:
        return [("call", call), ("seen", seen), ("round", round_), ("ticket", ticket)]

    ids = [("ns", "default"), ("run", wid)]
    swapped = one(second, seens[0], rounds[0], tickets[0])  # first's ticket, second's id
    assert await post(ids + swapped) == 404
    made_up = one(first, seens[0], rounds[0], "9999999999." + "0" * 64)
    assert await post(ids + made_up) == 404
    twice = one(first, seens[0], rounds[0], tickets[0]) * 2
    assert await post(ids + twice) == 400
    ragged = [*one(first, seens[0], rounds[0], tickets[0]), ("call", second)]
    assert await post(ids + ragged) == 400
    elsewhere = [("ns", "default"), ("run", "another-run")]
    assert await post(elsewhere + one(first, seens[0], rounds[0], tickets[0])) == 400
    assert await post(ids) == 400  # no call at all
    assert (await status(console, wid)).decisions == [], "nothing was decided"
    # The calls as shown, with their own tickets: both approved, by ann.
    good = one(first, seens[0], rounds[0], tickets[0]) + one(
        second, seens[1], rounds[1], tickets[1]
    )
    assert await post(ids + good) == 200
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    assert sorted((d.call_id, d.approver) for d in out.decisions) == [
        (first, "ann"),
        (second, "ann"),
    ]
