"""The approval console in a real Chromium: a person signs in, finds a paused run's call in the
inbox and decides it. Every test checks what the run recorded, not only the page."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from hitl import Runner
from hitl.console.urls import decide_url
from hitl.wire import DecisionInput, RunOutput, RunStatus
from tests.agents import closing_agent, notes_agent, support_agent, treasury_agent
from tests.browser.conftest import Console, row_of, shot, signed_in
from tests.helpers import wait_for

XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'


async def park(console: Console, agent: Any, text: str) -> tuple[str, str]:
    """Start a run that pauses; its workflow id and its (first) pending call id."""
    result = await Runner.run(
        agent, text, client=console.client, task_queue=console.task_queue, serve=False
    )
    return result.workflow_id, result.interruptions[0].call_id


async def status(console: Console, wid: str) -> RunStatus:
    got: RunStatus = await console.client.get_workflow_handle(wid).query(
        "status", result_type=RunStatus
    )
    return got


async def open_call(page: Any, console: Console, wid: str, call_id: str) -> None:
    """From the inbox, as a person would: wait for the call's row (it updates live), click it."""
    await page.goto(console.url + "/?" + urlencode({"q": wid}))
    row = row_of(page, wid, call_id).locator("a")
    await row.wait_for(timeout=15_000)
    await row.click()
    await page.wait_for_selector("[data-testid=title]")


async def test_sign_in_see_the_call_in_the_inbox_and_approve_it(browser: Any, console: Console):
    wid, call_id = await park(console, support_agent, "cancel order 31")
    page = await signed_in(browser, console, "ann")
    await page.goto(console.url + "/")
    await row_of(page, wid, call_id).wait_for(timeout=15_000)
    assert "support agent" in (await row_of(page, wid, call_id).inner_text()).lower()
    assert await row_of(page, wid, call_id).locator("[data-testid=no-worker]").count() == 0
    await shot(page, "console-inbox")
    await open_call(page, console, wid, call_id)
    assert await page.locator("[data-testid=primary]").inner_text() == "Approve"
    await shot(page, "console-call")
    await page.click("[data-testid=primary]")
    outcome = await page.locator("[data-testid=outcome]").inner_text()
    assert outcome == "Approved by ann via console"
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    [d] = out.decisions
    assert (d.kind, d.approver, d.client, d.call_id) == ("approve", "ann", "console", call_id)
    assert out.final_output == "cancel_order: Cancelled order 31"


async def test_reject_with_a_message_for_the_model(browser: Any, console: Console) -> None:
    wid, call_id = await park(console, support_agent, "cancel order 32")
    page = await signed_in(browser, console, "bob")
    await open_call(page, console, wid, call_id)
    await page.fill("textarea[name=message]", "Order 32 already shipped; offer a return.")
    await page.click("[data-testid=secondary]")
    assert (await page.locator("[data-testid=outcome]").inner_text()).startswith("Rejected by bob")
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    [d] = out.decisions
    assert (d.kind, d.approver, d.message) == (
        "reject",
        "bob",
        "Order 32 already shipped; offer a return.",
    )
    assert "Order 32 already shipped; offer a return." in str(out.final_output)


async def test_edit_the_arguments_then_approve(browser: Any, console: Console) -> None:
    wid, call_id = await park(console, support_agent, "cancel order 33")
    page = await signed_in(browser, console, "ann")
    await open_call(page, console, wid, call_id)
    await page.click("summary:has-text('Edit the arguments')")
    await page.fill("input[name='arg.order_id']", "34")
    await page.click("[data-testid=edit-preview]")
    await page.wait_for_selector("[data-testid=edit-approve]")
    await page.click("[data-testid=edit-approve]")
    headline = await page.locator("[data-testid=outcome]").inner_text()
    assert headline == "Approved with edited arguments by ann via console"
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    [d] = out.decisions
    assert json.loads(d.arguments or "{}") == {"order_id": 34}
    assert json.loads(d.original_arguments or "{}") == {"order_id": 33}
    assert "Cancelled order 34" in str(out.final_output)


