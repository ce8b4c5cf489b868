"""The console's state, and what every page and action shares.

Its state: data access, sign-in, who may see what, the templates. Shared: rendering, the one
not-found page, reading a run.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from hitl.cli.common import _Gone, _Unreadable
from hitl.console.auth import COOKIE, Authenticator, Session
from hitl.console.chat import SlackGateway
from hitl.console.data import ConsoleData, Row
from hitl.console.rules import Rules
from hitl.console.settled import Settled
from hitl.console.view import _env
from hitl.wire import PendingApproval, RunSnapshot

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
"""On every answer of the console's, an error page's too."""
RETRY_SECONDS = 10
"""How soon a page the console could not answer is asked for again."""


class ConsoleCore:
    """The console's state and shared helpers (pages: `hitl.console.app`; actions: `acts`)."""

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
        self.settled = Settled(data)
        """Calls settled lately (the *Decided* and *Expired* views)."""

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

    async def failed(self, request: Request, exc: Exception) -> Response:
        """A request the console could not answer (the server logs `exc`): never a trace.

        An htmx poll gets a bare 500 (htmx swaps nothing and polls on); a page says so and asks
        again in `RETRY_SECONDS`; a post says how to learn whether it took effect.
        """
        if request.headers.get("HX-Request"):
            response = Response(status_code=500)
        else:
            retry = request.method == "GET"
            html = self.env.get_template("error.html").render(
                person=None, csrf="", retry=RETRY_SECONDS if retry else None
            )
            response = HTMLResponse(html, status_code=500)
        response.headers.update(SECURITY_HEADERS)
        return response

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

    def approvable(self, person: str, calls: list[PendingApproval]) -> list[PendingApproval]:
        """The calls of a run `person` may approve now (not approved by them already)."""
        return [
            p
            for p in calls
            if p.kind == "approval"
            and self.rules.may_decide(person, p.approvers)
            and not any(a.approver == person for a in p.approvals)
        ]
