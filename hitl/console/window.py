"""One reading of the inbox (`Inbox`), and how a search reaches the runs it did not list.

One reading of the inbox lists at most `limit` paused runs per namespace, as visibility lists
them: the newest-started first (it takes no `ORDER BY`: Temporal Cloud refuses it, and counting
or scanning for the oldest costs a scan of every paused run on the dev server's SQL store).
Past that, the console sends the search to the server instead: a run id (or its start), an
agent, a tool and a minimum waiting time become a visibility clause (`search_clause`), so every
paused run can be found, however many wait, for the price of one listing.

Search text is hostile: only a value a string literal expresses exactly is sent (`_literal`:
a single quote escaped; double quotes, backslashes and control characters never); anything
else is searched in the reading alone.

How many runs wait past a cut reading is counted beside the reading (`Counts`). A namespace
whose listing fails (a deadline, a server down or busy) keeps the last reading's calls, flagged
(`Inbox.carry`): a passing fault neither empties the inbox nor fails the page.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hitl.cli.common import _literal
from hitl.console.rows import Row
from hitl.wire import SA_AGENT, SA_PENDING_TOOLS

SEARCH_TEXT = 200
"""The longest search text sent to the server (longer: searched in the reading alone)."""


def _at(at: datetime) -> str:
    """A time as SQL visibility stores it (UTC, microseconds)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def before_clause(at: datetime) -> str:
    """`StartTime` up to `at` (a microsecond past it, so a run that started at `at` is in)."""
    return f"StartTime < '{_at(at + timedelta(microseconds=1))}'"


def started_clause(at: datetime) -> str:
    """`StartTime <= 'at'`: every run with a call waiting since `at` or before, and others.

    For the waiting-time filter: a call waits no longer than its run has run, and the exact
    waiting time is checked on each listed call. The exact clause (a `HitlPendingSince` range)
    takes 10 times as long on the dev server's SQLite, whose planner then sorts every match:
    1.4-2.0 s against 0.13-0.17 s at 99,000 paused runs.
    """
    return f"StartTime <= '{_at(at)}'"


def search_clause(
    text: str, agent: str = "", tool: str = "", min_age: int = 0, now: datetime | None = None
) -> str | None:
    """The visibility clause for a search of the inbox (`None`: nothing the server can match).

    `text` matches a run id's start, an agent or a pending tool exactly (what the server can
    index); `agent` and `tool` (the filters) match exactly; `min_age` (seconds) keeps runs
    started at least that long ago (`started_clause`). A value no string literal expresses
    exactly (double quotes, backslashes, control characters) or a text over `SEARCH_TEXT`
    characters is left to the reading's own search.
    """
    parts = (
        [started_clause((now or datetime.now(UTC)) - timedelta(seconds=min_age))] if min_age else []
    )
    if text and len(text) <= SEARCH_TEXT and (lit := _literal(text)) is not None:
        parts.append(
            f"(WorkflowId STARTS_WITH {lit} OR {SA_AGENT} = {lit} OR {SA_PENDING_TOOLS} = {lit})"
        )
    elif text:
        return None
    for key, value in ((SA_AGENT, agent), (SA_PENDING_TOOLS, tool)):
        if not value:
            continue
        if len(value) > SEARCH_TEXT or (lit := _literal(value)) is None:
            return None
        parts.append(f"{key} = {lit}")
    return " AND ".join(parts) or None


COUNT_TIMEOUT = timedelta(seconds=2)
"""The longest one count may take (longer: not known)."""
COUNT_KEPT_SECONDS = 30.0
"""How long a count is kept: one scans every paused run on some stores (0.7 s at 90,000 on the
dev server's SQLite), and the inbox is read every 2 s while anyone has it open."""
COUNT_WAIT = 0.5
"""How long after it began a reading waits for its counts (a later reading shows the rest)."""


@dataclass
class Inbox:
    """A reading of the inbox."""

    rows: list[Row] = field(default_factory=list)
    unavailable: list[tuple[str, str, str]] = field(default_factory=list)
    """(namespace, workflow id, why) of paused runs that could not be asked for their calls."""
    left_out: int = 0
    """Paused runs on task queues outside the console's list (not listed)."""
    cut_at: int = 0
    """A namespace had more paused runs than one reading lists (`limit`): listed up to this,
    the newest-started (searches reach the rest: `hitl.console.window`)."""
    waiting: dict[str, int | None] = field(default_factory=dict)
    """Namespace -> paused runs found there, for the namespaces whose reading was cut
    (`None`: not counted in `window.COUNT_TIMEOUT`)."""
    started_by: dict[str, datetime] = field(default_factory=dict)
    """Namespace -> when the oldest run a cut reading listed started (searches go past it)."""
    failed: dict[str, str] = field(default_factory=dict)
    """Namespace -> the status code of the listing that failed there (a passing fault: a
    deadline, a server down or busy); its calls are the last reading's (`carry`)."""
    read_at: float = 0.0
    took: float = 0.0
    """Seconds the reading took."""

    def counted(self) -> int | None:
        """Paused runs found in the namespaces whose reading was cut (`None`: not all counted)."""
        counts = list(self.waiting.values())
        return None if None in counts else sum(c or 0 for c in counts)

    def carry(self, last: Inbox, ns: str, why: str) -> None:
        """Namespace `ns` as the `last` reading found it: listing it failed now (`why`)."""
        self.failed[ns] = why
        self.rows += [r for r in last.rows if r.namespace == ns]
        if ns in last.waiting:
            self.waiting[ns], self.started_by[ns] = last.waiting[ns], last.started_by[ns]
            self.cut_at = max(self.cut_at, last.cut_at)


class Counts:
    """The counts a reading shows beside its rows, keyed by (namespace, query).

    How many paused runs wait where the reading was cut, how many it left out (other queues).
    A count can take longer than the rest of the reading, so none is waited for past
    `COUNT_WAIT` after the reading began: it goes on in the background, and the readings that
    follow show it, for `COUNT_KEPT_SECONDS` (then the last count is shown while it is made
    again).
    """

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], tuple[float, int | None]] = {}
        self._running: dict[tuple[str, str], asyncio.Future[None]] = {}

    def start(
        self,
        key: tuple[str, str],
        count: Callable[[], Awaitable[int | None]],
        keep: float = COUNT_KEPT_SECONDS,
    ) -> None:
        """Count `key` with `count()`, unless counted in the last `keep` seconds or under way.

        With `keep=0` every reading counts, and shows the last count meanwhile.
        """
        kept = self._kept.get(key)
        if key in self._running or (kept and time.monotonic() - kept[0] <= keep):
            return

        async def run() -> None:
            try:
                self._kept[key] = (time.monotonic(), await count())
            finally:
                del self._running[key]

        self._running[key] = asyncio.ensure_future(run())

    async def value(self, key: tuple[str, str], began: float) -> int | None:
        """`key`'s count, waited for until `COUNT_WAIT` after `began` (`None`: not known)."""
        running = self._running.get(key)
        if running is not None:
            await asyncio.wait({running}, timeout=max(0.0, began + COUNT_WAIT - time.monotonic()))
        kept = self._kept.get(key)
        return kept[1] if kept else None

    def counting(self) -> bool:
        """Whether a count is under way."""
        return bool(self._running)