async def test_a_call_someone_else_decided_a_moment_ago(browser: Any, console: Console) -> None:
    # Two calls, so the run stays open after the first is decided elsewhere.
    wid, call_id = await park(console, support_agent, "cancel order 35, email them a refund")
    page = await signed_in(browser, console, "ann")
    await open_call(page, console, wid, call_id)
    # Meanwhile bob rejects it from the CLI (another client) while ann's page is open.
    handle = console.client.get_workflow_handle(wid)
    await handle.execute_update("reject", DecisionInput(call_id=call_id, approver="bob"))
    await page.click("[data-testid=primary]")
    assert (
        await page.locator("[data-testid=outcome]").inner_text()
        == "Someone else decided this call a moment ago"
    )
    assert await page.locator("[data-testid=error-type]").inner_text() == "AlreadyDecided"
    assert "Traceback" not in await page.content()
    recorded = [d for d in (await status(console, wid)).decisions if d.call_id == call_id]
    assert [(d.kind, d.approver) for d in recorded] == [("reject", "bob")]
    await handle.terminate("test over")


async def test_four_eyes_needs_a_second_person(browser: Any, console: Console) -> None:
    wid, call_id = await park(console, treasury_agent, "release 9000")
    ann = await signed_in(browser, console, "ann")
    await open_call(ann, console, wid, call_id)
    assert "Needs 2 different people" in await ann.locator("[data-testid=approvals]").inner_text()
    stale = await signed_in(browser, console, "ann")  # a second tab, opened before she approves
    await open_call(stale, console, wid, call_id)
    await ann.click("[data-testid=primary]")
    assert "needs 1 more approver" in await ann.locator("[data-testid=outcome]").inner_text()
    pending = (await status(console, wid)).pending
    assert [a.approver for a in pending[0].approvals] == ["ann"]
    # ann cannot be the second person: the tab she left open still offers the button, and
    # pressing it changes nothing.
    await stale.click("[data-testid=primary]")
    assert "needs 1 more approver" in await stale.locator("[data-testid=outcome]").inner_text()
    pending = (await status(console, wid)).pending
    assert [a.approver for a in pending[0].approvals] == ["ann"]
    bob = await signed_in(browser, console, "bob")
    await open_call(bob, console, wid, call_id)
    assert "ann" in await bob.locator("[data-testid=approvals]").inner_text()
    await bob.click("[data-testid=primary]")
    assert (await bob.locator("[data-testid=outcome]").inner_text()).startswith("Approved by bob")
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    [d] = out.decisions
    assert [a.approver for a in d.approvals] == ["ann", "bob"]
    assert out.final_output == "Released $9000"


async def test_hostile_arguments_render_inert(browser: Any, console: Console) -> None:
    wid, call_id = await park(console, support_agent, f"email them a refund notice: {XSS}")
    page = await signed_in(browser, console, "cy")
    dialogs: list[str] = []
    page.on("dialog", lambda d: dialogs.append(d.message))
    await open_call(page, console, wid, call_id)
    assert XSS.replace('"', '\\"') in await page.locator("[data-testid=arguments]").inner_text()
    assert await page.evaluate("window.__xss") is None
    assert await page.locator("img[src=x]").count() == 0
    await page.goto(console.url + "/?" + urlencode({"q": wid}))
    await row_of(page, wid, call_id).wait_for()
    assert await page.evaluate("window.__xss") is None and dialogs == []
    # Decide it so the run ends; the recorded decision is cy's.
    await open_call(page, console, wid, call_id)
    await page.click("[data-testid=primary]")
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    assert [(d.approver, d.client) for d in out.decisions] == [("cy", "console")]


async def test_forged_posts_are_refused(browser: Any, console: Console) -> None:
    """A form posted without the session's token (another site, a stale page) changes nothing."""
    wid, call_id = await park(console, support_agent, "cancel order 36")
    page = await signed_in(browser, console, "ann")
    url = console.url + decide_url("default", wid, call_id)
    answer = await page.request.post(url, form={"action": "approve", "csrf": "forged"})
    assert answer.status == 403
    evil = await page.request.post(
        url, form={"action": "approve"}, headers={"Origin": "http://evil.example"}
    )
    assert evil.status == 403
    assert (await status(console, wid)).decisions == []
    await console.client.get_workflow_handle(wid).terminate("test over")


async def test_live_inbox_shows_a_new_call_without_a_reload(browser: Any, console: Console):
    """The rows and the views' counts follow the calls while the page stays open."""
    page = await signed_in(browser, console, "bob")
    await page.goto(console.url + "/")
    everything = page.locator("[data-testid=views] #view-all")
    before = await everything.inner_text()  # "All (N)"
    wid, call_id = await park(console, support_agent, "cancel order 37")
    await row_of(page, wid, call_id).wait_for(timeout=20_000)  # htmx polling

    def counted(n: int) -> Callable[[], Awaitable[bool]]:
        async def shows() -> bool:
            return await everything.inner_text() == f"All ({n})"

        return shows

    n = int(before.removeprefix("All (").removesuffix(")"))
    await wait_for(counted(n + 1), timeout=20, what=f"the count to go from {before} up by one")
    await console.client.get_workflow_handle(wid).terminate("test over")

    async def gone() -> bool:
        return await row_of(page, wid, call_id).count() == 0

    await wait_for(gone, timeout=20, what="the call to leave the inbox")
    await wait_for(counted(n), timeout=20, what=f"the count to be back at {before}")


