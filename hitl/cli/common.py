"""Shared by the commands: refusals, output helpers, asking runs by query."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from hitl.wire import (
    QUERY_STATUS,
    SA_AGENT,
    SA_DEADLINE,
    SA_PENDING_SINCE,
    SA_PENDING_TOOLS,
    RunOutput,
    RunStatus,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

_SPAN = re.compile(r"^(\d+)([smhd])$")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_span(text: str) -> timedelta:
    """`7d`, `12h`, `30m`, `45s` as a timedelta (`ValueError` otherwise)."""
    match = _SPAN.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a span like 7d, 12h, 30m or 45s")
    return timedelta(**{_UNIT[match.group(2)]: int(match.group(1))})


def approver_name(args: argparse.Namespace) -> str:
    """Who decides: `--as`, else `HITL_APPROVER`, else the OS user."""
    return args.as_ or os.environ.get("HITL_APPROVER") or getpass.getuser()


def refused_update(exc: WorkflowUpdateFailedError) -> Refused:
    """A run's refusal of an update, as one line with its type."""
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return Refused(f"refused: {cause.message} ({cause.type})")
    return Refused(f"refused: {cause}")


class Refused(Exception):
    """A command could not do what was asked; the message says why (exit 1)."""


class _Gone(Refused):
    """The run does not exist (any more) in this namespace."""


class _Unreadable(Refused):
    """The run exists but could not be asked; `reason` says why, without the run's id."""

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"cannot read run {run_id}: {reason}")
        self.reason = reason


# ----------------------------------------------------------------------------- output

_BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
"""Bidirectional formatting characters: they reorder what a terminal shows (Trojan Source)."""


def _unsafe(c: str) -> bool:
    code = ord(c)
    return (code < 0x20 and c not in "\n\t") or 0x7F <= code <= 0x9F or code in _BIDI


def escape(text: str) -> str:
    r"""`text` with control and bidirectional characters written as `\uXXXX`.

    Everything a run shows may come from anyone (tool arguments, model text, approver names,
    call ids): a terminal escape sequence in it must not recolour, retitle or rewrite the
    operator's terminal. `\uXXXX` keeps JSON output valid, with the same meaning.
    """
    if not any(_unsafe(c) for c in text):
        return text
    return "".join(f"\\u{ord(c):04x}" if _unsafe(c) else c for c in text)


def one_line(text: object) -> str:
    r"""A value printed on one line: escaped, with its line breaks shown as `\n`.

    So nobody can forge an extra line of output (say a fake "Decisions:" line).
    """
    value = str(text)
    value = value.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    return escape(value)


def labelled_text(label: str, text: object) -> list[str]:
    """`label: text`, or `label:` with each line of a longer text indented under it.

    Every line is escaped, and no line of the text can pass for a line of ours.
    """
    lines = str(text).splitlines() or [""]
    if len(lines) == 1:
        return [f"{label}: {one_line(lines[0])}"]
    return [f"{label}:", *(f"    {one_line(line)}" for line in lines)]


class SafeStream:
    """A text stream that escapes what `escape` escapes in everything written to it."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        """Write `text`, escaped."""
        return int(self._stream.write(escape(text)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _ago(when: datetime | None) -> str:
    if when is None:
        return "-"
    seconds = max(0, int((datetime.now(UTC) - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line.rstrip()]
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(out)


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, default=str)


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when else None


def _short(text: str, width: int = 60) -> str:
    text = one_line(" ".join(str(text).split()))
    return text if len(text) <= width else text[: width - 1] + "…"


async def _handle(client: Client, run_id: str) -> WorkflowHandle[Any, Any]:
    return client.get_workflow_handle(run_id, result_type=RunOutput)


def _code(exc: RPCError) -> str:
    try:
        return RPCStatusCode(exc.status).name
    except ValueError:
        return str(exc.status)


# The server keeps a query waiting for a worker (about 30 s) and then cancels it; the client's
# own deadline (`--timeout`) ends the wait sooner with one of these codes.


_UNANSWERED = (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED)
NO_POLLER = "no poller seen"
"""How the server starts a query's FAILED_PRECONDITION when no worker polled the run's queue of
late: it may say so before the task queue's poller list forgets a worker just stopped."""


