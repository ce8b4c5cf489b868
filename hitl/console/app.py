"""The console's web app (Starlette, Jinja2 templates, htmx for live parts)."""

from __future__ import annotations

import hashlib
import hmac
import json
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlparse

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from hitl.cli.common import _ago, _Gone, _Unreadable
from hitl.console import md
from hitl.console.auth import COOKIE, Authenticator, Session
from hitl.console.chat import Click, SlackGateway
from hitl.console.data import ConsoleData, Inbox, Outcome, Row, when
from hitl.console.forms import (
    POSTED,
    edited_arguments,
    form_fields,
    number,
    one_text_each,
    posted_text,
)
from hitl.console.rules import Rules
from hitl.console.urls import (
    AUDIT,
    CALL,
    DECIDE,
    DECIDE_RUN,
    LIVE,
    RUN,
    audit_url,
    call_url,
    decide_run_url,
    decide_url,
    run_url,
)
from hitl.wire import DecisionRecord, PendingApproval, RunSnapshot
from hitl.wire.runs import text_digest

HERE = Path(__file__).parent
VIEWS = {
    "mine": "Waiting for me",
    "others": "Waiting for others",
    "uncertain": "Uncertain",
    "questions": "Questions",
}
"""The inbox's status views (besides all): by what the call waits for, and from whom."""
CHAT_SLACK = "/chat/slack"
"""Where a Slack app's button clicks arrive (its interactivity request URL)."""
CHAT_CLIENT = "console/slack"
"""The `client` a decision from chat records."""
PAGE_SIZE = 50
"""Inbox rows per page."""
MAX_RUN_CALLS = 50
"""At most this many calls of one run are approved together (the rest one by one)."""
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
MAX_FORM_BYTES = 256 * 1024
SORTS = {"oldest", "newest"}
AGES = {"": 0, "1h": 3600, "1d": 86400, "7d": 7 * 86400}


def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["when"] = when
    env.filters["ago"] = ago
    env.filters["pretty"] = pretty_json
    env.filters["md"] = md.render
    env.filters["shell"] = shlex.quote  # an id in a command a person copies: one word
    env.globals["diff_class"] = diff_class
    env.globals["due_in"] = due_in
    env.globals["call_url"] = call_url
    env.globals["decide_url"] = decide_url
    env.globals["audit_url"] = audit_url
    env.globals["run_url"] = run_url
    env.globals["decide_run_url"] = decide_run_url
    return env


def ago(at: datetime | None) -> str:
    """How long ago, at a glance (`12m ago`).

    Under a minute it is `just now`, so that a page polled every few seconds does not change,
    and is not redrawn, every time.
    """
    if at is None:
        return "unknown"
    return "just now" if (datetime.now(UTC) - at).total_seconds() < 60 else _ago(at)


def due_in(deadline: datetime) -> str:
    """A deadline as time left (`in 2d 3h`, `in 12m`), or `overdue by 5m` once it passed."""
    seconds = int((deadline - datetime.now(UTC)).total_seconds())
    left = abs(seconds)
    d, h, m = left // 86400, left % 86400 // 3600, left % 3600 // 60
    span = f"{d}d {h}h" if d else f"{h}h {m}m" if h else f"{m}m" if m else "under a minute"
    return f"in {span}" if seconds >= 0 else f"overdue by {span}"


def message_of(call: PendingApproval) -> str:
    """A call's request message, without the arguments the page shows anyway.

    A tool without its own approval text gets a message that ends with its arguments
    (`Arguments:` and their JSON): the page shows those once, under Arguments.
    """
    message = call.request.message if call.request else ""
    try:
        shown = json.dumps(json.loads(call.arguments), indent=2, default=str, ensure_ascii=False)
    except ValueError:
        return message
    tail = f"\n\nArguments:\n{shown}"
    return message[: -len(tail)] if message.endswith(tail) else message


