"""What operators see of a run without asking it: search attributes and the UI's details.

`HitlStatus`, `HitlPendingTools`, `HitlAgent`, `HitlPendingSince` and `HitlDeadline` make
`temporal workflow list --query "HitlStatus='awaiting_approval'"` an approval inbox; the
current details (markdown in the Temporal UI) say what the run waits for and how to decide it.
Both change only when what a person would see changes, so a run that never pauses costs one
upsert (at the end). Search attributes never carry arguments or personal data.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate

with workflow.unsafe.imports_passed_through():
    from hitl.wire import (
        CORE_SEARCH_ATTRIBUTES,
        INBOX_CALLS,
        INBOX_MEMO,
        SA_AGENT,
        SA_DEADLINE,
        SA_OUTCOMES,
        SA_PENDING_SINCE,
        SA_PENDING_TOOLS,
        SA_STATUS,
        CarriedState,
        InboxEntry,
        InboxMemo,
        PendingApproval,
        Phase,
        RunErrorInfo,
        RunInput,
    )
    from hitl.workflows.book import ApprovalBook
    from hitl.workflows.details import details
    from hitl.workflows.events import preview


STATUS_KEY = SearchAttributeKey.for_keyword(SA_STATUS)
PENDING_TOOLS_KEY = SearchAttributeKey.for_keyword_list(SA_PENDING_TOOLS)
AGENT_KEY = SearchAttributeKey.for_keyword(SA_AGENT)
PENDING_SINCE_KEY = SearchAttributeKey.for_datetime(SA_PENDING_SINCE)
DEADLINE_KEY = SearchAttributeKey.for_datetime(SA_DEADLINE)
OUTCOMES_KEY = SearchAttributeKey.for_keyword_list(SA_OUTCOMES)
OUR_KEYS = (STATUS_KEY, PENDING_TOOLS_KEY, AGENT_KEY, PENDING_SINCE_KEY, DEADLINE_KEY)


class Visible(NamedTuple):
    """What operators see of a run."""

    status: str
    tools: tuple[str, ...] = ()
    since: datetime | None = None
    deadline: datetime | None = None
    outcomes: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, status: str, pending: Sequence[PendingApproval], outcomes: tuple[str, ...] = ()
    ) -> Visible:
        """The visible state for a run in `status` with these pending calls."""
        return cls(
            status,
            tuple(sorted({p.tool_name for p in pending})),
            min((p.requested_at for p in pending if p.requested_at), default=None),
            min((p.deadline for p in pending if p.deadline), default=None),
            outcomes,
        )


def outcomes(book: ApprovalBook) -> tuple[str, ...]:
    """What the run's calls came to so far (`HitlOutcomes`), sorted."""
    seen = set()
    for d in book.all_decisions():
        seen.add({"approve": "approved", "reject": "rejected", "expired": "expired"}[d.kind])
        if d.arguments is not None:
            seen.add("edited")
    if any(c.uncertain is not None for c in book.calls.values()):
        seen.add("uncertain")
    return tuple(sorted(seen))


STARTED = Visible("running")
"""What a run shows before it first publishes (nothing published yet)."""

UNSET = Visible("")
"""What a fresh run has of our search attributes: none (a run started with some set is
`spoofed` and publishes all of them; a continued run publishes all of them once)."""


def spoofed() -> bool:
    """Whether the run was started with our search attributes already set (by its starter).

    Anyone may start a run with `--search-attribute HitlStatus=...`; a fresh run publishes its
    own values at once instead of keeping someone else's claim in the inbox.
    """
    info = workflow.info()
    if info.continued_run_id is not None:
        return False
    sa = info.typed_search_attributes
    return any(sa.get(key) is not None for key in (*OUR_KEYS, OUTCOMES_KEY))


def memo_spoofed() -> bool:
    """Whether a fresh run was started with our inbox memo already set (by its starter).

    Readers list a memo only when it names the run's first run id (`InboxMemo.run`), which a
    starter cannot know; the run still clears such a memo at once.
    """
    info = workflow.info()
    return info.continued_run_id is None and INBOX_MEMO in info.raw_memo


