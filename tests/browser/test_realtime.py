"""Realtime approvals: a run's approval requests over the console's WebSocket, in Chromium.

The page's own script opens the socket (the browser sends the session cookie and the console's
origin), as an app built on the console would; a socket opened from another origin, or without
a session, is refused; malformed or unannounced messages decide nothing.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import pytest
import websockets

from hitl.console.realtime import REALTIME
from hitl.wire import RunOutput
from tests.agents import support_agent
from tests.browser.conftest import Console, signed_in
from tests.browser.test_console import park, status
from tests.helpers import tool_activity_count, wait_for

OPEN = """(url) => {
  window.__msgs = [];
  window.__ws = new WebSocket(url);
  window.__ws.onmessage = (e) => window.__msgs.push(JSON.parse(e.data));
  return new Promise((ok) => { window.__ws.onopen = () => ok(true); });
}"""


def socket_url(console: Console, wid: str) -> str:
    base = console.url.replace("http://", "ws://")
    return base + REALTIME + "?" + urlencode({"ns": "default", "run": wid})


async def messages(page: Any) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = await page.evaluate("() => window.__msgs")
    return got


async def wait_message(page: Any, kind: str, after: int = 0) -> dict[str, Any]:
    async def seen() -> bool:
        return any(m["type"] == kind for m in (await messages(page))[after:])

    await wait_for(seen, what=f"a {kind} message")
    return next(m for m in (await messages(page))[after:] if m["type"] == kind)


async def test_approve_a_call_over_the_runs_socket(browser: Any, console: Console) -> None:
    wid, call_id = await park(console, support_agent, "cancel order 77")
    page = await signed_in(browser, console, "ann")
    assert await page.evaluate(OPEN, socket_url(console, wid))
    asked = await wait_message(page, "tool_approval_requested")
    assert (asked["call_id"], asked["tool_name"], asked["you_may_decide"]) == (
        call_id,
        "cancel_order",
        True,
    )
    bad = [
        "not json",
        json.dumps({"type": "approve_everything"}),
        json.dumps({"type": "approve_tool_call", "call_id": call_id}),
        json.dumps({"type": "approve_tool_call", "call_id": call_id, "seen_sha256": "0" * 64}),
        json.dumps({"type": "approve_tool_call", "call_id": "t9.9", "seen_sha256": "x"}),
        json.dumps({"type": "reject_tool_call", "call_id": call_id, "seen_sha256": "x" * 201}),
    ]
    for i, text in enumerate(bad):
        before = len(await messages(page))
        await page.evaluate("(t) => window.__ws.send(t)", text)
        error = await wait_message(page, "error", before)
        assert error["error"] in ("InvalidMessage", "NotAnnounced"), (i, error)
    assert (await status(console, wid)).pending, "nothing was decided"
    before = len(await messages(page))
    approve = {"type": "approve_tool_call", "call_id": call_id, "seen_sha256": asked["seen_sha256"]}
    await page.evaluate("(t) => window.__ws.send(t)", json.dumps(approve))
    decided = await wait_message(page, "decided", before)
    assert (decided["call_id"], decided["kind"]) == (call_id, "approve")
    await wait_message(page, "tool_call_settled", before)
    await wait_message(page, "run_settled", before)
    out = await console.client.get_workflow_handle(wid, result_type=RunOutput).result()
    [d] = out.decisions
    assert (d.kind, d.approver, d.client) == ("approve", "ann", "console/realtime")


@pytest.mark.parametrize("origin", ["http://evil.example", None])
async def test_a_socket_from_another_origin_or_without_a_session_is_refused(
    browser: Any, console: Console, origin: str | None
) -> None:
    wid, _ = await park(console, support_agent, "cancel order 78")
    page = await signed_in(browser, console, "bob")
    cookies = {c["name"]: c["value"] for c in await page.context.cookies()}
    headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}
    if origin is None:  # the console's own origin, but no session
        origin, headers = console.url, {}
    # The handshake itself is refused: the socket never opens.
    with pytest.raises(websockets.exceptions.InvalidStatus) as err:
        async with websockets.connect(
            socket_url(console, wid),
            origin=origin,  # type: ignore[arg-type]
            additional_headers=headers,
        ):
            pass
    assert err.value.response.status_code == 403
    assert (await status(console, wid)).pending, "nothing was decided"


async def test_reject_a_call_over_the_runs_socket(browser: Any, console: Console) -> None:
    """`reject_tool_call` with a message: recorded as the person's rejection through the
    console, the tool never runs, and the model reads the message."""
    wid, call_id = await park(console, support_agent, "cancel order 79")
    page = await signed_in(browser, console, "ann")
    assert await page.evaluate(OPEN, socket_url(console, wid))
    asked = await wait_message(page, "tool_approval_requested")
    before = len(await messages(page))
    reject = {
        "type": "reject_tool_call",
        "call_id": call_id,
        "seen_sha256": asked["seen_sha256"],
        "message": "the customer called back",
        "reason": "duplicate request",
    }
    await page.evaluate("(t) => window.__ws.send(t)", json.dumps(reject))
    decided = await wait_message(page, "decided", before)
    assert (decided["call_id"], decided["kind"]) == (call_id, "reject")
    await wait_message(page, "run_settled", before)
    handle = console.client.get_workflow_handle(wid, result_type=RunOutput)
    out = await handle.result()
    [d] = out.decisions
    assert (d.kind, d.approver, d.client) == ("reject", "ann", "console/realtime")
    assert (d.message, d.reason) == ("the customer called back", "duplicate request")
    assert tool_activity_count(await handle.fetch_history()) == 0
    assert "the customer called back" in out.model_dump_json(), "the model was answered with it"
