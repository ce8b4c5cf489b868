"""What the console does on a person's behalf.

Decide a call (approve, reject, edit after its preview, extend, answer), approve a whole run,
and take a decision from chat.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from hitl.cli.common import _Gone, _Unreadable
from hitl.console.chat import Click
from hitl.console.core import ConsoleCore
from hitl.console.data import Outcome, Row
from hitl.console.forms import (
    POSTED,
    edited_arguments,
    number,
    one_text_each,
    posted_text,
)
from hitl.console.view import is_diff, seen_of
from hitl.wire import EditPreview
from hitl.wire.runs import text_digest

CHAT_SLACK = "/chat/slack"
"""Where a Slack app's button clicks arrive (its interactivity request URL)."""
CHAT_CLIENT = "console/slack"
"""The `client` a decision from chat records."""
MAX_RUN_CALLS = 50
"""At most this many calls of one run are approved together (the rest one by one)."""


class Acts(ConsoleCore):
    """The console's posts: each checks what the person was shown, then acts as them."""

    async def decide_run(self, request: Request) -> Response:
        """`POST /decide-run?ns=&run=`: approve every call the run's page showed, each as seen.

        Each call comes with the digest and round it was shown with and its own ticket; one
        that does not check out is not sent, and every call's outcome is listed.
        """
        ids = one_text_each(request.query_params, ("ns", "run"))
        form: FormData = request.state.form
        posted = one_text_each(form, ("ns", "run"))
        if ids is None or posted != ids or form.get("action") != "approve-all":
            return PlainTextResponse("this form names another run: nothing was decided", 400)
        ns, wid = ids
        calls, seens, rounds, tickets = (
            [str(v) for v in form.getlist(k)] for k in ("call", "seen", "round", "ticket")
        )
        if not 0 < len(calls) <= MAX_RUN_CALLS or not (
            len(calls) == len(seens) == len(rounds) == len(tickets) == len(set(calls))
        ):
            return PlainTextResponse("name each call once, with what was shown of it", 400)
        person = request.state.session.person
        check = self.auth.sessions.check
        if ns not in self.data.clients or not all(
            check(t, person, ns, wid, c, s, r) and r.isdigit()
            for c, s, r, t in zip(calls, seens, rounds, tickets, strict=True)
        ):
            return self.not_found(request)  # a call never shown to this person to decide
        reason = posted_text(form, "reason")
        results = []
        for cid, seen in zip(calls, seens, strict=True):
            outcome = await self.data.decide(
                ns, wid, cid, person, "approve", seen_sha256=seen, reason=reason
            )
            results.append((cid, outcome))
        ok = all(o.ok for _, o in results)
        return self.render(
            request, "run_outcome.html", 200 if ok else 409, ns=ns, wid=wid, results=results
        )

    async def chat_slack(self, request: Request) -> Response:
        """`POST /chat/slack`: a Slack button click (`hitl.console.chat`), decided after a 200.

        Not a session's: Slack's signature says who clicked, and the person is who the chat
        users file maps that Slack user to.
        """
        gate = self.chat
        if gate is None:
            return PlainTextResponse("approvals from chat are off", status_code=404)
        body = await request.body()
        problem = gate.verify(
            body,
            request.headers.get("x-slack-request-timestamp", ""),
            request.headers.get("x-slack-signature", ""),
        )
        if problem:
            return PlainTextResponse(problem, status_code=401)
        click = gate.click(body)
        if isinstance(click, str):
            return PlainTextResponse(click, status_code=200 if "mapped" in click else 400)
        gate.later(click, self.decide_click)
        return Response(status_code=200)

    async def decide_click(self, c: Click) -> str:
        """Decide a verified chat click as its person, after the checks a call page makes."""
        nothing = "nothing was decided"
        if c.ns not in self.data.clients:
            return f"This console does not serve that namespace: {nothing}"
        try:
            snap = await self.data.snapshot(c.ns, c.run)
        except (_Gone, _Unreadable):
            return f"The run could not be read now: {nothing}"
        item = next((p for p in snap.status.pending if p.call_id == c.call), None)
        if item is None:
            return f"This call no longer waits: {nothing}"
        if not self.rules.may_decide(c.person, item.approvers):
            return f"{c.person} may not decide this call: {nothing}"
        if seen_of(item) != c.seen:
            return f"This call changed since the note: open it in the console; {nothing}"
        outcome = await self.data.decide(
            c.ns,
            c.run,
            c.call,
            c.person,
            c.kind,
            seen_sha256=c.seen,
            message=f"Rejected from Slack by {c.person}" if c.kind == "reject" else None,
            client=CHAT_CLIENT,
        )
        if outcome.ok:
            return outcome.headline
        return f"{outcome.headline} ({outcome.error_type})"

    async def decide(self, request: Request) -> Response:
        """`POST /decide?ns=&run=&call=`: one action on the call the form's ticket names.

        The form names the same call as the address, and its ticket says this page showed
        this person that call as it was (`seen`, `round`) to decide; else nothing is sent.
        """
        ids = one_text_each(request.query_params, ("ns", "run", "call"))
        form: FormData = request.state.form
        posted = one_text_each(form, POSTED)
        if ids is None or posted is None or posted[:3] != ids:
            return PlainTextResponse(
                "this form names another call than the address it was sent to: nothing was "
                "decided; reload the call's page",
                status_code=400,
            )
        ns, wid, cid, seen, round_text, ticket = posted
        person = request.state.session.person
        shown = self.auth.sessions.check(ticket, person, ns, wid, cid, seen, round_text)
        if not shown or not round_text.isdigit() or ns not in self.data.clients:
            return self.not_found(request)  # never shown to this person to decide
        call = Shown(ns, wid, cid, person, seen, int(round_text))
        if form.get("action") == "preview-edit":
            request.state.form_hidden = {
                "ns": ns, "run": wid, "call": cid, "seen": seen, "round": round_text
            }  # fmt: skip
            request.state.form_ticket = ticket
            return await self.edit_preview(request, call, form)
        outcome = await self._act(call, str(form.get("action") or ""), form)
        if outcome is None:
            return PlainTextResponse("unknown action", status_code=400)
        after = await self.next_call(person, (ns, wid, cid)) if outcome.ok else None
        return self.render(
            request,
            "outcome.html",
            200 if outcome.ok else 409,
            outcome=outcome,
            ns=ns,
            wid=wid,
            cid=cid,
            after=after,
        )

    async def next_call(self, person: str, done: tuple[str, str, str]) -> tuple[Row, int] | None:
        """The oldest other call waiting for `person` to decide, and how many wait for them."""
        self.data.forget()  # read again: the decision just made changed the inbox
        inbox = await self.data.inbox()
        waiting = [
            r
            for r in inbox.rows
            if r.confirmed
            and (r.namespace, r.workflow_id, r.call_id) != done
            and r.kind in ("approval", "input")
            and person not in r.approved_by
            and not r.viewers_only
            and self.rules.may_decide(person, r.approvers)
        ]
        if not waiting:
            return None
        return min(waiting, key=lambda r: r.since), len(waiting)

    async def _act(self, c: Shown, action: str, form: FormData) -> Outcome | None:
        """What `action` on call `c` comes to, sent as the person (`None`: no such action)."""
        data = self.data
        if action in ("approve", "reject"):
            return await data.decide(
                c.ns,
                c.wid,
                c.cid,
                c.person,
                action,
                seen_sha256=c.seen,
                message=posted_text(form, "message"),
                reason=posted_text(form, "reason"),
            )
        if action == "edit":  # approve the edit its preview page showed (`edit_preview`)
            edited = str(form.get("edited") or "")
            shown = self.auth.sessions.check(
                str(form.get("edit_ticket") or ""), c.person, c.ns, c.wid, c.cid, c.seen,
                "edit", text_digest(edited),
            )  # fmt: skip
            try:
                arguments = json.loads(edited) if shown else None
            except ValueError:
                arguments = None
            if not isinstance(arguments, dict):
                return Outcome(
                    False, "Review the edited call before approving it", "", "NotReviewed"
                )
            return await data.decide(
                c.ns, c.wid, c.cid, c.person, "approve", seen_sha256=c.seen, arguments=arguments
            )
        if action == "extend":
            hours = number(form.get("hours"))
            if hours is None or not 0 < hours <= 24 * 365:
                return Outcome(False, "Say by how many hours", "", "Invalid")
            return await data.extend(
                c.ns, c.wid, c.cid, c.person, hours * 3600, seen_sha256=c.seen, round=c.round
            )
        if action in ("accept", "decline", "cancel"):
            content, problem = edited_arguments(form) if action == "accept" else ({}, None)
            if problem is not None:
                return Outcome(False, "The answer was refused", problem, "Invalid")
            return await data.answer(
                c.ns,
                c.wid,
                c.cid,
                c.person,
                action,
                content,
                seen_sha256=c.seen,
                round=c.round,
                reason=posted_text(form, "reason"),
            )
        return None

    async def edit_preview(self, request: Request, c: Shown, form: FormData) -> Response:
        """The edited call as its tool plans it, and a button approving exactly those arguments.

        Its own preview, or why the tool would refuse it: no edit is approved unseen.
        """
        arguments, problem = edited_arguments(form, await self._shown_arguments(c))
        if problem is not None:
            outcome = Outcome(False, "The edited arguments were refused", problem, "Invalid")
        else:
            outcome = await self.data.preview_edit(
                c.ns, c.wid, c.cid, c.person, arguments, seen_sha256=c.seen
            )
        if not outcome.ok or not isinstance(outcome.record, EditPreview):
            return self.render(
                request, "outcome.html", 409, outcome=outcome, ns=c.ns, wid=c.wid, cid=c.cid
            )
        seen = outcome.record
        ticket = self.auth.sessions.ticket(
            c.person, c.ns, c.wid, c.cid, c.seen, "edit", text_digest(seen.arguments)
        )
        return self.render(
            request,
            "edit_preview.html",
            ns=c.ns,
            wid=c.wid,
            cid=c.cid,
            preview=seen,
            hidden=dict(request.state.form_hidden),
            ticket=request.state.form_ticket,
            edit_ticket=ticket,
            is_diff=is_diff(seen.request.preview, seen.request.preview_label)
            if seen.request
            else False,
        )

    async def _shown_arguments(self, c: Shown) -> dict[str, Any] | None:
        """The call's arguments as its page showed them (`None`: it no longer waits as shown).

        An edit starts from them, so that what the person did not touch reaches the tool as
        the model wrote it. `None` sends the form's fields alone, which the run refuses
        (`ArgumentsChanged`, `AlreadyDecided`) since the call is not as shown.
        """
        snap, _ = await self.read(c.ns, c.wid)
        item = next((p for p in snap.status.pending if p.call_id == c.cid), None) if snap else None
        if item is None or seen_of(item) != c.seen:
            return None
        try:
            shown = json.loads(item.arguments)
        except ValueError:
            return None
        return shown if isinstance(shown, dict) else None


@dataclass(frozen=True)
class Shown:
    """A call as its page showed it to the person deciding (what a post's ticket vouches for)."""

    ns: str
    wid: str
    cid: str
    person: str
    seen: str
    """The digest of the arguments shown (`seen_of`)."""
    round: int
