"""What the console reads from Temporal and sends to runs.

The inbox is every pending call of every paused run, found through visibility
(`HitlStatus = 'awaiting_approval'`) and each run's `status` query, in every namespace the
console serves, kept for a couple of seconds so that many browsers polling it cost one read.
Decisions go to the run as validated updates, named for the logged-in person, marked
`client="console"`, and signed with the console's gateway key when it has one: a run that
requires signed decisions then accepts only what came through it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from hitl.cli.common import _AGENT_KEY as AGENT_KEY
from hitl.cli.common import _Gone, _Pollers, _query, _Unreadable
from hitl.cli.inbox import inbox_memo
from hitl.signing import sign_input
from hitl.starting import decision_update_id
from hitl.wire import (
    QUERY_SNAPSHOT,
    QUERY_STATUS,
    SA_STATUS,
    UPDATE_ANSWER,
    UPDATE_APPROVE,
    UPDATE_EXTEND,
    UPDATE_REJECT,
    WORKFLOW_TYPE,
    AnswerInput,
    DecisionInput,
    DecisionRecord,
    DecisionRequest,
    ExtendInput,
    Extension,
    InboxEntry,
    InputAnswer,
    PendingApproval,
    RunOutput,
    RunSnapshot,
    RunStatus,
)

INBOX_SECONDS = 2.0
"""How long one reading of the inbox serves every browser asking."""
QUERY_TIMEOUT = 5.0
CLIENT = "console"

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
}


@dataclass
class Row:
    """One pending call in the inbox (from a run's memo, or from its `status` query)."""

    namespace: str
    workflow_id: str
    agent: str
    task_queue: str
    call_id: str
    tool_name: str
    title: str
    kind: str = "approval"
    requested_at: datetime | None = None
    deadline: datetime | None = None
    required_approvals: int = 1
    approved: int = 0
    approvers: list[str] = field(default_factory=list)
    text: str = ""
    """More to search: the call's arguments and message, when the run was asked."""

    @classmethod
    def of_pending(cls, ns: str, w: str, agent: str, queue: str, p: PendingApproval) -> Row:
        """A row from a run's `status` answer."""
        title = p.request.title if p.request else f"{p.agent_name} wants to run {p.tool_name}"
        if p.kind == "input" and p.input_request is not None:
            title = p.input_request.message
        message = p.request.message if p.request else ""
        return cls(
            ns, w, agent, queue, p.call_id, p.tool_name, title, p.kind, p.requested_at,
            p.deadline, p.required_approvals, len(p.approvals), p.approvers,
            f"{p.arguments}\n{message}",
        )  # fmt: skip

    @classmethod
    def of_entry(cls, ns: str, w: str, agent: str, queue: str, e: InboxEntry) -> Row:
        """A row from a paused run's memo (no query, no worker)."""
        return cls(
            ns, w, agent, queue, e.call_id, e.tool_name, e.title, e.kind, e.requested_at,
            e.deadline, e.required_approvals, len(e.approved_by), e.approvers,
        )  # fmt: skip

    @property
    def since(self) -> datetime:
        """When it started waiting (for sorting; unknown sorts first)."""
        return self.requested_at or datetime.min.replace(tzinfo=UTC)

    @property
    def groups(self) -> list[str]:
        """The approver groups it names (`group:finance` -> `finance`)."""
        return [a[6:] for a in self.approvers if a.startswith("group:")]

    def haystack(self) -> str:
        """What the search box searches: run, call, tool, agent, title (and arguments)."""
        parts = [self.workflow_id, self.call_id, self.tool_name, self.agent, self.title, self.text]
        return "\n".join(parts).lower()


@dataclass
class Inbox:
    """A reading of the inbox."""

    rows: list[Row] = field(default_factory=list)
    unavailable: list[tuple[str, str, str]] = field(default_factory=list)
    """(namespace, workflow id, why) of paused runs that could not be asked for their calls."""
    read_at: float = 0.0


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
        limit: int = 5000,
    ) -> None:
        self.clients = clients
        self.signing = signing
        self.limit = limit
        self._inbox = Inbox()
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------------ reading

    async def inbox(self) -> Inbox:
        """Every pending call (read at most every `INBOX_SECONDS`)."""
        async with self._lock:
            if time.monotonic() - self._inbox.read_at > INBOX_SECONDS:
                self._inbox = await self._read_inbox()
            return self._inbox

    def forget(self) -> None:
        """Read again on the next request (after a decision)."""
        self._inbox.read_at = 0.0

    async def _read_inbox(self) -> Inbox:
        inbox = Inbox(read_at=time.monotonic())
        semaphore = asyncio.Semaphore(16)
        for ns, client in self.clients.items():
            query = f"{SA_STATUS} = 'awaiting_approval' AND ExecutionStatus = 'Running'"
            try:
                found = [w async for w in client.list_workflows(query, limit=self.limit)]
            except RPCError:
                query = f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'"
                found = [w async for w in client.list_workflows(query, limit=self.limit)]
            pollers = _Pollers(client)

            async def ask(wid: str, queue: str, c: Client = client, p: _Pollers = pollers) -> Any:
                async with semaphore:
                    try:
                        return await _query(
                            c,
                            c.get_workflow_handle(wid),
                            QUERY_STATUS,
                            RunStatus,
                            QUERY_TIMEOUT,
                            p,
                            queue,
                        )
                    except _Gone:
                        return None
                    except _Unreadable as exc:
                        return exc.reason

            memos = await asyncio.gather(*(inbox_memo(w) for w in found))
            asked = [w for w, memo in zip(found, memos, strict=True) if memo is None]
            for w, memo in zip(found, memos, strict=True):
                if memo is not None:
                    agent = str(w.typed_search_attributes.get(AGENT_KEY) or "")
                    inbox.rows += [
                        Row.of_entry(ns, w.id, agent, w.task_queue, e) for e in memo.calls
                    ]
            answers = await asyncio.gather(*(ask(w.id, w.task_queue) for w in asked))
            for w, answer in zip(asked, answers, strict=True):
                if isinstance(answer, str):
                    inbox.unavailable.append((ns, w.id, answer))
                elif isinstance(answer, RunStatus):
                    inbox.rows += [
                        Row.of_pending(ns, w.id, answer.agent, w.task_queue, p)
                        for p in answer.pending
                    ]
        return inbox

    async def snapshot(self, namespace: str, workflow_id: str) -> RunSnapshot:
        """A run's status and transcript (`_Gone` / `_Unreadable` when it cannot say)."""
        client = self.clients[namespace]
        snap: RunSnapshot = await _query(
            client,
            client.get_workflow_handle(workflow_id),
            QUERY_SNAPSHOT,
            RunSnapshot,
            QUERY_TIMEOUT,
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
        message: str | None = None,
        reason: str | None = None,
        arguments: dict[str, Any] | None = None,
    ) -> Outcome:
        """Approve (with edited `arguments`, maybe) or reject one call, as `person`."""
        d = DecisionInput(
            call_id=call_id,
            approver=person,
            message=message if kind == "reject" else None,
            reason=reason,
            arguments=arguments,
            client=CLIENT,
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

    async def extend(
        self, namespace: str, workflow_id: str, call_id: str, person: str, seconds: float
    ) -> Outcome:
        """Move a call's deadline `seconds` later."""
        payload = ExtendInput(call_id=call_id, seconds=seconds, approver=person)
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
    ) -> Outcome:
        """Answer the question a tool asks."""
        payload = AnswerInput(
            call_id=call_id,
            action=cast(Literal["accept", "decline", "cancel"], action),
            content=content if action == "accept" else None,
            approver=person,
        )
        outcome = await self._send(namespace, workflow_id, UPDATE_ANSWER, payload, InputAnswer)
        if outcome.ok:
            outcome.headline = {
                "accept": f"Answered by {person}; the tool goes on with the answer",
                "decline": f"Declined by {person}; the tool is told no",
                "cancel": f"Dismissed by {person}",
            }[action]
        return outcome

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


def when(at: datetime | None) -> str:
    """A time as a person reads it."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if at else "unknown"


def recorded_words(d: DecisionRecord) -> tuple[str, str]:
    """What the run recorded, as a headline and a detail line."""
    who = d.approver or d.source
    via = f" via {d.client}" if d.client else ""
    signed = " (signed)" if d.verified else ""
    if d.still_needed:
        done = ", ".join(a.approver for a in d.approvals)
        return (
            f"Approved by {who}{via}; it needs {d.still_needed} more approver(s)",
            f"Approved so far by {done}. Another person must approve before it runs.",
        )
    if d.kind == "approve":
        edited = " with edited arguments" if d.arguments is not None else ""
        return f"Approved{edited} by {who}{via}{signed}", f"Recorded at {when(d.decided_at)}."
    what = "Expired" if d.expired else f"Rejected by {who}{via}{signed}"
    told = (
        f'The model is told: "{d.message}"' if d.message else "The model is told it was rejected."
    )
    return what, told
