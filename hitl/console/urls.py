"""The console's addresses: identifiers travel as query parameters, never as path segments.

Run ids, call ids and namespaces are anyone's text (a run id may hold `/`, `?`, `#`, `%`, `..`
or `/calls/x/decide?`). A route that took them from the path would let one run's id name
another run's call (Starlette routes on the decoded path, so even `%2F` splits a segment).
So every page that is about a run or a call has a fixed path and names them in its query
string, each value percent-encoded whole (`urllib.parse.quote`, no character kept but letters,
digits and `_.-~`): `/call?ns=...&run=...&call=...`. `ids_of` reads them back, refusing a
query that names one of them twice or not at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import parse_qsl, quote, urlsplit

__all__ = [
    "AUDIT",
    "CALL",
    "DECIDE",
    "DECIDE_RUN",
    "LIVE",
    "RUN",
    "audit_url",
    "call_url",
    "decide_run_url",
    "decide_url",
    "ids_of",
    "one_each",
    "run_url",
]

CALL = "/call"
"""A call's page: `?ns=&run=&call=`."""
LIVE = "/call/live"
"""What a call's page polls to learn it was decided or changed elsewhere."""
RUN = "/run"
"""A run's calls that wait, to review and approve together: `?ns=&run=`."""
DECIDE_RUN = "/decide-run"
"""Where a run's page posts "approve all": `?ns=&run=` (each call with its own ticket)."""
DECIDE = "/decide"
"""Where a call's forms post: `?ns=&run=&call=` (the form repeats them in hidden fields)."""
AUDIT = "/audit"
"""A run's decisions and refused attempts: `?ns=&run=`."""


def _q(value: str) -> str:
    """`value` percent-encoded whole (UTF-8; nothing left as is but letters, digits, `_.-~`)."""
    return quote(value, safe="")


def call_url(namespace: str, run: str, call: str) -> str:
    """The page of call `call` of run `run` in `namespace`."""
    return f"{CALL}?ns={_q(namespace)}&run={_q(run)}&call={_q(call)}"


def decide_url(namespace: str, run: str, call: str) -> str:
    """Where the forms of that call's page post."""
    return f"{DECIDE}?ns={_q(namespace)}&run={_q(run)}&call={_q(call)}"


def run_url(namespace: str, run: str) -> str:
    """The address of a run's page (its calls that wait, together)."""
    return f"{RUN}?ns={_q(namespace)}&run={_q(run)}"


def decide_run_url(namespace: str, run: str) -> str:
    """Where a run's page posts."""
    return f"{DECIDE_RUN}?ns={_q(namespace)}&run={_q(run)}"


def audit_url(namespace: str, run: str) -> str:
    """The audit page of run `run` in `namespace`."""
    return f"{AUDIT}?ns={_q(namespace)}&run={_q(run)}"


def ids_of(url: str, names: Sequence[str]) -> list[str] | None:
    """The values of `names` in a console address (or its query string), each given once.

    `None` when one is missing or repeated: a page never guesses which of two runs was meant.
    """
    query = urlsplit(url).query if url.startswith("/") else url
    found: dict[str, list[str]] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        found.setdefault(key, []).append(value)
    return one_each(found, names)


def one_each(given: Mapping[str, Sequence[str]], names: Sequence[str]) -> list[str] | None:
    """`given[name]`'s one value for each of `names`; `None` if any is missing or repeated."""
    values = []
    for name in names:
        found = list(given.get(name, ()))
        if len(found) != 1:
            return None
        values.append(found[0])
    return values