async def test_a_run_that_finished_meanwhile_says_what_it_recorded(browser: Any, console: Console):
    wid, call_id = await park(console, support_agent, "cancel order 38")
    page = await signed_in(browser, console, "ann")
    await open_call(page, console, wid, call_id)
    handle = console.client.get_workflow_handle(wid, result_type=RunOutput)
    await handle.execute_update("approve", DecisionInput(call_id=call_id, approver="bob"))
    await handle.result()  # its only call was approved: the run finished
    await page.fill("textarea[name=message]", "too late")
    await page.click("[data-testid=secondary]")
    assert await page.locator("[data-testid=outcome]").inner_text() == "The run has finished"
    assert (
        "It had recorded: Approved by bob"
        in await page.locator("[data-testid=detail]").inner_text()
    )
    out = await handle.result()
    assert [(d.kind, d.approver) for d in out.decisions] == [("approve", "bob")]


# ----------------------------------------------------------------------------- a day of real use


async def test_an_edit_leaves_what_nobody_touched_as_it_was(browser: Any, console: Console):
    """The subject alone is edited: the body's paragraphs, blank lines and indentation reach
    the tool byte for byte (it was once a single-line input that ran them together)."""
    text = "Email them a refund.\n\nSecond paragraph.\n    Indented line.\n\nThanks, ann"
    result = await Runner.run(
        support_agent, text, client=console.client, task_queue=console.task_queue, serve=False
    )
    [item] = result.interruptions
    wid, call_id = result.workflow_id, item.call_id
    assert json.loads(item.arguments)["body"] == text
    page = await signed_in(browser, console, "ann")
    await open_call(page, console, wid, call_id)
    await page.click("summary:has-text('Edit the arguments')")
    subject = page.locator("textarea[name='arg.subject']")
    await subject.fill("Your refund\nis on its way")  # typed over two lines
    await page.click("[data-testid=edit-preview]")
    await page.wait_for_selector("[data-testid=edit-approve]")
    await page.click("[data-testid=edit-approve]")
    headline = await page.locator("[data-testid=outcome]").inner_text()
    assert headline == "Approved with edited arguments by ann via console"
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    [d] = out.decisions
    ran = json.loads(d.arguments or "{}")
    assert ran == {"subject": "Your refund\nis on its way", "body": text}


async def test_four_eyes_reads_right_for_the_first_approver(browser: Any, console: Console):
    """After ann approves, her page and inbox say she waits for someone else (no button to
    press again), and the audit names both approvers once bob approves."""
    wid, call_id = await park(console, treasury_agent, "release 7100")
    ann = await signed_in(browser, console, "ann")
    await open_call(ann, console, wid, call_id)
    await ann.click("[data-testid=primary]")
    assert "needs 1 more approver" in await ann.locator("[data-testid=outcome]").inner_text()
    await open_call(ann, console, wid, call_id)
    mine = await ann.locator("[data-testid=you-approved]").inner_text()
    assert "You approved this call" in mine and "1 more approval from someone else" in mine
    assert await ann.locator("[data-testid=primary]").count() == 0
    await ann.goto(console.url + "/?" + urlencode({"q": wid}))
    tag = row_of(ann, wid, call_id).locator("[data-testid=waiting-for-others]")
    assert await tag.inner_text() == "you approved: waiting for others"
    bob = await signed_in(browser, console, "bob")
    await open_call(bob, console, wid, call_id)
    assert await bob.locator("[data-testid=you-approved]").count() == 0
    await bob.click("[data-testid=primary]")
    await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    await ann.goto(console.url + "/audit?" + urlencode({"ns": "default", "run": wid}))
    deciders = await ann.locator("[data-testid=deciders]").inner_text()
    assert deciders.startswith("ann") and "bob" in deciders


