"""The console's `/insights` page in a real Chromium: a viewer sees every figure, anyone else
their own approver row only, and an approver name someone sent as HTML renders as text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client

from hitl import Runner
from hitl.cli.insights import read_window
from hitl.console import ConsoleSettings, start_console
from hitl.console.auth import add_user
from hitl.wire import UPDATE_APPROVE, UPDATE_REJECT, DecisionInput, RunOutput
from hitl.worker.devserver import DevServer
from tests.agents import support_agent
from tests.browser.conftest import Console, shot, signed_in
from tests.helpers import serving, wait_for

XSS = '<img src=x onerror="window.__xss=1">'


async def park(client: Client, tq: str, text: str) -> tuple[Any, str]:
    result = await Runner.run(support_agent, text, client=client, task_queue=tq, serve=False)
    handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
    return handle, result.interruptions[0].call_id


@pytest_asyncio.fixture(scope="module")
async def decided(
    dev_server: DevServer, dev_client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Console]:
    """A console (ann views everything, cy does not) over a queue where ann approved one
    call, cy rejected one, someone named in HTML approved one, and one call waits."""
    users = tmp_path_factory.mktemp("insights") / "users.json"
    tokens = {name: add_user(users, name) for name in ("ann", "cy")}
    async with serving(dev_client, support_agent) as tq:
        for approver, update in (("ann", UPDATE_APPROVE), ("cy", UPDATE_REJECT),
                                 (XSS, UPDATE_APPROVE)):  # fmt: skip
            handle, call_id = await park(dev_client, tq, "cancel order 12")
            await handle.execute_update(update, DecisionInput(call_id=call_id, approver=approver))
            await handle.result()
        await park(dev_client, tq, "cancel order 13")
        since = datetime.now(UTC) - timedelta(hours=1)

        async def listed() -> bool:  # visibility catches up before the console's first read
            got = await read_window(dev_client, since, limit=10, queues=[tq], timeout=5)
            return got.read == 4 and len(got.decisions) == 3

        await wait_for(listed, what="four runs in visibility")
        server, _ = await start_console(
            ConsoleSettings(
                port=0,
                address=dev_server.address,
                auth="tokens",
                users_file=str(users),
                task_queues=[tq],
                viewers=["ann"],
            )
        )
        try:
            yield Console(server.url, tokens, tq, dev_client)
        finally:
            await server.stop()


async def test_a_viewer_sees_every_figure_of_the_window(browser: Any, decided: Console) -> None:
    page = await signed_in(browser, decided, "ann")
    await page.click("[data-testid=insights-link]")
    await page.click("[data-testid=windows] a:has-text('last 1h')")
    await page.wait_for_selector("[data-testid=totals]")
    totals = {
        k: await page.locator(f"[data-testid=total-{k}]").inner_text()
        for k in ("approved", "rejected", "expired", "edited", "escalated")
    }
    assert totals == {"approved": "2", "rejected": "1", "expired": "0", "edited": "0",
                      "escalated": "0"}  # fmt: skip
    approvers = await page.locator("[data-testid=by-approver] tbody tr").all_inner_texts()
    assert {row.split("\t")[0] for row in approvers} == {"ann", "cy", XSS}
    # The HTML someone sent as an approver name is text on the page, never markup.
    assert await page.evaluate("window.__xss") is None
    tools = await page.locator("[data-testid=by-tool] tbody tr").all_inner_texts()
    assert [row.split("\t")[:2] for row in tools] == [["cancel_order", "3"]]
    pending = await page.locator("[data-testid=pending] tbody tr").all_inner_texts()
    assert [row.split("\t")[:2] for row in pending] == [["cancel_order", "1"]]
    runs = await page.locator("[data-testid=runs]").inner_text()
    assert "4 runs read of 4 listed" in runs
    assert await page.locator("[data-testid=no-rules]").count() == 1
    await shot(page, "console-insights")


async def test_anyone_else_sees_their_own_approver_row_only(browser: Any, decided: Console):
    page = await signed_in(browser, decided, "cy")
    await page.goto(decided.url + "/insights?window=1h")
    approvers = await page.locator("[data-testid=by-approver] tbody tr").all_inner_texts()
    assert [row.split("\t")[0] for row in approvers] == ["cy"]
    assert await page.locator("[data-testid=own-row]").count() == 1
    assert "ann" not in await page.locator("[data-testid=insights]").inner_text()
    # An unknown window is the default one, not an error.
    await page.goto(decided.url + "/insights?window=%3Cscript%3E")
    current = page.locator("[data-testid=windows] [aria-current=page]")
    assert await current.inner_text() == "last 1d"