def pretty_json(text: str) -> str:
    """A call's JSON arguments, indented (as given when they are not JSON)."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, TypeError):
        return text


def diff_class(line: str) -> str:
    """The CSS class of one line of a unified diff."""
    if line.startswith(("+++", "---")):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    return {"+": "add", "-": "del"}.get(line[:1], "ctx")


def is_diff(preview: str | None, label: str | None) -> bool:
    """Whether a preview is a unified diff (by its label, or by its first lines)."""
    if not preview:
        return False
    if (label or "").lower() == "diff":
        return True
    head = preview.lstrip().splitlines()[:3]
    return any(line.startswith(("--- ", "@@ ")) for line in head)


def live_ids(ns: str, wid: str, cid: str, call: PendingApproval) -> dict[str, str]:
    """What a call's page polls `/call/live` with: the call as the page shows it."""
    seen, round_, n = seen_of(call), str(call.round), str(len(call.approvals))
    return {"ns": ns, "run": wid, "call": cid, "seen": seen, "round": round_, "n": n}


def words_of(d: DecisionRecord) -> str:
    """A recorded decision in a few words: `approved by bob`, `rejected by ann`, `expired`."""
    if d.expired:
        return "expired (its deadline passed)"
    verb = "approved" if d.kind == "approve" else "rejected"
    return f"{verb} by {d.approver or d.source}"


def seen_of(call: PendingApproval) -> str:
    """The digest of a call's arguments as the page shows them (what a decision says it saw)."""
    return call.arguments_sha256 or text_digest(call.arguments)