async def test_a_reason_typed_before_rejecting_is_kept(browser: Any, console: Console) -> None:
    wid, call_id = await park(console, support_agent, "cancel order 36")
    page = await signed_in(browser, console, "bob")
    await open_call(page, console, wid, call_id)
    await page.fill("textarea[name=reason]", "Customer called:\nkeep the order.")
    await page.fill("textarea[name=message]", "Do not cancel; the customer changed their mind.")
    await page.click("[data-testid=secondary]")
    assert (await page.locator("[data-testid=outcome]").inner_text()).startswith("Rejected by bob")
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    [d] = out.decisions
    assert (d.kind, d.reason) == ("reject", "Customer called:\nkeep the order.")
    assert d.message == "Do not cancel; the customer changed their mind."


async def test_no_edit_form_for_a_tool_that_forbids_edits(browser: Any, console: Console):
    wid, call_id = await park(console, closing_agent, "close ACC-7")
    page = await signed_in(browser, console, "ann")
    await open_call(page, console, wid, call_id)
    assert await page.locator("[data-testid=primary]").count() == 1
    assert await page.locator("summary:has-text('Edit the arguments')").count() == 0
    await page.click("[data-testid=primary]")
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    assert out.final_output == "Closed ACC-7"


async def test_a_search_that_finds_nothing_says_what_waits(browser: Any, console: Console):
    wid, call_id = await park(console, support_agent, "cancel order 37")
    page = await signed_in(browser, console, "ann")
    await page.goto(console.url + "/")
    await row_of(page, wid, call_id).wait_for(timeout=15_000)
    await page.goto(console.url + "/?" + urlencode({"q": "no-such-thing-anywhere"}))
    said = await page.locator("[data-testid=no-match]").inner_text()
    assert said.startswith("No call matches these filters;") and "wait" in said
    assert "Nothing waits for a decision" not in await page.content()
    await console.client.get_workflow_handle(wid).terminate("test over")


async def test_the_call_page_learns_of_a_decision_made_elsewhere(browser: Any, console: Console):
    """While ann types a reason, bob approves from the CLI: her page says so within seconds,
    its buttons stop offering, and neither her focus nor her text moves."""
    wid, call_id = await park(console, support_agent, "cancel order 38, email them a refund")
    page = await signed_in(browser, console, "ann")
    await open_call(page, console, wid, call_id)
    reason = page.locator("textarea[name=reason]")
    await reason.click()
    await reason.type("Checking with the customer first")
    handle = console.client.get_workflow_handle(wid)
    await handle.execute_update("approve", DecisionInput(call_id=call_id, approver="bob"))
    notice = page.locator("[data-testid=live-notice]")
    await notice.wait_for(timeout=15_000)
    assert "This call no longer waits as shown" in await notice.inner_text()
    assert await page.locator("#btn-approve").is_disabled()
    assert await reason.input_value() == "Checking with the customer first"
    assert await page.evaluate("document.activeElement.name") == "reason"
    await handle.terminate("test over")


async def test_the_inbox_refresh_never_moves_the_focus(browser: Any, console: Console) -> None:
    wid, call_id = await park(console, support_agent, "cancel order 39")
    page = await signed_in(browser, console, "ann")
    await page.goto(console.url + "/")
    link = row_of(page, wid, call_id).locator("a")
    await link.wait_for(timeout=15_000)
    await link.focus()
    # Another call arrives: the rows change and are swapped; the focused link stays focused.
    other, other_call = await park(console, support_agent, "cancel order 40")
    await row_of(page, other, other_call).wait_for(timeout=15_000)
    focused = await page.evaluate("document.activeElement.getAttribute('href')")
    assert focused == await link.get_attribute("href")
    # Nothing changes: the polls answer "as you have it" and nothing is redrawn while ann
    # types into the search box.
    await page.goto(console.url + "/?" + urlencode({"q": wid}))
    await row_of(page, wid, call_id).wait_for(timeout=15_000)
    await page.evaluate("document.getElementById('inbox').dataset.mark = 'first'")
    polls = "performance.getEntriesByType('resource').filter(e => e.name.includes('/inbox/rows'))"
    before = await page.evaluate(f"{polls}.length")
    await page.locator("input[name=q]").click()
    await page.keyboard.press("End")
    await page.keyboard.type(" and more")
    await page.wait_for_function(f"() => {polls}.length >= {before + 2}")
    assert await page.evaluate("document.getElementById('inbox').dataset.mark") == "first"
    assert await page.locator("input[name=q]").input_value() == wid + " and more"
    assert await page.evaluate("document.activeElement.name") == "q"
    for w in (wid, other):
        await console.client.get_workflow_handle(w).terminate("test over")


