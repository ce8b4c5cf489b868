"""One pending call as the console's inbox lists it (`Row`), from a memo or a `status` answer."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime

from hitl.wire import DecisionRecord, InboxEntry, InboxMemo, PendingApproval


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
    confirmed: bool = True
    """Read from the run itself (its status, or a memo naming its own run id). An unconfirmed
    row stands for a whole run and carries nothing its memo claims: no call, title or tool."""
    problem: str = ""
    """Why an unconfirmed run could not be read."""
    viewers_only: bool = False
    """Nothing says who may decide its calls: only viewers see the row."""
    approved_by: list[str] = field(default_factory=list)
    """Who has approved it so far (four eyes): they wait for others, not act."""
    no_worker: bool = False
    """No worker polls its task queue now: it can be neither shown whole nor decided."""

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
            f"{p.arguments}\n{message}", approved_by=[a.approver for a in p.approvals],
        )  # fmt: skip

    @classmethod
    def of_entry(cls, ns: str, w: str, agent: str, queue: str, e: InboxEntry) -> Row:
        """A row from a paused run's memo (no query, no worker)."""
        return cls(
            ns, w, agent, queue, e.call_id, e.tool_name, e.title, e.kind, e.requested_at,
            e.deadline, e.required_approvals, len(e.approved_by), e.approvers,
            approved_by=list(e.approved_by),
        )  # fmt: skip

    @classmethod
    def unconfirmed(
        cls, ns: str, w: str, agent: str, queue: str, why: str, memo: InboxMemo | None
    ) -> Row:
        """A paused run that could not be confirmed: its id, and why (nothing it claims).

        Who may see it follows the approver lists its memo gives (anyone, if one of its calls
        names nobody); a run without a memo is shown to viewers only.
        """
        lists = [e.approvers for e in memo.calls] if memo is not None else []
        row = cls(ns, w, agent, queue, "", "", "", "unconfirmed", confirmed=False, problem=why)
        row.viewers_only = not lists
        if lists and all(lists):
            row.approvers = sorted({a for names in lists for a in names})
        return row

    @property
    def since(self) -> datetime:
        """When it started waiting (for sorting; unknown sorts first)."""
        return self.requested_at or datetime.min.replace(tzinfo=UTC)

    @property
    def groups(self) -> list[str]:
        """The approver groups it names (`group:finance` -> `finance`)."""
        return [a[6:] for a in self.approvers if a.startswith("group:")]

    @property
    def key(self) -> str:
        """A short id for the row's elements on the page (the same on every reading)."""
        ids = "\n".join([self.namespace, self.workflow_id, self.call_id])
        return hashlib.sha256(ids.encode()).hexdigest()[:16]

    def haystack(self) -> str:
        """What the search box searches: run, call, tool, agent, title (and arguments)."""
        parts = [self.workflow_id, self.call_id, self.tool_name, self.agent, self.title, self.text]
        return "\n".join(parts).lower()


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
