"""The console's decision insights: the `/insights` page and the `/metrics` endpoint.

Both show `hitl.insights`'s figures over a window, read as `hitl insights` reads them
(`hitl.cli.insights.read_window`) from every namespace the console serves, at most once every
`CACHE_SECONDS` per window however many browsers and scrapers ask.

- `/insights?window=1d` is for signed-in people. Viewers see every figure; anyone else sees
  the figures by tool and, by approver, their own row only (other people's pace is not theirs
  to see).
- `/metrics` is for a Prometheus scraper: off (404) unless the console has a metrics token
  (`HITL_CONSOLE_METRICS_TOKEN`), then it answers only `Authorization: Bearer <token>`. It
  carries aggregates only: no run or call id, no arguments, no free text from a payload; tool
  names are bounded to the `MAX_LABELS` most frequent, approvers to the approver directory's
  names when the console has one (else the most frequent), the rest are `other`.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from hitl.cli.insights import Reading, as_json, figures_of, read_window, span_text
from hitl.console.core import ConsoleCore
from hitl.insights import Figures, exposition

INSIGHTS = "/insights"
METRICS = "/metrics"
WINDOWS = {"1h": 3600, "1d": 86400, "7d": 7 * 86400, "30d": 30 * 86400}
"""The windows a page or a scrape may ask for (`?window=`)."""
DEFAULT_WINDOW = "1d"
CACHE_SECONDS = 30.0
"""How long one reading of a window serves every page and scrape."""
RUN_LIMIT = 500
"""Runs read per namespace and window, newest first (the page says how many were read)."""
READ_TIMEOUT = 5.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class _Kept:
    figures: Figures
    at: float


@dataclass
class InsightsSource:
    """Figures per window, read from the console's namespaces and kept `CACHE_SECONDS`."""

    core: ConsoleCore
    limit: int = RUN_LIMIT
    _kept: dict[str, _Kept] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def figures(self, window: str) -> Figures:
        """The figures of `window` (a key of `WINDOWS`), read again when older than the cache."""
        async with self._lock:
            kept = self._kept.get(window)
            if kept is None or time.monotonic() - kept.at > CACHE_SECONDS:
                kept = _Kept(await self._read(window), time.monotonic())
                self._kept[window] = kept
            return kept.figures

    async def _read(self, window: str) -> Figures:
        until = datetime.now(UTC)
        since = until - timedelta(seconds=WINDOWS[window])
        data = self.core.data
        total = Reading()
        for client in data.clients.values():
            got = await read_window(
                client, since, limit=self.limit, queues=data.task_queues, timeout=READ_TIMEOUT
            )
            total.decisions += got.decisions
            total.pending += got.pending
            total.verdicts |= got.verdicts
            total.undecided += got.undecided
            total.listed, total.read = total.listed + got.listed, total.read + got.read
            total.matched = (total.matched or 0) + (
                got.matched if got.matched is not None else got.listed
            )
            total.unread += got.unread
        return figures_of(total, since, until, self.limit)


def window_of(request: Request) -> str:
    """The window a request asks for (an unknown one is the default)."""
    asked = request.query_params.get("window", DEFAULT_WINDOW)
    return asked if asked in WINDOWS else DEFAULT_WINDOW


class InsightsPages:
    """`/insights` and `/metrics` of one console."""

    def __init__(self, core: ConsoleCore, token: str | None) -> None:
        self.core = core
        self.token = token or None
        self.source = InsightsSource(core)

    async def page(self, request: Request) -> Response:
        """`/insights?window=`: the figures of a window, for the person signed in."""
        window = window_of(request)
        person = request.state.session.person
        viewer = self.core.rules.is_viewer(person)
        data = as_json(await self.source.figures(window))
        if not viewer:
            mine = data["time_to_decision"]["by_approver"].get(person)
            data["time_to_decision"]["by_approver"] = {person: mine} if mine else {}
        return self.core.render(
            request,
            "insights.html",
            window=window,
            windows=list(WINDOWS),
            data=data,
            viewer=viewer,
            span=span_text,
        )

    async def metrics(self, request: Request) -> Response:
        """`/metrics?window=`: the figures in the Prometheus text format, for a bearer token."""
        if self.token is None:
            return PlainTextResponse("metrics are off (no HITL_CONSOLE_METRICS_TOKEN)", 404)
        sent = request.headers.get("authorization", "")
        expected = f"Bearer {self.token}"
        if not hmac.compare_digest(sent.encode(), expected.encode()):
            return PlainTextResponse(
                "a bearer token is required", 401, headers={"WWW-Authenticate": "Bearer"}
            )
        fig = await self.source.figures(window_of(request))
        directory = self.core.rules.directory
        approvers = list(directory.approvers) if directory is not None else None
        body = exposition(fig, approvers=approvers)
        return Response(body, headers={"content-type": CONTENT_TYPE})