async def test_what_was_typed_survives_a_session_that_ended(browser: Any, console: Console):
    """bob types a reason and a message; his session ends before he presses Reject. The post
    decides nothing and says so; he signs in, is back on the call with his text, and rejects."""
    wid, call_id = await park(console, support_agent, "cancel order 41")
    page = await signed_in(browser, console, "bob")
    await open_call(page, console, wid, call_id)
    await page.fill("textarea[name=reason]", "Customer asked:\nkeep it")
    await page.fill("textarea[name=message]", "Keep the order; offer a discount.")
    await page.context.clear_cookies()  # the session ends (expired, or signed out elsewhere)
    await page.click("[data-testid=secondary]")
    said = await page.locator("[data-testid=login-error]").inner_text()
    assert "nothing was decided" in said
    assert (await status(console, wid)).pending[0].call_id == call_id
    await page.fill("input[name=name]", "bob")
    await page.fill("input[name=token]", console.tokens["bob"])
    await page.click("button:has-text('Sign in')")
    await page.wait_for_selector("[data-testid=title]")
    await page.wait_for_load_state("domcontentloaded")  # the page's script has run
    assert await page.locator("textarea[name=reason]").input_value() == "Customer asked:\nkeep it"
    assert await page.locator("textarea[name=message]").input_value() == (
        "Keep the order; offer a discount."
    )
    await page.click("[data-testid=secondary]")
    assert (await page.locator("[data-testid=outcome]").inner_text()).startswith("Rejected by bob")
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    [d] = out.decisions
    assert (d.kind, d.reason, d.message) == (
        "reject", "Customer asked:\nkeep it", "Keep the order; offer a discount."
    )  # fmt: skip
    # Recorded: the drafts are cleared, so the call's page starts empty next time.
    await page.wait_for_load_state("domcontentloaded")  # the outcome page's script has run
    kept = await page.evaluate(
        "Object.keys(sessionStorage).filter(k => k.includes(" + json.dumps(call_id) + "))"
    )
    assert kept == []


async def test_pages_read_well_on_a_phone_and_in_any_script(browser: Any, console: Console):
    """At 375 px no word of a request's title breaks across lines and the ids columns step
    aside; Korean, Chinese and emoji read as themselves in the transcript; the arguments are
    shown once."""
    text = "email them a refund: 환불 退款 🙂"
    wid, call_id = await park(console, support_agent, text)
    context = await browser.new_context(viewport={"width": 375, "height": 800})
    page = await context.new_page()
    await page.goto(console.url + "/")
    await page.fill("input[name=name]", "ann")
    await page.fill("input[name=token]", console.tokens["ann"])
    await page.click("button:has-text('Sign in')")
    await page.goto(console.url + "/?" + urlencode({"q": wid}))
    link = row_of(page, wid, call_id).locator("a")
    await link.wait_for(timeout=15_000)
    broken = await link.evaluate(
        """a => a.textContent.split(/\\s+/).filter(Boolean).filter(word => {
            const at = a.textContent.indexOf(word), r = document.createRange();
            r.setStart(a.firstChild, at); r.setEnd(a.firstChild, at + word.length);
            return r.getClientRects().length > 1;
        })"""
    )
    assert broken == []
    wide = row_of(page, wid, call_id).locator("td.wide")
    assert await wide.count() == 2 and not await wide.first.is_visible()
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 375, "nothing overflows sideways"
    await link.click()
    await page.wait_for_selector("[data-testid=title]")
    said = await page.locator("[data-testid=transcript]").inner_text()
    assert "환불 退款 🙂" in said and "\\u" not in said
    message = await page.locator("[data-testid=message]").inner_text()
    assert "Arguments:" not in message and "subject" not in message
    assert "Refund for your order" in await page.locator("[data-testid=arguments]").inner_text()
    await context.close()
    await console.client.get_workflow_handle(wid).terminate("test over")


