"""Realtime approvals: one run's approval requests over a WebSocket (`/ws/run?ns=&run=`).

The OpenAI Agents SDK's realtime sessions approve tool calls over their socket
(`approve_tool_call` / `reject_tool_call`). A run's socket here does the same, with the identity,
signing and refusals of every other decision path:

- only a signed-in person's browser (the session cookie) from this console's own origin may
  open it (a page of another site cannot ride the cookie: the `Origin` header must be ours);
- the server sends `{"type": "tool_approval_requested", ...}` for each call the run waits on
  (with the digest of its arguments, `seen_sha256`), `{"type": "tool_call_settled", ...}` when
  a call stops waiting, and `{"type": "run_settled", "phase": ...}` when the run ends;
- the client sends `{"type": "approve_tool_call" | "reject_tool_call", "call_id": ...,
  "seen_sha256": ..., "message"?: ..., "reason"?: ...}`; the decision is the session's
  person's, bound to the arguments the socket announced, signed by the console's gateway
  key and sent as the run's own update, whose checks (still waiting, who may decide)
  apply. Every answer is a `decided` or an `error` message; a refusal changes nothing; the
  socket stays open.

Messages are at most 16 KB; anything else (not JSON, another type, missing fields) is an
`error` message and decides nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from starlette.websockets import WebSocket, WebSocketDisconnect

from hitl.cli.common import _Gone, _Unreadable
from hitl.console.forms import one_text_each
from hitl.console.view import seen_of
from hitl.limits import MAX_TEXT_CHARS

if TYPE_CHECKING:
    from hitl.console.app import Console

log = logging.getLogger("hitl.console")

REALTIME = "/ws/run"
REALTIME_CLIENT = "console/realtime"
MAX_MESSAGE_BYTES = 16 * 1024
POLL_SECONDS = 1.0
KINDS = {"approve_tool_call": "approve", "reject_tool_call": "reject"}


class RunSocket:
    """One open socket: the run it follows and what it has announced so far."""

    def __init__(self, console: Console, ws: WebSocket, person: str, ns: str, run: str) -> None:
        self.console, self.ws, self.person, self.ns, self.run = console, ws, person, ns, run
        self.announced: dict[str, str] = {}
        """Call id -> the `seen_sha256` announced for it (what a decision must name)."""
        self.lock = asyncio.Lock()

    async def send(self, message: dict[str, Any]) -> None:
        """One JSON message (one at a time: the follower and the answers share the socket)."""
        async with self.lock:
            await self.ws.send_text(json.dumps(message, ensure_ascii=False))

    async def follow(self) -> None:
        """Announce the run's waiting calls as they come and go, until it ends."""
        while True:
            try:
                snap = await self.console.data.snapshot(self.ns, self.run)
            except (_Gone, _Unreadable) as exc:
                await self.send({"type": "error", "error": "Unreadable", "message": str(exc)})
                await asyncio.sleep(POLL_SECONDS * 5)
                continue
            status = snap.status
            waiting = {p.call_id: p for p in status.pending if p.kind == "approval"}
            for cid, p in waiting.items():
                seen = seen_of(p)
                if self.announced.get(cid) != seen:
                    self.announced[cid] = seen
                    await self.send(_requested(p, seen, self.console.rules.may_decide(
                        self.person, p.approvers)))  # fmt: skip
            for cid in [c for c in self.announced if c not in waiting]:
                del self.announced[cid]
                await self.send({"type": "tool_call_settled", "call_id": cid})
            if status.phase not in ("running", "awaiting_approval"):
                await self.send({"type": "run_settled", "phase": status.phase})
                return
            await asyncio.sleep(POLL_SECONDS)

    async def answer(self, text: str) -> None:
        """Act on one client message; always answer it (`decided` or `error`)."""
        message, problem = _read(text)
        if message is None:
            await self.send({"type": "error", "error": "InvalidMessage", "message": problem})
            return
        kind, cid, seen = KINDS[message["type"]], message["call_id"], message["seen_sha256"]
        if self.announced.get(cid) != seen:
            why = "this socket announced no such call with those arguments: nothing was decided"
            await self.send(
                {"type": "error", "error": "NotAnnounced", "call_id": cid, "message": why}
            )
            return
        outcome = await self.console.data.decide(
            self.ns,
            self.run,
            cid,
            self.person,
            kind,
            seen_sha256=seen,
            message=message.get("message"),
            reason=message.get("reason"),
            client=REALTIME_CLIENT,
        )
        if outcome.ok:
            await self.send(
                {"type": "decided", "call_id": cid, "kind": kind, "message": outcome.headline}
            )
        else:
            await self.send(
                {
                    "type": "error",
                    "error": outcome.error_type or "Refused",
                    "call_id": cid,
                    "message": f"{outcome.headline}: {outcome.detail}".strip(": "),
                }
            )


