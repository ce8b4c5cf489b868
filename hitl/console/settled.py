"""Calls settled recently: the inbox's *Decided* and *Expired* views.

Runs of ours whose calls came to something (`HitlOutcomes` is `approved`, `rejected` or
`expired`), found through visibility on the task queues the console serves: running ones and
ones that closed within `WINDOW`. Each run's decisions are read from the run itself: a running
run's `status` query (a worker answers it), a completed run's result (the server keeps it in
history; no worker needed, read once and kept, since it never changes). Runs that failed or
were cancelled have no result and are not listed; nor are runs no worker answers while they
run. The newest `MAX_RUNS` runs are read, at most every `SETTLED_SECONDS`.

Who sees a settled call: viewers; whoever decided it or approved towards it; and whoever could
have decided it when the console last listed it as pending (`ConsoleData.approvers_seen`:
decisions record who decided, not who could have). A call the console never listed pending
(decided by a rule, or before the console started) is shown to viewers and its deciders only.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from hitl.cli.common import _AGENT_KEY as AGENT_KEY
from hitl.cli.common import _Gone, _Pollers, _query, _Unreadable
from hitl.cli.inbox import list_runs, queue_clause, unregistered
from hitl.console.data import QUERY_TIMEOUT, ConsoleData
from hitl.console.rules import Rules
from hitl.wire import QUERY_STATUS, SA_OUTCOMES, WORKFLOW_TYPE, DecisionRecord, RunOutput
from hitl.wire import RunStatus as _RunStatus

log = logging.getLogger("hitl.console")

SETTLED_SECONDS = 5.0
"""How long one reading serves every browser asking."""
WINDOW = timedelta(days=7)
"""How far back a closed run's decisions are listed (running runs: all of their decisions)."""
MAX_RUNS = 200
"""Runs read per namespace and reading, newest first."""
REMEMBERED = 20_000
"""Closed runs' decisions kept in memory (the oldest read are dropped first)."""
SETTLED_VIEWS = {"decided": "Decided", "expired": "Expired"}
"""The status views over settled calls (the others list pending calls)."""


@dataclass
class SettledRow:
    """One settled call: what its run recorded, and where it was."""

    namespace: str
    workflow_id: str
    agent: str
    record: DecisionRecord
    approvers: list[str] | None = None
    """Who could decide it when the console last listed it pending (`None`: never listed)."""

    @property
    def view(self) -> str:
        """`expired` or `decided`."""
        return "expired" if self.record.kind == "expired" or self.record.expired else "decided"

    @property
    def who(self) -> str:
        """Who decided: every approver of a four-eyes approval, else the one, else the rule."""
        d = self.record
        if d.kind == "approve" and len(d.approvals) > 1:
            return ", ".join(a.approver for a in d.approvals)
        return d.approver or d.source

    @property
    def at(self) -> datetime:
        """When it was decided (or expired)."""
        return self.record.decided_at

    @property
    def key(self) -> str:
        """A short id for the row's elements on the page."""
        ids = "\n".join([self.namespace, self.workflow_id, self.record.call_id])
        return hashlib.sha256(ids.encode()).hexdigest()[:16]

    def haystack(self) -> str:
        """What the search box searches: run, call, tool, agent, who, the message."""
        d = self.record
        parts = [self.workflow_id, d.call_id, d.tool_name, self.agent, self.who, d.message or ""]
        return "\n".join(parts).lower()


def visible(rules: Rules, person: str, row: SettledRow) -> bool:
    """Whether `person` sees this settled call (see the module's note)."""
    if rules.is_viewer(person) or rules.took_part(person, row.record):
        return True
    return row.approvers is not None and rules.may_decide(person, row.approvers)


