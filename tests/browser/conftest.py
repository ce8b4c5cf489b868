"""Browser tests: Playwright drives the system's Chromium (never `playwright install`).

CI installs Debian's `chromium` when it is missing (`.ci/run`); where no browser can be had,
these tests are skipped with the reason printed. A console (tokens mode: ann, bob and cy) runs
on the session's dev server with an in-process worker, in the tests' event loop; a second one,
`guarded`, is the approval gateway of a team with an approver directory (ann and bob in
finance, vic an auditor who views every call, cy in no group), a signing key, and two task
queues: one its worker serves, one nobody polls.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client

from hitl.console import ConsoleSettings, start_console
from hitl.console.auth import add_user
from hitl.signing import key_id_for, new_key_pair, private_key_pem
from hitl.wire import ApproverDirectory, ApproverEntry
from hitl.worker.devserver import DevServer
from tests.agents import (
    closing_agent,
    notes_agent,
    reserving_agent,
    signed_treasury,
    support_agent,
    treasury_agent,
)
from tests.helpers import queue_name, serving

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = os.environ.get("HITL_SCREENSHOTS")
"""A folder to keep the tests' screenshots in (`make screenshots`: docs/img)."""


def chromium_path() -> str | None:
    """The system's Chromium, if there is one."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest_asyncio.fixture(scope="session")
async def browser() -> AsyncIterator[Any]:
    path = chromium_path()
    if path is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium); browser tests skipped")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.skip("playwright is not installed; browser tests skipped")
    async with async_playwright() as p:
        launched = await p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield launched
        await launched.close()


@dataclass
class Console:
    """The console under test: its URL, tokens, task queue and the client it reads with."""

    url: str
    tokens: dict[str, str]
    task_queue: str
    client: Client
    idle_queue: str = ""
    """A task queue the console lists and no worker polls (`guarded` only)."""
    parked_queue: str = ""
    """A task queue the console lists whose worker a test runs for a while (`guarded` only)."""


@pytest_asyncio.fixture(scope="session")
async def console(
    dev_server: DevServer, dev_client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Console]:
    users = tmp_path_factory.mktemp("console") / "users.json"
    tokens = {name: add_user(users, name) for name in ("ann", "bob", "cy")}
    agents = (support_agent, treasury_agent, closing_agent, notes_agent, reserving_agent)
    async with serving(dev_client, *agents) as tq:
        server, _ = await start_console(
            ConsoleSettings(
                port=0,
                address=dev_server.address,
                auth="tokens",
                users_file=str(users),
                task_queues=[tq],
            )
        )
        try:
            yield Console(server.url, tokens, tq, dev_client)
        finally:
            await server.stop()


@pytest_asyncio.fixture(scope="session")
async def guarded(
    dev_server: DevServer, dev_client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Console]:
    """A team's console: approver directory, viewers, a gateway key, an unpolled queue."""
    tmp = tmp_path_factory.mktemp("guarded")
    users = tmp / "users.json"
    tokens = {name: add_user(users, name) for name in ("ann", "bob", "cy", "vic")}
    key, public = new_key_pair()
    (tmp / "console.key").write_bytes(private_key_pem(key))
    directory = ApproverDirectory(
        approvers={
            "ann": ApproverEntry(groups=["finance"]),
            "bob": ApproverEntry(groups=["finance"]),
            "vic": ApproverEntry(groups=["audit"]),
            "console": ApproverEntry(gateway=True, keys={key_id_for(public): public}),
        }
    )
    (tmp / "approvers.json").write_text(directory.model_dump_json())
    idle, parked = queue_name("idle"), queue_name("parked")
    async with serving(
        dev_client, signed_treasury, treasury_agent, support_agent, directory=directory
    ) as tq:
        server, _ = await start_console(
            ConsoleSettings(
                port=0,
                address=dev_server.address,
                auth="tokens",
                users_file=str(users),
                task_queues=[tq, idle, parked],
                signing_key=str(tmp / "console.key"),
                approvers=str(tmp / "approvers.json"),
                viewers=["group:audit"],
            )
        )
        try:
            yield Console(server.url, tokens, tq, dev_client, idle, parked)
        finally:
            await server.stop()


async def signed_in(browser: Any, console: Console, who: str) -> Any:
    """A new browser page, signed in to the console as `who` (through the sign-in form)."""
    context = await browser.new_context()
    page = await context.new_page()
    await page.goto(console.url + "/")
    await page.fill("input[name=name]", who)
    await page.fill("input[name=token]", console.tokens[who])
    await page.click("button:has-text('Sign in')")
    await page.wait_for_selector("[data-testid=person]")
    return page


def row_of(page: Any, wid: str, call_id: str | None = None) -> Any:
    """The inbox row of one call of one run (call ids like `t1.1` repeat across runs), or of
    the run (an unconfirmed row stands for its run)."""
    selector = f"tr[data-run={json.dumps(wid)}]"
    if call_id is not None:
        selector += f"[data-call={json.dumps(call_id)}]"
    return page.locator(selector)


async def shot(page: Any, name: str) -> None:
    """Keep a screenshot when `HITL_SCREENSHOTS` names a folder."""
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True)
