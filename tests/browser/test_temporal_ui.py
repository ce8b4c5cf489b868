"""The Temporal Web UI (the version the dev server ships) on a paused run, in a real Chromium:
the current details render amounts literally and show each update's payload block whole."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hitl.worker.devserver import DevServer, free_port
from tests.browser.conftest import shot
from tests.e2e.test_cli import hitl
from tests.helpers import WorkerProcess, desk_approvers, queue_name

INBOX = "?query=HitlStatus%3D%22awaiting_approval%22%20AND%20ExecutionStatus%3D%22Running%22"


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevServer, str]]:
    tmp = tmp_path_factory.mktemp("ui")
    server = DevServer(ui_port=free_port(), db_filename=tmp / "ui.db", log_file=tmp / "ui.log")
    server.start()
    try:
        yield server, str(tmp)
    finally:
        server.stop()


async def test_current_details_render_amounts_literally_and_payloads_whole(
    browser: Any, ui_server: tuple[DevServer, str]
) -> None:
    server, tmp = ui_server
    tq, wid = queue_name("ui"), "ui-refund-1001"
    env = {"HITL_BACKOFFICE_DB": str(Path(tmp) / "backoffice.sqlite"), **desk_approvers(Path(tmp))}
    with WorkerProcess(server.address, tq, agents="hitl.examples.refund_desk:agent", env=env):
        started = await asyncio.to_thread(
            hitl,
            server.address,
            "--task-queue",
            tq,
            "run",
            "Refund desk",
            "Order 1001 arrived broken: please refund $250 (not $25).",
            "--id",
            wid,
            "--wait",
        )
        assert "awaiting_approval" in started.stdout, started.stderr
        base = f"http://127.0.0.1:{server.ui_port}/namespaces/default/workflows"
        page = await browser.new_page(viewport={"width": 1400, "height": 1000})
        await page.goto(base + INBOX)
        await page.get_by_text(wid).first.wait_for(timeout=20_000)  # the inbox lists it
        await shot(page, "temporal-ui-inbox")
        await page.goto(f"{base}/{wid}")
        await page.click("a:has-text('User Metadata')")
        details = page.frame_locator("#user-metadata-current-details")
        body = details.locator("body")
        await body.get_by_text("To approve").wait_for(timeout=20_000)
        text = await body.inner_text()
        # Literally: the UI's markdown reads `$...$` as math when unescaped.
        assert "refund $250.00 of the $250.00 order" in text, text
        assert "\\$" not in text
        summary = await page.frame_locator("#user-metadata-summary").locator("body").inner_text()
        assert "please refund $250 (not $25)." in summary, summary
        # Each update's payload block is whole and fits the panel (no horizontal scrolling).
        blocks = details.locator("pre")
        assert await blocks.count() == 2
        first = await blocks.nth(0).inner_text()
        # The run names its calls itself (`t<turn>.<n>`), whatever id the model gave.
        assert re.match(r'\{\n  "call_id": "t\d+\.\d+"', first) and first.rstrip().endswith("}")
        assert '"approver": "you"' in first
        widths = await blocks.evaluate_all("els => els.map(e => e.scrollWidth - e.clientWidth)")
        assert widths == [0, 0], widths
        assert re.search(rf"hitl approve {re.escape(wid)} t\d+\.\d+", text), text
        await shot(page, "temporal-ui-current-details")