class Console:
    """The app: its state (data access, who is logged in, who may see what, the templates).

    Each page is one of its methods; `create_app` wires them to their routes.
    """

    def __init__(
        self,
        data: ConsoleData,
        auth: Authenticator,
        *,
        secure_cookie: bool = False,
        rules: Rules | None = None,
    ):
        self.data, self.auth, self.secure = data, auth, secure_cookie
        self.rules = rules or Rules()
        self.env = _env()
        self.chat: SlackGateway | None = None

    def render(self, request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        """A page (or a fragment) for this request, with the session's person and CSRF token."""
        session: Session | None = request.state.session
        html = self.env.get_template(name).render(
            request=request,
            session=session,
            person=session.person if session else None,
            csrf=session.csrf if session else "",
            namespaces=list(self.data.clients),
            **ctx,
        )
        return HTMLResponse(html, status_code=status)

    def not_found(self, request: Request, problem: str = "") -> HTMLResponse:
        """The one answer for a call or run that is missing, not the person's, or unreadable.

        The same page for each (the reason only for viewers), so that nobody learns from it
        which runs and calls exist.
        """
        person = request.state.session.person
        shown = problem if problem and self.rules.is_viewer(person) else ""
        return self.render(request, "gone.html", 404, problem=shown)

    def may_see_row(self, person: str, row: Row) -> bool:
        """Whether `person` sees this inbox row (a call they may decide, or they view all)."""
        if self.rules.is_viewer(person):
            return True
        return not row.viewers_only and self.rules.may_decide(person, row.approvers)

    def set_cookie(self, response: Response, value: str) -> None:
        """The session cookie `value` on `response` (`HttpOnly`, `SameSite=Strict`)."""
        response.set_cookie(
            COOKIE,
            value,
            max_age=self.auth.sessions.seconds,
            httponly=True,
            samesite="strict",
            secure=self.secure,
        )

    async def read(self, ns: str, wid: str) -> tuple[RunSnapshot | None, str]:
        """Run `wid` of namespace `ns` (`None`, and why, when it cannot be read)."""
        if ns not in self.data.clients:
            return None, f"this console does not serve namespace {ns!r}"
        try:
            return await self.data.snapshot(ns, wid), ""
        except (_Gone, _Unreadable) as exc:
            return None, str(exc)

    # ------------------------------------------------------------------------ signing in

    async def login(self, request: Request) -> Response:
        """`/login`: the form (or a one-time link's token); a post of name and token."""
        auth = self.auth
        if request.method == "GET":
            token = request.query_params.get("token")
            next_path = local_path(request.query_params.get("next", "/"))
            if token is not None and auth.mode == "link":
                person = auth.redeem_link(token)
                if person is not None:
                    return self._logged_in(person, next_path)
                return self.render(
                    request,
                    "login.html",
                    403,
                    mode=auth.mode,
                    next=next_path,
                    error="This link was used or replaced: ask for a new one below.",
                )
            return self.render(request, "login.html", mode=auth.mode, next=next_path)
        form = await request.form()
        next_path = local_path(str(form.get("next") or "/"))
        if auth.mode == "link" and form.get("action") == "new-link":
            printed = auth.new_link(next_path)
            notice = (
                "A new sign-in link was printed where this console runs (the terminal of "
                "`hitl console` or `hitl dev`). Open it in this browser; the old link no longer "
                "works."
                if printed
                else "A link was printed a moment ago: look where this console runs."
            )
            return self.render(request, "login.html", mode=auth.mode, next=next_path, notice=notice)
        person = auth.check_token(str(form.get("name") or ""), str(form.get("token") or ""))
        if person is None:
            return self.render(
                request,
                "login.html",
                403,
                mode=auth.mode,
                next=next_path,
                error="Unknown name or token.",
            )
        return self._logged_in(person, next_path)

    def _logged_in(self, person: str, next_path: str = "/") -> Response:
        """A new session for `person`, and on to `next_path` (a path of this console only)."""
        cookie, _ = self.auth.sessions.issue(person)
        response = RedirectResponse(local_path(next_path), status_code=303)
        self.set_cookie(response, cookie)
        return response

    async def logout(self, request: Request) -> Response:
        """`POST /logout`: the session cookie removed."""
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    # ------------------------------------------------------------------------ pages

    async def inbox_page(self, request: Request) -> Response:
        """`/`: the inbox, filtered as the query string asks."""
        rows, ctx = await self.filtered(request)
        html, version = self.rows_html(request, rows, ctx)
        return self.render(request, "inbox.html", rows_html=html, version=version, **ctx)

    async def inbox_rows(self, request: Request) -> Response:
        """`/inbox/rows`: the inbox's rows alone (htmx polls them); 204 while unchanged."""
        rows, ctx = await self.filtered(request)
        html, version = self.rows_html(request, rows, ctx)
        if request.query_params.get("v") == version:
            return Response(status_code=204)  # nothing to swap: focus and scroll stay put
        return self.render(request, "_inbox.html", rows_html=html, version=version, **ctx)

    def rows_html(
        self, request: Request, rows: list[Row], ctx: dict[str, Any]
    ) -> tuple[Markup, str]:
        """The rows as the page shows them, and a short digest naming that version."""
        session: Session = request.state.session
        html = self.env.get_template("_rows.html").render(
            rows=rows, person=session.person, namespaces=list(self.data.clients), **ctx
        )
        return Markup(html), hashlib.sha256(html.encode()).hexdigest()[:16]

    async def filtered(self, request: Request) -> tuple[list[Row], dict[str, Any]]:
        """The inbox rows the query string asks for, and what the page needs to show the filters.

        Only rows the person may see are counted, filtered or named in the filters' choices.
        """
        q = request.query_params
        person = request.state.session.person
        inbox: Inbox = await self.data.inbox()
        mine = [r for r in inbox.rows if self.may_see_row(person, r)]
        agent, tool, group = q.get("agent", ""), q.get("tool", ""), q.get("group", "")
        text, age = q.get("q", "").strip().lower(), q.get("age", "")
        sort = q.get("sort", "oldest") if q.get("sort") in SORTS else "oldest"
        min_age = AGES.get(age, 0)
        now = datetime.now(UTC)
        view = q.get("view", "") if q.get("view") in VIEWS else ""
        counts = {v: sum(1 for r in mine if self.in_view(person, r, v)) for v in VIEWS}
        rows = [
            r
            for r in mine
            if self.in_view(person, r, view)
            and (not agent or r.agent == agent)
            and (not tool or r.tool_name == tool)
            and (not group or group in r.groups)
            and (not text or text in r.haystack())
            and (not min_age or (now - r.since).total_seconds() >= min_age)
        ]
        rows.sort(key=lambda r: r.since, reverse=sort == "newest")
        matched = len(rows)
        pages = max(1, -(-matched // PAGE_SIZE))
        page = int(q["page"]) if q.get("page", "").isdigit() else 1
        page = min(max(page, 1), pages)
        rows = rows[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
        shown = {k: q.get(k, "") for k in ("agent", "tool", "group", "q", "age")}
        shown |= {"sort": sort, "view": view}
        calls = [r for r in mine if r.confirmed]
        return rows, {
            "total": len(mine),
            "agents": sorted({r.agent for r in calls}),
            "tools": sorted({r.tool_name for r in calls}),
            "groups": sorted({g for r in calls for g in r.groups}),
            "filters": shown,
            "query": urlencode(
                {k: v for k, v in shown.items() if v} | ({"page": page} if page > 1 else {})
            ),
            "filter_query": urlencode({k: v for k, v in shown.items() if v}),
            "views": VIEWS,
            "view_counts": counts,
            "view_query": urlencode({k: v for k, v in shown.items() if v and k != "view"}),
            "page": page,
            "pages": pages,
            "matched": matched,
            "first": (page - 1) * PAGE_SIZE + 1,
            "left_out": inbox.left_out,
            "task_queues": self.data.task_queues,
        }

    def in_view(self, person: str, r: Row, view: str) -> bool:
        """Whether row `r` belongs in the inbox's status view `view` for `person` (`""`: all)."""
        if not view:
            return True
        if view == "uncertain" or view == "questions":
            return r.confirmed and r.kind == ("uncertain" if view == "uncertain" else "input")
        deciding = r.confirmed and self.rules.may_decide(person, r.approvers) and not r.viewers_only
        if view == "mine":
            return deciding and r.kind in ("approval", "input") and person not in r.approved_by
        return r.confirmed and (person in r.approved_by or not deciding)  # waiting for others

    async def call_page(self, request: Request) -> Response:
        """`/call?ns=&run=&call=`: one call, its forms when the person may decide it."""
        ids = one_text_each(request.query_params, ("ns", "run", "call"))
        if ids is None:
            return PlainTextResponse("name one namespace, run and call", status_code=400)
        ns, wid, cid = ids
        person = request.state.session.person
        snap, problem = await self.read(ns, wid)
        if snap is None:
            return self.not_found(request, problem)
        rules = self.rules
        viewer = rules.is_viewer(person)
        item = next((p for p in snap.status.pending if p.call_id == cid), None)
        decided = next((d for d in snap.status.decisions if d.call_id == cid), None)
        if item is not None and not rules.may_see(person, item.approvers):
            return self.not_found(request)
        if item is None and not (viewer or (decided and rules.took_part(person, decided))):
            return self.not_found(request)  # no approver list to show it by: viewers only
        deciding = item is not None and rules.may_decide(person, item.approvers)
        mine_approved = item is not None and any(a.approver == person for a in item.approvals)
        seen = seen_of(item) if item is not None else ""
        round_ = str(item.round) if item is not None else ""
        ticket = self.auth.sessions.ticket(person, ns, wid, cid, seen, round_) if deciding else ""
        # The transcript is the run's: shown when every call the run waits on is the person's.
        whole = viewer or all(rules.may_see(person, p.approvers) for p in snap.status.pending)
        return self.render(
            request,
            "call.html",
            ns=ns,
            wid=wid,
            cid=cid,
            call=item,
            decided=decided,
            snap=snap,
            deciding=deciding,
            mine_approved=mine_approved,
            viewer=viewer,
            hidden={"ns": ns, "run": wid, "call": cid, "seen": seen, "round": round_},
            live_url=LIVE + "?" + urlencode(live_ids(ns, wid, cid, item)) if item else "",
            ticket=ticket,
            fields=form_fields(snap.schemas.get(cid), item),
            is_diff=is_diff(item.request.preview, item.request.preview_label)
            if item and item.request
            else False,
            transcript=_transcript(snap) if whole else None,
            message_text=message_of(item) if item is not None else "",
            others_in_run=len(
                [p for p in self.approvable(person, snap.status.pending) if p.call_id != cid]
            )
            if item is not None and deciding
            else 0,
        )

    async def call_live(self, request: Request) -> Response:
        """`/call/live?ns=&run=&call=&seen=&round=&n=`: what changed since a call's page showed it.

        Nothing (204: the page stays as it is, focus and typed text untouched) while the call
        waits as shown or the run cannot be read now; its approvals when someone else approved
        (four eyes); else one line saying it was decided or changed, with its buttons disabled.
        It says no more than the call's page would: a call gone, not this person's, or decided
        by others reads the same as one that never was.
        """
        ids = one_text_each(request.query_params, ("ns", "run", "call", "seen", "round", "n"))
        if ids is None or ids[0] not in self.data.clients:
            return PlainTextResponse("name one namespace, run and call", status_code=400)
        ns, wid, cid, seen, round_, n = ids
        person = request.state.session.person
        try:
            snap = await self.data.snapshot(ns, wid)
        except _Unreadable:
            return Response(status_code=204)
        except _Gone:
            snap = None
        rules = self.rules
        item = next((p for p in snap.status.pending if p.call_id == cid), None) if snap else None
        decided = (
            next((d for d in snap.status.decisions if d.call_id == cid), None) if snap else None
        )
        if item is not None and not rules.may_see(person, item.approvers):
            item = decided = None
        if decided is not None and not (
            rules.is_viewer(person) or rules.took_part(person, decided)
        ):
            decided = None  # as on the call's page: a decision is shown to who took part
        notice, approvals = "", False
        if item is None:
            notice = (
                f"This call was {words_of(decided)} meanwhile."
                if decided is not None
                else "This call no longer waits as shown."
            )
        elif seen_of(item) != seen or str(item.round) != round_:
            notice = "This call changed since you opened it: look again before deciding."
        elif str(len(item.approvals)) != n:
            approvals = True
        else:
            return Response(status_code=204)
        return self.render(
            request,
            "_live.html",
            ns=ns,
            wid=wid,
            cid=cid,
            call=item,
            live_notice=notice,
            live_approvals=approvals,
            live_url=LIVE + "?" + urlencode(live_ids(ns, wid, cid, item)) if item else "",
        )

    def approvable(self, person: str, calls: list[PendingApproval]) -> list[PendingApproval]:
        """The calls of a run `person` may approve now (not approved by them already)."""
        return [
            p
            for p in calls
            if p.kind == "approval"
            and self.rules.may_decide(person, p.approvers)
            and not any(a.approver == person for a in p.approvals)
        ]

    async def run_page(self, request: Request) -> Response:
        """`/run?ns=&run=`: a run's calls that wait, each shown whole, approved together."""
        ids = one_text_each(request.query_params, ("ns", "run"))
        if ids is None:
            return PlainTextResponse("name one namespace and run", status_code=400)
        ns, wid = ids
        person = request.state.session.person
        snap, problem = await self.read(ns, wid)
        if snap is None:
            return self.not_found(request, problem)
        shown = [p for p in snap.status.pending if self.rules.may_see(person, p.approvers)]
        if not shown:
            return self.not_found(request)
        mine = self.approvable(person, shown)[:MAX_RUN_CALLS]
        sessions = self.auth.sessions
        tickets = [
            sessions.ticket(person, ns, wid, p.call_id, seen_of(p), str(p.round)) for p in mine
        ]
        return self.render(
            request,
            "run.html",
            ns=ns,
            wid=wid,
            snap=snap,
            calls=shown,
            mine=list(zip(mine, tickets, strict=True)),
            seen_of=seen_of,
            message_of=message_of,
        )

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

    async def audit(self, request: Request) -> Response:
        """`/audit?ns=&run=`: a run's decisions and refused attempts (the person's share)."""
        ids = one_text_each(request.query_params, ("ns", "run"))
        if ids is None:
            return PlainTextResponse("name one namespace and run", status_code=400)
        ns, wid = ids
        person = request.state.session.person
        snap, problem = await self.read(ns, wid)
        if snap is None:
            return self.not_found(request, problem)
        rules = self.rules
        viewer = rules.is_viewer(person)
        status = snap.status
        mine = {p.call_id for p in status.pending if rules.may_see(person, p.approvers)}
        decisions = [
            d for d in status.decisions if viewer or d.call_id in mine or rules.took_part(person, d)
        ]
        if not viewer and not mine and not decisions:
            return self.not_found(request)
        mine |= {d.call_id for d in decisions}
        refused = [r for r in status.refused if viewer or (r.call_id and r.call_id in mine)]
        return self.render(
            request,
            "audit.html",
            ns=ns,
            wid=wid,
            snap=snap,
            decisions=decisions,
            refused=refused,
            actions=[a for a in status.actions if viewer or a.call_id in mine],
            partial=not viewer,
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
            self.data.forget()
            return outcome.headline
        return f"{outcome.headline} ({outcome.error_type})"

    async def healthz(self, request: Request) -> Response:
        """`/healthz`: the process answers."""
        return PlainTextResponse("ok")

    # ------------------------------------------------------------------------ deciding

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
        if action == "edit":
            arguments, problem = edited_arguments(form, await self._shown_arguments(c))
            if problem is not None:
                return Outcome(False, "The edited arguments were refused", problem, "Invalid")
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


class Guard(BaseHTTPMiddleware):
    """Sessions, CSRF and same-origin checks, and the security headers, on every request."""

    def __init__(self, app: ASGIApp, console: Console) -> None:
        super().__init__(app)
        self.console = console

    async def dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        """The request's session (maybe a new one, in `header` mode), checked, then answered."""
        auth = self.console.auth
        request.state.session = _session(self.console, request)
        fresh: str | None = None
        if request.state.session is None and auth.mode == "header" and request.method == "GET":
            # A page load through the proxy starts a session; a post never does (it must
            # come from a page of a session the proxy still vouches for).
            person = auth.from_header(request.headers.get(auth.header))
            if person is not None:
                fresh, request.state.session = auth.sessions.issue(person)
        open_paths = ("/login", "/static/", "/healthz", CHAT_SLACK)
        if request.state.session is None and not request.url.path.startswith(open_paths):
            return await self.signed_out(request)
        if request.method == "POST" and request.url.path not in ("/login", CHAT_SLACK):
            problem = await _forged(request)
            if problem is not None:
                return PlainTextResponse(problem, status_code=403)
        response = await call_next(request)
        if fresh is not None:
            self.console.set_cookie(response, fresh)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["Cache-Control"] = "no-store"
        return response

    async def signed_out(self, request: Request) -> Response:
        """The answer to a request without a session: on to sign in, and back here after.

        A page goes to the sign-in page; htmx's polling takes the whole tab there (never a
        sign-in page inside the inbox); a post (a decision sent after the session ended) gets
        the sign-in page saying nothing was decided, and comes back to the call's page, where
        the text typed into it is kept by the browser tab (`console.js`).
        """
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if request.headers.get("hx-request"):
            current = urlparse(request.headers.get("hx-current-url") or "")
            same = current.netloc == request.url.netloc
            page = current.path + (f"?{current.query}" if current.query else "") if same else "/"
            response = Response(status_code=200)
            response.headers["HX-Redirect"] = "/login?" + urlencode({"next": local_path(page)})
            return response
        if request.method == "GET":
            target = "/login" if here == "/" else "/login?" + urlencode({"next": here})
            return RedirectResponse(target, status_code=303)
        back = CALL + f"?{request.url.query}" if request.url.path == DECIDE else "/"
        return self.console.render(
            request,
            "login.html",
            401,
            mode=self.console.auth.mode,
            next=local_path(back),
            error="Your session ended before this was sent: nothing was decided. Sign in, then "
            "decide again (what you typed on the call's page is kept in this tab).",
        )


def local_path(path: str) -> str:
    """`path` when it is a path of this console (`/...`), else `/` (never another site)."""
    if path.startswith("/") and not path.startswith(("//", "/\\")) and "\\" not in path:
        return path
    return "/"


def _session(console: Console, request: Request) -> Session | None:
    """The request's session; in `header` mode only while the proxy names the same person."""
    session = console.auth.sessions.read(request.cookies.get(COOKIE))
    if console.auth.mode == "header":
        person = console.auth.from_header(request.headers.get(console.auth.header))
        if person is None or (session is not None and session.person != person):
            return None
    return session


async def _forged(request: Request) -> str | None:
    """Why a post is refused: another origin, too large, or not its session's CSRF token.

    The form is read here, once (`request.state.form`), for the route to use.
    """
    origin = request.headers.get("origin")
    if origin and urlparse(origin).netloc != request.url.netloc:
        return "cross-site request refused"
    if int(request.headers.get("content-length") or 0) > MAX_FORM_BYTES:
        return "request too large"
    form = await request.form()
    request.state.form = form
    sent = request.headers.get("x-csrf-token") or str(form.get("csrf") or "")
    session: Session = request.state.session
    if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
        return "stale or missing form token: reload the page"
    return None


def create_app(
    data: ConsoleData,
    auth: Authenticator,
    *,
    secure_cookie: bool = False,
    rules: Rules | None = None,
    chat: SlackGateway | None = None,
) -> Starlette:
    """The console as an ASGI app.

    `rules` say who sees which call (`hitl.console.rules`; default: no directory and no
    viewers, so a call that names approvers is shown to the people it names).
    """
    console = Console(data, auth, secure_cookie=secure_cookie, rules=rules)
    console.chat = chat
    routes = [
        Route("/", console.inbox_page),
        Route("/inbox/rows", console.inbox_rows),
        Route("/login", console.login, methods=["GET", "POST"]),
        Route("/logout", console.logout, methods=["POST"]),
        Route(CALL, console.call_page),
        Route(LIVE, console.call_live),
        Route(DECIDE, console.decide, methods=["POST"]),
        Route(AUDIT, console.audit),
        Route(RUN, console.run_page),
        Route(DECIDE_RUN, console.decide_run, methods=["POST"]),
        Route("/healthz", console.healthz),
        Route(CHAT_SLACK, console.chat_slack, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes, middleware=[Middleware(Guard, console=console)])


def _transcript(snap: RunSnapshot, last: int = 12) -> list[tuple[str, str]]:
    """The run's recent items as (who, text) lines."""
    lines: list[tuple[str, str]] = []
    for given in snap.input_items[-3:]:
        content = given.get("content")
        lines.append((str(given.get("role", "input")), _text(content)))
    for item in snap.new_items[-last:]:
        raw = item.raw_item
        if item.type == "message_output_item":
            lines.append((item.agent_name, _text(raw.get("content"))))
        elif item.type in ("tool_call_item", "handoff_call_item"):
            args = _readable_json(str(raw.get("arguments") or ""))
            lines.append((item.agent_name, f"calls {raw.get('name')}({args})"))
        elif item.type in ("tool_call_output_item", "handoff_output_item"):
            lines.append(("tool", _text(raw.get("output"))))
    return [(who, text if len(text) <= 500 else text[:500] + "…") for who, text in lines]


def _readable_json(text: str) -> str:
    """JSON text with its escapes as the characters they stand for (as given, when not JSON).

    So that Korean, Chinese and emoji read as themselves, not as escape codes.
    """
    try:
        return json.dumps(json.loads(text), ensure_ascii=False)
    except ValueError:
        return text


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict)
        ).strip()
    return json.dumps(content, default=str, ensure_ascii=False)