def kept_attributes(s: CarriedState) -> frozenset[str]:
    """The search attributes a run keeps current: those its namespace had when it started.

    A namespace registered by an earlier release lacks the attributes added since; a run keeps
    the ones there are (recorded with its resolution). Runs recorded before that kept all the
    core ones (and `HitlOutcomes` when registered), or none.
    """
    if s.attributes is not None:
        return frozenset(s.attributes)
    if not s.search_attributes:
        return frozenset()
    return frozenset([*CORE_SEARCH_ATTRIBUTES, *([SA_OUTCOMES] if s.outcomes_attribute else [])])


def publish(
    visible: Visible,
    agent: str,
    details: str,
    keys: frozenset[str],
    before: Visible | None = None,
) -> None:
    """Write what operators see (the search attributes in `keys`, the UI's details).

    `before`: what this run published last; only the attributes that changed since are sent
    (`None`: all of them, as a run's first publish must over whatever it started with; `UNSET`:
    a fresh run's first publish, which sends only what is set: an empty list or no time is
    what the attribute already holds).
    """
    first = before is None or before is UNSET
    updates: list[tuple[str, bool, SearchAttributeUpdate[Any]]] = [
        (
            SA_OUTCOMES,
            before is None or visible.outcomes != before.outcomes,
            OUTCOMES_KEY.value_set(list(visible.outcomes)),
        ),
        (
            SA_STATUS,
            before is None or visible.status != before.status,
            STATUS_KEY.value_set(visible.status),
        ),
        (
            SA_PENDING_TOOLS,
            before is None or visible.tools != before.tools,
            PENDING_TOOLS_KEY.value_set(list(visible.tools)),
        ),
        (SA_AGENT, first, AGENT_KEY.value_set(agent)),
        (
            SA_PENDING_SINCE,
            before is None or visible.since != before.since,
            PENDING_SINCE_KEY.value_set(visible.since)
            if visible.since is not None
            else PENDING_SINCE_KEY.value_unset(),
        ),
        (
            SA_DEADLINE,
            before is None or visible.deadline != before.deadline,
            DEADLINE_KEY.value_set(visible.deadline)
            if visible.deadline is not None
            else DEADLINE_KEY.value_unset(),
        ),
    ]
    changed = [update for key, wanted, update in updates if wanted and key in keys]
    if changed:
        workflow.upsert_search_attributes(changed)
    workflow.set_current_details(details)


INBOX_PATCH = "hitl-inbox-memo"
"""The patch that marked, for a while, runs keeping their pending calls in the memo
(`INBOX_MEMO`); runs now learn it from their recorded resolution (`ResolvedRun.inbox_memo`),
and the marker is only read back when such a run replays."""


def publish_inbox(pending: Sequence[PendingApproval]) -> None:
    """The pending calls, in brief, in the run's memo (read without a query or a worker)."""
    workflow.upsert_memo({INBOX_MEMO: inbox_memo(pending)})


def inbox_memo(pending: Sequence[PendingApproval]) -> InboxMemo:
    """The memo value for these pending calls."""
    return InboxMemo(
        calls=[inbox_entry(p) for p in pending[:INBOX_CALLS]],
        total=len(pending),
        run=workflow.info().first_execution_run_id,
    )


def inbox_entry(p: PendingApproval) -> InboxEntry:
    """One call as the inbox memo keeps it (no arguments, texts cut)."""
    title = p.request.title if p.request else f"{p.agent_name} wants to run {p.tool_name}"
    if p.kind == "input" and p.input_request is not None:
        title = p.input_request.message
    return InboxEntry(
        call_id=p.call_id,
        tool_name=p.tool_name,
        agent_id=p.agent_id,
        agent_name=p.agent_name,
        title=preview(title, 200),
        path=p.path,
        requested_at=p.waiting_since,
        deadline=p.deadline,
        kind=p.kind,
        required_approvals=p.required_approvals,
        approved_by=[a.approver or "" for a in p.approvals],
        approvers=p.approvers[:20],
        workflow_id=p.workflow_id,
    )


class Shown(Protocol):
    """What publishing reads of a run."""

    inp: RunInput
    state: CarriedState
    book: ApprovalBook
    error: RunErrorInfo | None

    def phase(self) -> Phase:
        """Where the run is."""
        ...

    def path(self) -> list[str]:
        """Agents and agent tools from the root down to this run."""
        ...

    def note_pause(self) -> None:
        """Tell event subscribers when the run starts or stops waiting for people."""
        ...


