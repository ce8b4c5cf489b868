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
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

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
