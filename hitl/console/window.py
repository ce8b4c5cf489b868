"""How a search of the inbox reaches the paused runs one reading did not list.

One reading of the inbox lists at most `limit` paused runs per namespace, as visibility lists
them: the newest-started first (it takes no `ORDER BY`: Temporal Cloud refuses it, and counting
or scanning for the oldest costs a scan of every paused run on the dev server's SQL store).
Past that, the console sends the search to the server instead: a run id (or its start), an
agent, a tool and a minimum waiting time become a visibility clause (`search_clause`), so every
paused run can be found, however many wait, for the price of one listing.

Search text is hostile: only a value a string literal expresses exactly is sent (`_literal`:
a single quote escaped; double quotes, backslashes and control characters never); anything
else is searched in the reading alone.

How many runs wait past a cut reading is counted beside the reading (`Counts`).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

from temporalio.client import Client
from temporalio.service import RPCError

from hitl.cli.common import _literal
from hitl.wire import SA_AGENT, SA_PENDING_SINCE, SA_PENDING_TOOLS

SEARCH_TEXT = 200
"""The longest search text sent to the server (longer: searched in the reading alone)."""


def since_clause(at: datetime) -> str:
    """`HitlPendingSince <= 'at'` (UTC, microseconds: what SQL visibility stores)."""
    return f"{SA_PENDING_SINCE} <= '{at.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S.%fZ')}'"


def search_clause(
    text: str, agent: str = "", tool: str = "", min_age: int = 0, now: datetime | None = None
) -> str | None:
    """The visibility clause for a search of the inbox (`None`: nothing the server can match).

    `text` matches a run id's start, an agent or a pending tool exactly (what the server can
    index); `agent` and `tool` (the filters) match exactly; `min_age` (seconds) keeps runs
    waiting at least that long. A value no string literal expresses exactly (double quotes,
    backslashes, control characters) or a text over `SEARCH_TEXT` characters is left to the
    reading's own search.
    """
    parts = (
        [since_clause((now or datetime.now(UTC)) - timedelta(seconds=min_age))] if min_age else []
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
"""The longest a count of a namespace's paused runs may take (longer: not known)."""
COUNT_KEPT_SECONDS = 30.0
"""How long a count is kept: one scans every paused run on some stores (0.7 s at 90,000 on the
dev server's SQLite), and the inbox is read every 2 s while anyone has it open."""


class Counts:
    """Paused runs per namespace, for the readings that were cut (`Inbox.waiting`)."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[float, str, int]] = {}  # ns -> (when, query, count)

    def counting(self, ns: str, client: Client, query: str) -> asyncio.Future[int | None]:
        """The runs `query` finds in `ns` (`None`: not counted within `COUNT_TIMEOUT`).

        Counted beside the reading (as slow as it at 90,000) unless counted in the last
        `COUNT_KEPT_SECONDS`; awaited only if the reading is cut.
        """
        kept = self._kept.get(ns)
        if kept and kept[1] == query and time.monotonic() - kept[0] <= COUNT_KEPT_SECONDS:
            done: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
            done.set_result(kept[2])
            return done

        async def count() -> int | None:
            try:
                found = await client.count_workflows(query, rpc_timeout=COUNT_TIMEOUT)
            except RPCError:
                return None
            self._kept[ns] = (time.monotonic(), query, int(found.count))
            return int(found.count)

        return asyncio.ensure_future(count())