@dataclass
class Settled:
    """The settled calls of the runs a console serves (read through its `ConsoleData`)."""

    data: ConsoleData
    limit: int = MAX_RUNS
    window: timedelta = WINDOW
    _rows: list[SettledRow] = field(default_factory=list)
    _read_at: float = 0.0
    _closed: dict[tuple[str, str, str], tuple[str, list[DecisionRecord]]] = field(
        default_factory=dict
    )
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _reading: asyncio.Future[list[SettledRow]] | None = None

    async def rows_within(self, seconds: float) -> list[SettledRow] | None:
        """`rows()` if they are read within `seconds` (`None`: the reading goes on).

        The pending views show the settled views' counts, and a fresh console reads hundreds
        of closed runs' results for them (1.4 s at 100,000 parked runs): a later page has them.
        """
        reading = self._reading
        if reading is None or reading.done():
            reading = self._reading = asyncio.ensure_future(self.rows())
        # This request's reading: another request may begin the next one meanwhile.
        done, _ = await asyncio.wait({reading}, timeout=seconds)
        return reading.result() if done else None

    async def rows(self) -> list[SettledRow]:
        """Every settled call, newest first (read at most every `SETTLED_SECONDS`)."""
        async with self._lock:
            if time.monotonic() - self._read_at > SETTLED_SECONDS:
                rows: list[SettledRow] = []
                for ns, client in self.data.clients.items():
                    try:
                        rows += await self._namespace(ns, client)
                    except Exception as exc:  # the pending views must not fail for these
                        trace = not isinstance(exc, RPCError)  # a server's refusal: one line
                        what = "reading settled calls in %s failed: %s"
                        log.warning(what, ns, exc, exc_info=trace)
                        rows += [r for r in self._rows if r.namespace == ns]  # the last reading's
                rows.sort(key=lambda r: r.at, reverse=True)
                self._rows, self._read_at = rows, time.monotonic()
            return self._rows

    async def _namespace(self, ns: str, client: Client) -> list[SettledRow]:
        since = (datetime.now(UTC) - self.window).strftime("%Y-%m-%dT%H:%M:%SZ")
        clauses = [
            f"WorkflowType = '{WORKFLOW_TYPE}'",
            f"{SA_OUTCOMES} IN ('approved', 'rejected', 'expired')",
            f"(ExecutionStatus = 'Running' OR CloseTime > '{since}')",
        ]
        within = queue_clause(self.data.task_queues)
        query = " AND ".join([*clauses, within] if within else clauses)
        try:
            found, _ = await list_runs(client, query, self.limit)
        except RPCError as exc:
            if not unregistered(exc):
                raise  # a passing fault: `rows` keeps what the last reading found
            return []  # our search attributes are not registered: nothing to list by
        found = [
            w
            for w in found
            if w.workflow_type == WORKFLOW_TYPE and w.task_queue in self.data.task_queues
        ]
        pollers, semaphore = _Pollers(client), asyncio.Semaphore(16)
        read = await asyncio.gather(
            *(self._decisions(client, w, pollers, semaphore) for w in found)
        )
        cutoff = datetime.now(UTC) - self.window
        seen = self.data.approvers_seen
        return [
            SettledRow(ns, w.id, agent, d, seen.get((ns, w.id, d.call_id)))
            for w, (agent, decisions) in zip(found, read, strict=True)
            for d in decisions
            if d.decided_at >= cutoff
        ]

    async def _decisions(
        self, client: Client, w: Any, pollers: _Pollers, semaphore: asyncio.Semaphore
    ) -> tuple[str, list[DecisionRecord]]:
        """Run `w`'s agent name and recorded decisions (none, when it cannot say)."""
        agent = str(w.typed_search_attributes.get(AGENT_KEY) or "")
        if w.status == WorkflowExecutionStatus.RUNNING:
            async with semaphore:
                try:
                    status: _RunStatus = await _query(
                        client,
                        client.get_workflow_handle(w.id),
                        QUERY_STATUS,
                        _RunStatus,
                        QUERY_TIMEOUT,
                        pollers,
                        w.task_queue,
                    )
                except (_Gone, _Unreadable):
                    return agent, []
            return status.agent or agent, list(status.decisions)
        if w.status != WorkflowExecutionStatus.COMPLETED:
            return agent, []
        key = (client.namespace, w.id, w.run_id)
        if key not in self._closed:
            handle = client.get_workflow_handle(w.id, run_id=w.run_id, result_type=RunOutput)
            async with semaphore:
                try:
                    out = await handle.result(
                        follow_runs=False, rpc_timeout=timedelta(seconds=QUERY_TIMEOUT)
                    )
                except Exception:  # unreadable (another codec key, a deleted history): skip it
                    return agent, []
            self._closed[key] = (agent, list(out.decisions))
            while len(self._closed) > REMEMBERED:
                del self._closed[next(iter(self._closed))]  # the oldest read first
        return self._closed[key]