class Publisher:
    """What operators last saw of one run, written again whenever it changes.

    Search attributes and the UI's details when the run's visible state changed; only the
    details (no history event) for a refused signal; the inbox memo when the calls a paused run
    waits on changed. The memo is left as it is when the run goes on: readers use it only while
    `HitlStatus` says the run waits (both are written in the same workflow task).
    """

    def __init__(self, run: Shown) -> None:
        self.run = run
        # A fresh run someone started with our search attributes (or memo) set publishes its
        # own at once.
        self.published: Visible | None = None if spoofed() else STARTED
        self.shown = 0
        """Refusals the UI's current details list."""
        self.clear_memo = memo_spoofed()
        self.cancelled = False
        """Cancelled while parked or running: the inbox must not keep listing it."""

    def visible(self) -> Visible:
        """What operators should see of the run now."""
        run = self.run
        if self.cancelled:
            return Visible("cancelled")
        pending = run.book.pending()
        phase = run.phase()
        kept = SA_OUTCOMES in kept_attributes(run.state)
        return Visible.of(
            "awaiting_approval" if pending and phase == "running" else phase,
            pending,
            outcomes(run.book) if kept else (),
        )

    def inbox_key(self, visible: Visible) -> list[str] | None:
        """What the inbox memo should show of a paused run; `None`: leave the memo as it is.

        Its calls and their approvals so far, in the form `CarriedState.inbox_shown` keeps; with
        `inbox_rounds`, also what each waits for (kind and round): an approved call that turns
        uncertain, or asks a question, has the key it had while it waited for approval.
        """
        run = self.run
        if not run.state.inbox_memo or visible.status != "awaiting_approval":
            return None
        if run.state.inbox_rounds:
            return [
                f"{p.call_id}\t{len(p.approvals)}\t{p.kind}\t{p.round}" for p in run.book.pending()
            ]
        return [f"{p.call_id}\t{len(p.approvals)}" for p in run.book.pending()]

    def changed(self) -> bool:
        """Whether what operators see of the run is out of date."""
        visible = self.visible()
        return (
            visible != self.published
            or len(self.run.state.refused) != self.shown
            or self.inbox_key(visible) not in (None, self.run.state.inbox_shown)
            or self.clear_memo
        )

    def publish(self) -> None:
        """Write what operators see of the run, where it changed."""
        run = self.run
        visible, refusals = self.visible(), len(run.state.refused)
        key = self.inbox_key(visible)
        if key is not None and key != run.state.inbox_shown:
            run.state.inbox_shown = key
            self.clear_memo = False
            # Own calls name no run (`InboxEntry.workflow_id`): the memo is the run's own.
            publish_inbox(run.book.pending(run.path()))
        elif self.clear_memo:
            self.clear_memo = False
            workflow.upsert_memo({INBOX_MEMO: None})  # someone else's words: gone
        if visible == self.published:
            if refusals != self.shown:  # a refused signal: the details say so (no event)
                self.shown = refusals
                workflow.set_current_details(self.details(visible))
            return
        before = self.published
        if before is STARTED:
            before = UNSET if workflow.info().continued_run_id is None else None
        self.published, self.shown = visible, refusals
        run.note_pause()
        publish(visible, run.inp.agent, self.details(visible), kept_attributes(run.state), before)

    def details(self, visible: Visible) -> str:
        """The run's current details as they are now."""
        run = self.run
        link = run.inp.parent
        return details(
            status=visible.status,
            turn=run.state.turn,
            agent=run.inp.agent,
            current_agent=run.state.current_agent,
            error=run.error,
            pending=run.book.pending(run.path()),
            root_workflow_id=link.root_workflow_id if link else None,
            refused=run.state.refused,
        )

    def carried_memo(self) -> dict[str, Any] | None:
        """The memo a continued run starts with: what this one lists (not written again)."""
        run = self.run
        if not run.state.inbox_memo or not run.state.inbox_shown:
            return None
        return {INBOX_MEMO: inbox_memo(run.book.pending(run.path()))}