async def test_approve_a_whole_run_in_two_clicks(browser: Any, console: Console) -> None:
    """A run waiting on two calls: from either call, one link to the run's page (each call
    shown whole) and one button approve both, each for the arguments shown."""
    result = await Runner.run(
        support_agent, "cancel order 43, email them a refund", client=console.client,
        task_queue=console.task_queue, serve=False,
    )  # fmt: skip
    wid = result.workflow_id
    assert len(result.interruptions) == 2
    page = await signed_in(browser, console, "ann")
    await open_call(page, console, wid, result.interruptions[0].call_id)
    await page.click("[data-testid=whole-run] a")  # click 1
    await page.wait_for_selector("[data-testid=approve-all]")
    cards = page.locator("[data-testid=run-call]")
    assert await cards.count() == 2
    assert "Refund for your order" in await cards.nth(1).inner_text()
    await page.fill("textarea[name=reason]", "Both checked with the customer")
    await page.click("[data-testid=approve-all]")  # click 2
    assert await page.locator("[data-testid=outcome]").inner_text() == "2 of 2 approved"
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    assert sorted((d.call_id, d.kind, d.approver, d.reason) for d in out.decisions) == [
        (i.call_id, "approve", "ann", "Both checked with the customer")
        for i in sorted(result.interruptions, key=lambda i: i.call_id)
    ]


async def test_keys_decide_and_lead_to_the_next_call(browser: Any, console: Console) -> None:
    """`a` then Enter approves (a key alone never decides); the outcome offers the oldest
    other call waiting for the person, and `n` opens it."""
    wid, call_id = await park(console, support_agent, "cancel order 44")
    other, _ = await park(console, support_agent, "cancel order 45")
    page = await signed_in(browser, console, "ann")
    await open_call(page, console, wid, call_id)
    assert "a" in await page.locator("[data-testid=keys]").inner_text()
    await page.wait_for_load_state("domcontentloaded")
    await page.keyboard.press("a")
    assert (await status(console, wid)).pending, "a key alone decides nothing"
    assert await page.evaluate("document.activeElement.id") == "btn-approve"
    await page.keyboard.press("Enter")
    assert (await page.locator("[data-testid=outcome]").inner_text()).startswith("Approved by ann")
    assert "wait" in await page.locator("[data-testid=next]").inner_text()
    await page.wait_for_load_state("domcontentloaded")  # its script has run (as for a person)
    await page.keyboard.press("n")
    await page.wait_for_selector("[data-testid=title]")
    assert "/call?" in page.url and await page.locator("[data-testid=primary]").count() == 1
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    assert [(d.kind, d.approver) for d in out.decisions] == [("approve", "ann")]
    await console.client.get_workflow_handle(other).terminate("test over")


async def test_an_edit_is_approved_only_after_the_edited_call_was_seen(
    browser: Any, console: Console
) -> None:
    """Once an edited path `../../escape.txt` was recorded as approved blind. Now the edit
    opens the edited call as its tool reads it: a refused edit shows why and cannot be
    approved; an accepted one shows its own preview (the new diff) before approving it."""
    wid, call_id = await park(console, notes_agent, "Buy milk")
    page = await signed_in(browser, console, "ann")
    await open_call(page, console, wid, call_id)
    assert "+Buy milk" in await page.locator("[data-testid=preview]").inner_text()
    await page.click("summary:has-text('Edit the arguments')")
    await page.fill("textarea[name='arg.path']", "../../escape.txt")
    await page.click("[data-testid=edit-preview]")
    refused = await page.locator("[data-testid=edit-refused]").inner_text()
    assert "outside the notes folder" in refused
    assert await page.locator("[data-testid=edit-approve]").count() == 0
    pending = (await status(console, wid)).pending
    assert [json.loads(p.arguments)["path"] for p in pending] == ["today.txt"], "nothing changed"
    # Back on the call, the edit typed is still there (kept in the tab) to be fixed.
    await page.click("text=Back to the call")
    await page.wait_for_selector("[data-testid=title]")
    await page.wait_for_load_state("domcontentloaded")
    await page.click("summary:has-text('Edit the arguments')")
    path = page.locator("textarea[name='arg.path']")
    assert await path.input_value() == "../../escape.txt"
    await path.fill("today.txt")
    await page.fill("textarea[name='arg.content']", "Buy milk\nand bread")
    await page.click("[data-testid=edit-preview]")
    shown = await page.locator("[data-testid=preview]").inner_text()
    assert "+and bread" in shown, "the edited call's own preview"
    assert (await status(console, wid)).decisions == [], "seeing decides nothing"
    await page.click("[data-testid=edit-approve]")
    headline = await page.locator("[data-testid=outcome]").inner_text()
    assert headline == "Approved with edited arguments by ann via console"
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    [d] = out.decisions
    assert json.loads(d.arguments or "{}") == {
        "path": "today.txt",
        "content": "Buy milk\nand bread",
    }
    assert str(out.final_output).endswith("Wrote 18 characters to today.txt")