async def _quietly(follow: Any) -> None:
    try:
        await follow
    except (WebSocketDisconnect, RuntimeError):
        pass  # the socket closed while a message was on its way
    except Exception:
        log.exception("realtime socket: following the run failed")


def _requested(p: Any, seen: str, may_decide: bool) -> dict[str, Any]:
    request = p.request
    return {
        "type": "tool_approval_requested",
        "call_id": p.call_id,
        "tool_name": p.tool_name,
        "agent_name": p.agent_name,
        "arguments": p.arguments,
        "seen_sha256": seen,
        "title": request.title if request is not None else None,
        "required_approvals": p.required_approvals,
        "approved_by": [a.approver for a in p.approvals],
        "you_may_decide": may_decide,
    }


def _read(text: str) -> tuple[dict[str, Any] | None, str]:
    """A client message, or why it is refused."""
    if len(text.encode()) > MAX_MESSAGE_BYTES:
        return None, f"a message is at most {MAX_MESSAGE_BYTES} bytes"
    try:
        message = json.loads(text)
    except ValueError:
        return None, "a message is a JSON object"
    if not isinstance(message, dict) or message.get("type") not in KINDS:
        return None, 'a message is {"type": "approve_tool_call" | "reject_tool_call", ...}'
    for name in ("call_id", "seen_sha256"):
        if not isinstance(message.get(name), str) or not 0 < len(message[name]) <= 200:
            return None, f"{name} must be the text the socket announced"
    for name in ("message", "reason"):
        value = message.get(name)
        if value is not None and (not isinstance(value, str) or len(value) > MAX_TEXT_CHARS):
            return None, f"{name} must be text of at most {MAX_TEXT_CHARS} characters"
    return message, ""


async def realtime(console: Console, ws: WebSocket) -> None:
    """`/ws/run?ns=&run=`: a signed-in person's socket on one run (see the module)."""
    from hitl.console.app import _session

    origin = ws.headers.get("origin")
    session = _session(console, ws)
    ids = one_text_each(ws.query_params, ("ns", "run"))
    if origin is None or urlparse(origin).netloc != ws.url.netloc or session is None:
        await ws.close(code=1008, reason="sign in, and open it from this console's pages")
        return
    if ids is None or ids[0] not in console.data.clients:
        await ws.close(code=1008, reason="name one run: ?ns=&run=")
        return
    await ws.accept()
    sock = RunSocket(console, ws, session.person, ids[0], ids[1])
    follower = asyncio.create_task(_quietly(sock.follow()))
    try:
        while True:
            text = await ws.receive_text()
            await sock.answer(text)
    except WebSocketDisconnect:
        pass
    except Exception as exc:  # a frame that is not text, or a send on a closing socket
        log.info("realtime socket on %s closed: %r", ids[1], exc)
    finally:
        follower.cancel()


def socket_endpoint(console: Console) -> Callable[[WebSocket], Awaitable[None]]:
    """The `/ws/run` endpoint of `console` (a function: Starlette calls it per socket)."""

    async def endpoint(ws: WebSocket) -> None:
        await realtime(console, ws)

    return endpoint
