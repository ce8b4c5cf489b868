"""The console's web app (Starlette, Jinja2 templates, htmx for live parts)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode, urlparse

from markupsafe import Markup
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp
from starlette.websockets import WebSocket

from hitl.cli.common import _Gone, _Unreadable
from hitl.console.acts import CHAT_CLIENT as CHAT_CLIENT
from hitl.console.acts import CHAT_SLACK, MAX_RUN_CALLS, Acts
from hitl.console.acts import Shown as Shown
from hitl.console.auth import COOKIE, Authenticator, Session
from hitl.console.chat import SlackGateway
from hitl.console.core import SECURITY_HEADERS
from hitl.console.data import ConsoleData, Row
from hitl.console.forms import form_fields, one_text_each
from hitl.console.insights import INSIGHTS, METRICS, InsightsPages
from hitl.console.realtime import REALTIME, socket_endpoint
from hitl.console.rules import Rules
from hitl.console.settled import SETTLED_VIEWS, SettledRow, visible
from hitl.console.urls import AUDIT, CALL, DECIDE, DECIDE_RUN, LIVE, RUN
from hitl.console.view import HERE, live_ids, local_path, message_of, seen_of, words_of
from hitl.console.view import _env as _env
from hitl.console.view import _transcript as _transcript
from hitl.console.view import ago as ago
from hitl.console.view import diff_class as diff_class
from hitl.console.view import due_in as due_in
from hitl.console.view import is_diff as is_diff
from hitl.console.view import pretty_json as pretty_json
from hitl.wire import RunSnapshot

VIEWS = {
    "mine": "Waiting for me",
    "others": "Waiting for others",
    "uncertain": "Uncertain",
    "questions": "Questions",
    **SETTLED_VIEWS,
}
"""The inbox's status views (besides all): by what the call waits for, and from whom; then
calls settled recently (`hitl.console.settled`)."""
PAGE_SIZE = 50
"""Inbox rows per page."""
MAX_FORM_BYTES = 256 * 1024
SORTS = {"oldest", "newest"}
AGES = {"": 0, "1h": 3600, "1d": 86400, "7d": 7 * 86400}


class Console(Acts):
    """The app: its state (data access, who is logged in, who may see what, the templates).

    Each page is one of its methods; `create_app` wires them to their routes.
    """

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
        """`/inbox/rows`: the rows and the views' counts (htmx polls them); 204 while unchanged."""
        rows, ctx = await self.filtered(request)
        html, version = self.rows_html(request, rows, ctx)
        if request.query_params.get("v") == version:
            return Response(status_code=204)  # nothing to swap: focus and scroll stay put
        ctx |= {"rows_html": html, "version": version, "oob_views": True}
        return self.render(request, "_inbox.html", **ctx)

    def rows_html(
        self, request: Request, rows: list[Any], ctx: dict[str, Any]
    ) -> tuple[Markup, str]:
        """The rows as the page shows them, and a digest naming them and the views' counts."""
        session: Session = request.state.session
        name = "_settled.html" if ctx["filters"]["view"] in SETTLED_VIEWS else "_rows.html"
        html = self.env.get_template(name).render(
            rows=rows, person=session.person, namespaces=list(self.data.clients), **ctx
        )
        counts = repr((ctx["total"], sorted(ctx["view_counts"].items()), ctx["unknown_counts"]))
        return Markup(html), hashlib.sha256((html + counts).encode()).hexdigest()[:16]

    async def filtered(self, request: Request) -> tuple[list[Any], dict[str, Any]]:
        """The inbox rows the query string asks for, and what the page needs to show the filters.

        Only rows the person may see are counted, filtered or named in the filters' choices.
        """
        q, person = request.query_params, request.state.session.person
        view = q.get("view", "") if q.get("view") in VIEWS else ""
        waits = view not in SETTLED_VIEWS and asyncio.ensure_future(self.settled.rows_within(0.5))
        inbox = await self.data.inbox()  # beside the settled views' counts (None: not read yet)
        settled = await waits if waits else await self.settled.rows()
        agent, tool, group = q.get("agent", ""), q.get("tool", ""), q.get("group", "")
        text, min_age = q.get("q", "").strip(), AGES.get(q.get("age", ""), 0)
        sort = q.get("sort", "oldest") if q.get("sort") in SORTS else "oldest"
        mine = [r for r in inbox.rows if self.may_see_row(person, r)]
        found = [] if view in SETTLED_VIEWS else await self.data.search(text, agent, tool, min_age)
        past = [r for r in found if self.may_see_row(person, r)]  # listed, not counted in views
        text = text.lower()
        done = [r for r in settled or [] if visible(self.rules, person, r)]
        counts = {v: sum(1 for r in mine if self.in_view(person, r, v)) for v in VIEWS}
        counts |= {v: sum(1 for r in done if r.view == v) for v in SETTLED_VIEWS}
        rows: list[Any]
        if view in SETTLED_VIEWS:  # newest first: what was settled lately
            rows = [
                r
                for r in done
                if r.view == view
                and (not agent or r.agent == agent)
                and (not tool or r.record.tool_name == tool)
                and (not text or text in r.haystack())
            ]
        else:
            by = (agent, tool, group, text)
            rows = self.pending(person, mine + past, view, by, min_age)
            rows.sort(key=lambda r: r.since, reverse=sort == "newest")
        matched, pages = len(rows), max(1, -(-len(rows) // PAGE_SIZE))
        page = min(max(int(q["page"]) if q.get("page", "").isdigit() else 1, 1), pages)
        rows = rows[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
        shown = {k: q.get(k, "") for k in ("agent", "tool", "group", "q", "age")}
        shown |= {"sort": sort, "view": view}
        return rows, self.inbox_context(mine, done, shown, counts, page, pages, matched) | {
            "left_out": inbox.left_out,
            "failed": sorted(inbox.failed.items()),
            "cut_at": inbox.cut_at,
            "waiting": inbox.counted(),
            "unknown_counts": list(SETTLED_VIEWS) if settled is None else [],
        }

    def pending(
        self, person: str, mine: list[Row], view: str, by: tuple[str, str, str, str], min_age: int
    ) -> list[Row]:
        """The pending rows of `view` that match the filters (agent, tool, group, text; age)."""
        agent, tool, group, text = by
        now = datetime.now(UTC)
        return [
            r
            for r in mine
            if self.in_view(person, r, view)
            and (not agent or r.agent == agent)
            and (not tool or r.tool_name == tool)
            and (not group or group in r.groups)
            and (not text or text in r.haystack())
            and (not min_age or (now - r.since).total_seconds() >= min_age)
        ]

    def inbox_context(
        self,
        mine: list[Row],
        done: list[SettledRow],
        shown: dict[str, str],
        counts: dict[str, int],
        page: int,
        pages: int,
        matched: int,
    ) -> dict[str, Any]:
        """What the inbox page needs besides its rows: the filters' choices, views, pages."""
        calls = [r for r in mine if r.confirmed]
        return {
            "total": len(mine),
            "settled_total": sum(1 for r in done if r.view == shown["view"]),
            "agents": sorted({r.agent for r in calls} | {r.agent for r in done}),
            "tools": sorted({r.tool_name for r in calls} | {r.record.tool_name for r in done}),
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
            "task_queues": self.data.task_queues,
        }

    def in_view(self, person: str, r: Row, view: str) -> bool:
        """Whether row `r` belongs in the inbox's status view `view` for `person` (`""`: all)."""
        if not view:
            return True
        if view in SETTLED_VIEWS:
            return False  # settled calls are not pending rows
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

    async def run_asked(self, request: Request) -> tuple[str, str, RunSnapshot] | Response:
        """The run a run's page asks for (`?ns=&run=`), read; or the answer when it cannot be."""
        ids = one_text_each(request.query_params, ("ns", "run"))
        if ids is None:
            return PlainTextResponse("name one namespace and run", status_code=400)
        ns, wid = ids
        snap, problem = await self.read(ns, wid)
        if snap is None:
            return self.not_found(request, problem)
        return ns, wid, snap

    async def run_page(self, request: Request) -> Response:
        """`/run?ns=&run=`: a run's calls that wait, each shown whole, approved together."""
        got = await self.run_asked(request)
        if isinstance(got, Response):
            return got
        ns, wid, snap = got
        person = request.state.session.person
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

    async def audit(self, request: Request) -> Response:
        """`/audit?ns=&run=`: a run's decisions and refused attempts (the person's share)."""
        got = await self.run_asked(request)
        if isinstance(got, Response):
            return got
        ns, wid, snap = got
        person = request.state.session.person
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
            verdicts=[
                v
                for v in status.verdicts
                if (v.matched or v.deferred) and (viewer or v.call_id in mine)
            ],
            partial=not viewer,
        )

    async def healthz(self, request: Request) -> Response:
        """`/healthz`: the process answers."""
        return PlainTextResponse("ok")

    # ------------------------------------------------------------------------ deciding


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
        # `/metrics` checks its own bearer token (a scraper has no session).
        open_paths = ("/login", "/static/", "/healthz", CHAT_SLACK)
        path = request.url.path
        if request.state.session is None and not (path.startswith(open_paths) or path == METRICS):
            return await self.signed_out(request)
        if request.method == "POST" and request.url.path not in ("/login", CHAT_SLACK):
            problem = await _forged(request)
            if problem is not None:
                return PlainTextResponse(problem, status_code=403)
        response = await call_next(request)
        if fresh is not None:
            self.console.set_cookie(response, fresh)
        response.headers.update(SECURITY_HEADERS)
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


def _session(console: Console, request: Request | WebSocket) -> Session | None:
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
    metrics_token: str | None = None,
) -> Starlette:
    """The console as an ASGI app.

    `rules` say who sees which call (`hitl.console.rules`; default: no directory and no
    viewers, so a call that names approvers is shown to the people it names).
    `metrics_token`: the bearer token `/metrics` answers (none: `/metrics` is off).
    """
    console = Console(data, auth, secure_cookie=secure_cookie, rules=rules)
    console.chat = chat
    insights = InsightsPages(console, metrics_token)
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
        Route(INSIGHTS, insights.page),
        Route(METRICS, insights.metrics),
        Route(CHAT_SLACK, console.chat_slack, methods=["POST"]),
        WebSocketRoute(REALTIME, socket_endpoint(console)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(Guard, console=console)],
        exception_handlers={500: console.failed},
    )
