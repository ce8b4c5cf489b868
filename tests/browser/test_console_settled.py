"""The console's *Decided* and *Expired* views in a real Chromium: a call decided in the console
moves from *Waiting for me* to *Decided* (who and what), and one whose deadline passes shows
under *Expired*; each checked against what the run recorded."""

from __future__ import annotations

from typing import Any

from hitl import Runner
from hitl.wire import RunOutput
from tests.agents import reserving_agent, support_agent
from tests.browser.conftest import Console, row_of, shot, signed_in
from tests.browser.test_console import open_call, park


async def view_count(page: Any, view: str) -> str:
    return str(await page.locator(f"[data-testid=views] a[data-view={view}]").inner_text())


async def test_a_decided_call_shows_under_decided_with_who_and_what(
    browser: Any, console: Console
) -> None:
    wid, call_id = await park(console, support_agent, "cancel order 61")
    page = await signed_in(browser, console, "ann")
    await open_call(page, console, wid, call_id)  # the inbox lists it: pending for ann
    await page.fill("textarea[name=message]", "Order 61 shipped already.")
    await page.click("[data-testid=secondary]")
    await page.locator("[data-testid=outcome]").wait_for()
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    [d] = out.decisions
    assert (d.kind, d.approver, d.call_id) == ("reject", "ann", call_id)

    await page.goto(console.url + "/?view=decided&q=" + wid)
    row = row_of(page, wid, call_id)
    await row.wait_for(timeout=20_000)  # the run closed: its result names the decision
    text = await row.inner_text()
    assert "Rejected by ann" in text and "cancel_order" in text, text
    assert "The model was told: Order 61 shipped already." in text
    assert await row.get_attribute("data-outcome") == "reject"
    assert "Decided (" in await view_count(page, "decided")
    await shot(page, "console-decided")
    # It no longer waits for anyone, and someone who could have decided it sees it too.
    await page.goto(console.url + "/?view=mine&q=" + wid)
    assert await row_of(page, wid, call_id).count() == 0
    bob = await signed_in(browser, console, "bob")
    await bob.goto(console.url + "/?view=decided&q=" + wid)
    await row_of(bob, wid, call_id).wait_for(timeout=20_000)
    await bob.goto(console.url + "/?view=expired&q=" + wid)
    assert await row_of(bob, wid, call_id).count() == 0, "decided, not expired"


async def test_a_call_whose_deadline_passed_shows_under_expired(
    browser: Any, console: Console
) -> None:
    result = await Runner.run(
        reserving_agent,
        "reserve stock for order 62",
        client=console.client,
        task_queue=console.task_queue,
        serve=False,
    )
    wid, call_id = result.workflow_id, result.interruptions[0].call_id
    page = await signed_in(browser, console, "cy")
    await page.goto(console.url + "/?q=" + wid)
    await row_of(page, wid, call_id).wait_for(timeout=15_000)  # listed while it waits
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    [d] = out.decisions  # nobody decides: its 12 s pass
    assert (d.kind, d.source, d.call_id) == ("expired", "deadline", call_id)

    await page.goto(console.url + "/?view=expired&q=" + wid)
    row = row_of(page, wid, call_id)
    await row.wait_for(timeout=20_000)
    text = await row.inner_text()
    assert "Expired: nobody decided before its deadline" in text and "reserve_stock" in text, text
    assert "Expired (" in await view_count(page, "expired")
    await shot(page, "console-expired")
    await page.goto(console.url + "/?view=decided&q=" + wid)
    assert await row_of(page, wid, call_id).count() == 0, "expired, not decided"
