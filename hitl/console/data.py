"""What the console reads from Temporal and sends to runs.

The inbox is every pending call of every paused run of ours, found through visibility
(`AgentRun` workflows with `HitlStatus = 'awaiting_approval'` on the task queues our workers
serve) in every namespace the console serves, kept for a couple of seconds so that many
browsers polling it cost one read. A run's calls are read from its inbox memo when the memo
names the run's own first run id (its run wrote it), else from its `status` query; a run that
can be confirmed neither way is shown as unconfirmed, without anything its memo claims.

Decisions go to the run as validated updates, named for the logged-in person, bound to the
call as the person saw it (`seen_sha256`, and `round` for answers and extensions: the run
refuses them if the call changed since), marked `client="console"`, and signed with the
console's gateway key when it has one: a run that requires signed decisions then accepts only
what came through it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Literal, TypeVar, cast

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from hitl.cli.common import _AGENT_KEY as AGENT_KEY
from hitl.cli.common import _code, _Gone, _Pollers, _query, _Unreadable
from hitl.cli.inbox import (
    allowed_queues,
    count_runs,
    inbox_memo,
    left_out,
    list_runs,
    memo_confirmed,
    queue_clause,
    unregistered,
)
from hitl.console.rows import Row as Row
from hitl.console.rows import recorded_words, when
from hitl.console.window import COUNT_TIMEOUT, Counts, before_clause, search_clause
from hitl.console.window import Inbox as Inbox
from hitl.signing import sign_input
from hitl.starting import decision_update_id
from hitl.wire import (
    QUERY_SNAPSHOT,
    QUERY_STATUS,
    SA_STATUS,
    UPDATE_ANSWER,
    UPDATE_APPROVE,
    UPDATE_EXTEND,
    UPDATE_PREVIEW_EDIT,
    UPDATE_REJECT,
    WORKFLOW_TYPE,
    AnswerInput,
    DecisionInput,
    DecisionRecord,
    DecisionRequest,
    EditPreview,
    EditPreviewInput,
    ExtendInput,
    Extension,
    InboxMemo,
    InputAnswer,
    RunOutput,
    RunSnapshot,
    RunStatus,
)

Bound = TypeVar("Bound", AnswerInput, ExtendInput)

log = logging.getLogger("hitl.console")

INBOX_SECONDS = 2.0
"""How long one reading of the inbox serves every browser asking."""
INBOX_QUICK_SECONDS = 1.0
"""A reading quicker than this is read again at once after a decision (else in the background)."""
INBOX_STALE_SECONDS = 30.0
"""How old a reading may be and still be served while the next is read in the background."""
QUERY_TIMEOUT = 5.0
SEARCH_RUNS, SEARCHES_KEPT = 1000, 8
"""The most runs one search past a cut reading lists, and the searches kept (`INBOX_SECONDS`)."""
CLIENT = "console"
CHANGED = "This call changed since you opened it: look again"

REFUSAL_WORDS = {
    "AlreadyDecided": "Someone else decided this call a moment ago",
    "NotPending": "This call no longer waits for a decision",
    "UnknownCall": "This run has no such call",
    "NotAuthorized": "You are not allowed to decide this call",
    "DeadlinePassed": "This call expired before your decision arrived",
    "RunFinished": "The run has finished",
    "InvalidDecision": "The decision was not valid",
    "EditsNotAllowed": "This call's arguments cannot be edited",
    "EditRefused": "The edited arguments were refused",
    "Unsigned": "The run accepts only signed decisions, and the console has no signing key",
    "UnknownKey": "The run does not know the console's signing key",
    "WrongApprover": "The run does not accept the console's key for you",
    "BadSignature": "The run could not verify the console's signature",
    "SignatureExpired": "The console's signature expired",
    "NoDeadline": "This call has no deadline to extend",
    "ArgumentsChanged": CHANGED,
    "Stale": CHANGED,
    "Unbound": "The run takes only decisions bound to what was seen: reload the call and decide",
    "SigningUnavailable": "The run's worker cannot check signed decisions (its extra is missing)",
}


@dataclass
class Outcome:
    """What a decision came to, in words (never a stack trace)."""

    ok: bool
    headline: str
    detail: str = ""
    error_type: str | None = None
    record: BaseModel | None = None


class ConsoleData:
    """Temporal access for the console: one client per namespace."""

    def __init__(
        self,
        clients: dict[str, Client],
        signing: tuple[str, Ed25519PrivateKey] | None = None,
        limit: int = 1000,
        task_queues: list[str] | None = None,
    ) -> None:
        self.clients = clients
        self.signing = signing
        self.limit = limit
        self.task_queues = allowed_queues(task_queues)
        """The task queues our workers serve: runs on others are not listed."""
        self._inbox = Inbox()
        self._lock = asyncio.Lock()
        self._refresh: asyncio.Task[None] | None = None
        self._forgotten = 0
        self.queries: dict[str, str | None] = {}
        """Namespace -> the last reading's query (`None`: read without our search attributes)."""
        self._searches: dict[tuple[str, str, str, int], tuple[float, list[Row]]] = {}
        self._counts = Counts()
        self.approvers_seen: dict[tuple[str, str, str], list[str]] = {}
        """(namespace, run, call) -> who could decide it, as last listed pending (for the
        settled views, `hitl.console.settled`; the latest 50,000)."""

    # ------------------------------------------------------------------------ reading

    async def inbox(self) -> Inbox:
        """Every pending call (read at most every `INBOX_SECONDS`).

        A reading up to `INBOX_STALE_SECONDS` old is served at once while a new one is read
        in the background (10,000 calls take seconds to read: nobody waits for that but the
        first request, or the first after a decision or a long quiet spell).
        """
        async with self._lock:
            age = time.monotonic() - self._inbox.read_at
            if age <= INBOX_SECONDS:
                return self._inbox
            if age <= INBOX_STALE_SECONDS and self._inbox.read_at:
                if self._refresh is None or self._refresh.done():
                    self._refresh = asyncio.create_task(self._read_later(self._forgotten))
                return self._inbox
            self._inbox = await self._read_inbox()
            return self._inbox

    async def _read_later(self, began: int) -> None:
        """A reading in the background; kept unless a decision came since `began` (`forget`)."""
        try:
            inbox = await self._read_inbox()
        except Exception:  # the next request reads (and reports) it
            log.warning("reading the inbox in the background failed", exc_info=True)
            return
        # A decision since it began (`forget`) makes it old news; a newer reading stays.
        if began == self._forgotten and inbox.read_at > self._inbox.read_at:
            self._inbox = inbox

    def forget(self) -> None:
        """Read again after a decision (a reading begun before it is dropped).

        On the next request when a reading is quick; else in the background from the next
        request on, which is served the reading it has meanwhile.
        """
        self._forgotten += 1
        self._searches.clear()
        if self._inbox.took <= INBOX_QUICK_SECONDS:
            self._inbox.read_at = 0.0
        else:
            self._inbox.read_at = min(self._inbox.read_at, time.monotonic() - INBOX_SECONDS - 1e-3)

    async def _read_inbox(self) -> Inbox:
        began = time.monotonic()
        inbox = Inbox()
        for ns, client in self.clients.items():
            try:
                await self._read_namespace(inbox, ns, client, began)
            except RPCError as exc:  # a passing fault: the last reading's calls stand, flagged
                code = _code(exc)
                log.warning("listing the paused runs in %s failed: %s (%s)", ns, exc, code)
                inbox.carry(self._inbox, ns, code)
        # Served for INBOX_SECONDS from when it is ready: stamped when it began, a reading that
        # took longer (10,000 calls: seconds) was stale on arrival and every request read again.
        inbox.read_at = time.monotonic()
        inbox.took = inbox.read_at - began
        return inbox

    async def _read_namespace(self, inbox: Inbox, ns: str, client: Client, began: float) -> None:
        """Namespace `ns`'s paused runs of ours into `inbox`: their calls, or why not.

        With the counts the page shows (`Counts`): the runs left out, and where the reading is
        cut how many wait, counted beside the listing when the last reading was cut too.
        """
        queues = self.task_queues
        kind = f"WorkflowType = '{WORKFLOW_TYPE}'"
        within = queue_clause(queues)
        clauses = [f"{SA_STATUS} = 'awaiting_approval'", "ExecutionStatus = 'Running'", kind]

        async def listing(query: list[str]) -> tuple[list[Any], str, bool]:
            text = " AND ".join([*query, within] if within else query)
            if ns in self._inbox.waiting:
                self._counts.start((ns, text), partial(count_runs, client, text, COUNT_TIMEOUT))
            found, more = await list_runs(client, text, self.limit)
            return found, text, more

        degraded = False
        try:
            found, text, more = await listing(clauses)
        except RPCError as exc:
            if not unregistered(exc):
                raise
            # Our search attributes are not registered: ask every run.
            degraded, clauses = True, ["ExecutionStatus = 'Running'", kind]
            found, text, more = await listing(clauses)
        outside = (ns, f"left out: {' AND '.join(clauses)}")
        # Every reading (a run that appears on another queue is news), never waited long for.
        self._counts.start(outside, partial(left_out, client, clauses, queues), keep=0.0)
        if more:  # the newest-started `limit`: searches reach the rest
            self._counts.start((ns, text), partial(count_runs, client, text, COUNT_TIMEOUT))
        self.queries[ns] = None if degraded else text
        rows = await self._rows(ns, client, found, degraded, inbox.unavailable)
        inbox.rows += rows
        inbox.left_out += await self._counts.value(outside, began) or 0
        if more:
            inbox.cut_at = self.limit
            inbox.started_by[ns] = min((w.start_time for w in found), default=datetime.now(UTC))
            inbox.waiting[ns] = await self._counts.value((ns, text), began)
        self._seen(rows)

    def _seen(self, rows: list[Row]) -> None:
        """Who could decide each listed call, kept for the settled views (the latest 50,000)."""
        for r in rows:
            if r.confirmed and not r.viewers_only:
                self.approvers_seen.pop((r.namespace, r.workflow_id, r.call_id), None)
                self.approvers_seen[(r.namespace, r.workflow_id, r.call_id)] = list(r.approvers)
        while len(self.approvers_seen) > 50_000:
            del self.approvers_seen[next(iter(self.approvers_seen))]

    async def _rows(
        self,
        ns: str,
        client: Client,
        found: list[Any],
        degraded: bool,
        unavailable: list[tuple[str, str, str]],
    ) -> list[Row]:
        """The rows of paused runs `found` in namespace `ns` (ours, on our task queues).

        Read from their memos, else asked.
        """
        ours = self.task_queues
        found = [w for w in found if w.workflow_type == WORKFLOW_TYPE and w.task_queue in ours]
        rows: list[Row] = []
        semaphore = asyncio.Semaphore(16)  # runs asked at once
        pollers = _Pollers(client)
        answers = await asyncio.gather(
            *(_ask(client, w, pollers, semaphore, degraded) for w in found)
        )
        for w, answer in zip(found, answers, strict=True):
            agent = str(w.typed_search_attributes.get(AGENT_KEY) or "")
            if isinstance(answer, InboxMemo):
                rows += [Row.of_entry(ns, w.id, agent, w.task_queue, e) for e in answer.calls]
            elif isinstance(answer, RunStatus):
                rows += [
                    Row.of_pending(ns, w.id, answer.agent, w.task_queue, p) for p in answer.pending
                ]
            elif isinstance(answer, tuple) and not degraded:
                why, memo = answer
                unavailable.append((ns, w.id, why))
                rows.append(Row.unconfirmed(ns, w.id, agent, w.task_queue, why, memo))
        await _mark_unserved(rows, pollers)
        return rows

    async def search(self, text: str, agent: str, tool: str, min_age: int) -> list[Row]:
        """Rows of paused runs a search names that the last (cut) reading did not list.

        Read from the server in the namespaces where that reading was cut; `[]` when none was,
        when there is nothing to search for, or when the server cannot match the search (the
        reading's own search then stands). Kept for `INBOX_SECONDS` per search (the page
        polls); `forget` drops them.
        """
        cut = [ns for ns in self.clients if ns in self._inbox.waiting]
        where = search_clause(text, agent, tool, min_age) if cut else None
        if where is None:
            return []
        key = (text, agent, tool, min_age)
        kept = self._searches.get(key)
        if kept is None or time.monotonic() - kept[0] > INBOX_SECONDS:
            kept = (time.monotonic(), await self._search(cut, where))
            self._keep(key, kept)
        have = {(r.namespace, r.workflow_id, r.call_id) for r in self._inbox.rows}
        return [r for r in kept[1] if (r.namespace, r.workflow_id, r.call_id) not in have]

    async def _search(self, namespaces: list[str], where: str) -> list[Row]:
        """The rows of the paused runs `where` narrows each namespace's reading to."""
        rows: list[Row] = []
        for ns in namespaces:
            client, query = self.clients[ns], self.queries.get(ns)
            if query is None:  # our search attributes are not registered there
                continue
            past = before_clause(self._inbox.started_by[ns])  # cut: set with `waiting`
            try:  # the runs started before the reading's oldest: what it did not list
                found, _ = await list_runs(client, f"{query} AND {where} AND {past}", SEARCH_RUNS)
            except RPCError:
                log.warning("searching paused runs in %s failed", ns, exc_info=True)
                continue
            rows += await self._rows(ns, client, found, False, [])
        self._seen(rows)
        return rows

    def _keep(self, key: tuple[str, str, str, int], kept: tuple[float, list[Row]]) -> None:
        """Keep a search's rows (`SEARCHES_KEPT` at most, the expired dropped first)."""
        for old in [k for k, (at, _) in self._searches.items() if kept[0] - at > INBOX_SECONDS]:
            del self._searches[old]
        while len(self._searches) >= SEARCHES_KEPT:
            del self._searches[next(iter(self._searches))]
        self._searches[key] = kept

    async def snapshot(self, namespace: str, workflow_id: str) -> RunSnapshot:
        """A run's status and transcript (`_Gone` / `_Unreadable` when it cannot say).

        Only a run of ours is asked: an `AgentRun` on a task queue our workers serve (the
        server says which, `describe`). Any other workflow is `_Gone` to the console: whatever
        answers queries on a queue we do not serve is not ours to show.
        """
        client = self.clients[namespace]
        handle = client.get_workflow_handle(workflow_id)
        try:
            desc = await handle.describe(rpc_timeout=timedelta(seconds=QUERY_TIMEOUT))
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise _Gone(f"no run {workflow_id!r} in this namespace") from None
            raise _Unreadable(workflow_id, exc.message) from None
        if desc.workflow_type != WORKFLOW_TYPE or desc.task_queue not in self.task_queues:
            raise _Gone(f"{workflow_id!r} is not a run on a task queue this console serves")
        snap: RunSnapshot = await _query(
            client, handle, QUERY_SNAPSHOT, RunSnapshot, QUERY_TIMEOUT, queue=desc.task_queue
        )
        return snap

    # ------------------------------------------------------------------------ deciding

    async def decide(
        self,
        namespace: str,
        workflow_id: str,
        call_id: str,
        person: str,
        kind: str,
        *,
        seen_sha256: str,
        message: str | None = None,
        reason: str | None = None,
        arguments: dict[str, Any] | None = None,
        client: str = CLIENT,
    ) -> Outcome:
        """Approve (with edited `arguments`, maybe) or reject one call, as `person`.

        `seen_sha256` names the call's arguments as the person saw them (its
        `arguments_sha256`): the run refuses the decision (`ArgumentsChanged`) if they changed.
        """
        d = DecisionInput(
            call_id=call_id,
            approver=person,
            message=message if kind == "reject" else None,
            reason=reason,
            arguments=arguments,
            client=client,
            seen_sha256=seen_sha256,
        )
        if self.signing is not None:
            key_id, key = self.signing
            d = sign_input(d, kind=kind, workflow_id=workflow_id, key_id=key_id, key=key)
        request = DecisionRequest(kind="approve" if kind == "approve" else "reject", **dict(d))
        update = UPDATE_APPROVE if kind == "approve" else UPDATE_REJECT
        uid = decision_update_id(workflow_id, update, [request])
        outcome = await self._send(namespace, workflow_id, update, d, DecisionRecord, uid)
        if outcome.ok and isinstance(outcome.record, DecisionRecord):
            outcome.headline, outcome.detail = recorded_words(outcome.record)
        return outcome

    async def preview_edit(
        self,
        namespace: str,
        workflow_id: str,
        call_id: str,
        person: str,
        arguments: dict[str, Any],
        *,
        seen_sha256: str,
    ) -> Outcome:
        """How the call would read with `arguments` (`record` is the run's `EditPreview`)."""
        payload = EditPreviewInput(
            call_id=call_id, arguments=arguments, approver=person, seen_sha256=seen_sha256
        )
        outcome = await self._send(
            namespace, workflow_id, UPDATE_PREVIEW_EDIT, payload, EditPreview
        )
        return outcome

    async def extend(
        self,
        namespace: str,
        workflow_id: str,
        call_id: str,
        person: str,
        seconds: float,
        *,
        seen_sha256: str,
        round: int,
    ) -> Outcome:
        """Move a call's deadline `seconds` later (the call as seen: `seen_sha256`, `round`)."""
        payload = ExtendInput(
            call_id=call_id,
            seconds=seconds,
            approver=person,
            client=CLIENT,
            seen_sha256=seen_sha256,
            round=round,
        )
        payload = self._signed(payload, workflow_id)
        outcome = await self._send(namespace, workflow_id, UPDATE_EXTEND, payload, Extension)
        if outcome.ok and isinstance(outcome.record, Extension):
            outcome.headline = f"The deadline is now {when(outcome.record.deadline)}"
        return outcome

    async def answer(
        self,
        namespace: str,
        workflow_id: str,
        call_id: str,
        person: str,
        action: str,
        content: dict[str, Any] | None,
        *,
        seen_sha256: str,
        round: int,
        reason: str | None = None,
    ) -> Outcome:
        """Answer the question a tool asks (the call as seen: `seen_sha256`, `round`)."""
        payload = AnswerInput(
            call_id=call_id,
            action=cast(Literal["accept", "decline", "cancel"], action),
            content=content if action == "accept" else None,
            approver=person,
            reason=reason,
            client=CLIENT,
            seen_sha256=seen_sha256,
            round=round,
        )
        payload = self._signed(payload, workflow_id)
        outcome = await self._send(namespace, workflow_id, UPDATE_ANSWER, payload, InputAnswer)
        if outcome.ok:
            outcome.headline = {
                "accept": f"Answered by {person}; the tool goes on with the answer",
                "decline": f"Declined by {person}; the tool is told no",
                "cancel": f"Dismissed by {person}",
            }[action]
        return outcome

    def _signed(self, payload: Bound, workflow_id: str) -> Bound:
        """`payload` signed with the console's gateway key (as it is, without one)."""
        if self.signing is None:
            return payload
        key_id, key = self.signing
        return sign_input(payload, workflow_id=workflow_id, key_id=key_id, key=key)

    async def _send(
        self,
        namespace: str,
        workflow_id: str,
        update: str,
        payload: BaseModel,
        result_type: type[BaseModel],
        update_id: str | None = None,
    ) -> Outcome:
        handle = self.clients[namespace].get_workflow_handle(workflow_id)
        try:
            record = await handle.execute_update(
                update,
                payload,
                id=update_id,
                result_type=result_type,
                rpc_timeout=timedelta(seconds=10),
            )
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            kind = cause.type if isinstance(cause, ApplicationError) else None
            text = cause.message if isinstance(cause, ApplicationError) else str(cause)
            words = REFUSAL_WORDS.get(kind or "", "The run refused it")
            return Outcome(False, words, text, kind or "Refused")
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            return Outcome(
                False,
                "No worker took the decision within 10 seconds",
                "It was not applied. Try again once a worker serves this run's task queue.",
                "NoWorker",
            )
        except RPCError as exc:
            if "already completed" in exc.message:
                return await self._finished(namespace, workflow_id, payload)
            return Outcome(False, "The run could not be reached", exc.message, "Unreachable")
        finally:
            self.forget()
        return Outcome(True, "Done", record=record)

    async def _finished(self, namespace: str, workflow_id: str, payload: BaseModel) -> Outcome:
        """A decision for a run that has finished: what it recorded for that call, if anything."""
        handle = self.clients[namespace].get_workflow_handle(workflow_id, result_type=RunOutput)
        call_id = getattr(payload, "call_id", None)
        try:
            out = await handle.result(rpc_timeout=timedelta(seconds=10))
        except Exception:
            return Outcome(False, "The run has finished", "", "RunFinished")
        prior = next((d for d in out.decisions if d.call_id == call_id), None)
        detail = "It took no more decisions."
        if prior is not None:
            headline, _ = recorded_words(prior)
            detail = f"It had recorded: {headline}."
        return Outcome(False, "The run has finished", detail, "RunFinished")


async def _mark_unserved(rows: list[Row], pollers: _Pollers) -> None:
    """Mark the rows whose task queue no worker polls (one question per queue and reading)."""
    for row in rows:
        if row.confirmed and not row.no_worker:
            row.no_worker = await pollers.count(row.task_queue) == 0


async def _ask(
    client: Client, w: Any, pollers: _Pollers, semaphore: asyncio.Semaphore, degraded: bool
) -> Any:
    """Paused run `w`'s calls: its own memo, else its status (`None`: gone), else why not.

    Why not is `(reason, memo)`: the memo its run did not write, if any (never believed).
    """
    memo = None if degraded else await inbox_memo(w)
    if memo is not None and await memo_confirmed(client, w, memo):
        return memo
    async with semaphore:
        try:
            return await _query(
                client,
                client.get_workflow_handle(w.id),
                QUERY_STATUS,
                RunStatus,
                QUERY_TIMEOUT,
                pollers,
                w.task_queue,
            )
        except _Gone:
            return None
        except _Unreadable as exc:
            return (exc.reason, memo)