class _Pollers:
    """Live workflow pollers per task queue, asked once per queue and command.

    A second, `fresh` count is taken (once) after a query went unanswered, to say why.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self._asked: dict[tuple[str, bool], asyncio.Future[int | None]] = {}

    async def count(self, queue: str, *, fresh: bool = False) -> int | None:
        """How many workers poll `queue` (`None`: the server would not say)."""
        key = (queue, fresh)
        if key not in self._asked:
            self._asked[key] = asyncio.ensure_future(self._ask(queue))
        return await self._asked[key]

    async def _ask(self, queue: str) -> int | None:
        from hitl.serving import live_pollers

        try:
            return await live_pollers(self.client, queue)
        except RPCError:
            return None

    async def why_unanswered(self, queue: str, timeout: float) -> str:
        """Why a run on `queue` did not answer a query within `timeout` seconds."""
        if await self.count(queue, fresh=True) == 0:
            return f"no worker is polling task queue {queue!r}"
        return f"no worker answered within {timeout:g}s on task queue {queue!r}"


async def _query(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    name: str,
    result_type: type[Any],
    timeout: float,
    pollers: _Pollers | None = None,
    queue: str | None = None,
) -> Any:
    """Ask a run a query within `timeout` seconds, or say plainly why it cannot answer.

    Queries are answered by a worker. With none polling the run's task queue (`queue`, else
    looked up) the answer is immediate; with one that does not answer, it comes after `timeout`
    seconds, never after the server's own query timeout. Raises `_Gone` or `_Unreadable`.
    """
    pollers = pollers or _Pollers(client)
    if queue is None:
        try:
            desc = await handle.describe(rpc_timeout=timedelta(seconds=timeout))
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise _Gone(f"no run {handle.id!r} in this namespace") from None
            raise _Unreadable(handle.id, f"{exc.message} ({_code(exc)})") from None
        queue = desc.task_queue
    if await pollers.count(queue) == 0:
        raise _Unreadable(handle.id, f"no worker is polling task queue {queue!r}")
    try:
        return await handle.query(
            name, result_type=result_type, rpc_timeout=timedelta(seconds=timeout)
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise _Gone(f"no run {handle.id!r} in this namespace") from None
        if exc.status in _UNANSWERED:
            raise _Unreadable(handle.id, await pollers.why_unanswered(queue, timeout)) from None
        if exc.status == RPCStatusCode.FAILED_PRECONDITION and NO_POLLER in exc.message:
            raise _Unreadable(handle.id, f"no worker is polling task queue {queue!r}") from None
        raise _Unreadable(handle.id, f"{exc.message} ({_code(exc)})") from None
    except WorkflowQueryFailedError as exc:
        raise _Unreadable(handle.id, f"the {name} query failed: {exc}") from None


async def _status(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    timeout: float,
    pollers: _Pollers | None = None,
) -> RunStatus:
    status: RunStatus = await _query(client, handle, QUERY_STATUS, RunStatus, timeout, pollers)
    return status


def _literal(value: str) -> str | None:
    """`value` as a visibility-query string literal, or `None` when no literal matches it.

    A single quote is escaped. Double quotes and backslashes cannot be matched exactly by every
    visibility store (the dev server's SQLite store matches neither, escaped or not), so such
    values are filtered on the client instead.
    """
    if any(c in value for c in '"\\') or any(ord(c) < 32 for c in value):
        return None
    return "'" + value.replace("'", "\\'") + "'"


def _path_text(path: Sequence[str], tool: str) -> str:
    """`Desk > research > Researcher > fetch`: where a call sits in the run's agent graph."""
    return " > ".join([*path, tool])


_TOOLS_KEY = SearchAttributeKey.for_keyword_list(SA_PENDING_TOOLS)


_SINCE_KEY = SearchAttributeKey.for_datetime(SA_PENDING_SINCE)


_AGENT_KEY = SearchAttributeKey.for_keyword(SA_AGENT)


_DEADLINE_KEY = SearchAttributeKey.for_datetime(SA_DEADLINE)
