"""What operators see of a run without asking it: search attributes and the UI's details.

`HitlStatus`, `HitlPendingTools`, `HitlAgent`, `HitlPendingSince` and `HitlDeadline` make
`temporal workflow list --query "HitlStatus='awaiting_approval'"` an approval inbox; the
current details (markdown in the Temporal UI) say what the run waits for and how to decide it.
Both change only when what a person would see changes, so a run that never pauses costs one
upsert (at the end). Search attributes never carry arguments or personal data.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate

with workflow.unsafe.imports_passed_through():
    from hitl.limits import TRANSCRIPT_INLINE_BYTES
    from hitl.markdown import fence, md_text
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
        DecisionRecord,
        InboxEntry,
        InboxMemo,
        PendingApproval,
        RefusedDecision,
        RunErrorInfo,
        RunSnapshot,
        RunStatus,
        SettledStatus,
    )
    from hitl.workflows.events import preview
    from hitl.workflows.inputs import encoded_size, fits

if TYPE_CHECKING:
    from hitl.workflows.agent_run import AgentRun
    from hitl.workflows.book import ApprovalBook

SETTLED_PENDING_KEPT = 50
SETTLED_OUTPUT_BYTES = 16 * 1024
"""A final output larger than this is left out of update results (read the run's result)."""

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
        seen.add("expired" if d.expired else "approved" if d.kind == "approve" else "rejected")
        if d.arguments is not None:
            seen.add("edited")
    if any(c.uncertain is not None for c in book.calls.values()):
        seen.add("uncertain")
    return tuple(sorted(seen))


STARTED = Visible("running")
"""What a run shows before it first publishes (nothing published yet)."""


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
    (`None`: all of them, as a run's first publish must, over whatever it started with).
    """
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
        (SA_AGENT, before is None, AGENT_KEY.value_set(agent)),
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


REFUSALS_SHOWN = 5


def when(at: datetime | None) -> str:
    """A time as a person reads it: `2026-11-25 11:45:03 UTC`."""
    return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at is not None else "an unknown time"


def details(
    *,
    status: str,
    turn: int,
    agent: str,
    current_agent: str,
    error: RunErrorInfo | None,
    pending: Sequence[PendingApproval],
    root_workflow_id: str | None,
    refused: Sequence[RefusedDecision] = (),
) -> str:
    """Markdown for the Temporal UI: what the run waits for and how to decide it.

    Everything from the model, tools or callers is escaped (shown literally); each call gets a
    short pretty-printed payload per update, which fits the UI's panel, and the `hitl` line.
    """
    wid = workflow.info().workflow_id
    if status == "cancelled":
        return f"**Cancelled** after {turn} model turns."
    if status == "completed":
        return f"**Completed** after {turn} model turns."
    if status == "failed" and error is not None:
        return f"**Failed** ({md_text(error.type)}): {md_text(error.message)}"
    lines = _refusal_lines(refused)
    if not pending:
        return "\n".join(
            [f"**Running** (turn {turn}, agent {md_text(current_agent or agent)}).", "", *lines]
        )
    if root_workflow_id is not None:
        return (
            f"**Waiting for approval** ({len(pending)} call(s)). This is a nested run: "
            f"its approvals are decided on the root run `{root_workflow_id}`."
        )
    head = [f"**Waiting for approval**: {len(pending)} call(s), agent {md_text(agent)}", ""]
    for c in pending:
        head += _call_lines(wid, c)
    return "\n".join([*head, *lines])


INBOX_PATCH = "hitl-inbox-memo"
"""The patch that marked, for a while, runs keeping their pending calls in the memo
(`INBOX_MEMO`); runs now learn it from their recorded resolution (`ResolvedRun.inbox_memo`),
and the marker is only read back when such a run replays."""


def inbox_key(run: AgentRun, visible: Visible) -> list[str] | None:
    """What the inbox memo should show of a paused run; `None`: leave the memo as it is.

    Its calls and their approvals so far, in the form `CarriedState.inbox_shown` keeps.
    """
    if not run.s.inbox_memo or visible.status != "awaiting_approval":
        return None
    return [f"{p.call_id}\t{len(p.approvals)}" for p in run.book.pending()]


def changed(run: AgentRun) -> bool:
    """Whether what operators see of `run` is out of date."""
    visible = run._visible()
    return (
        visible != run._published
        or len(run.s.refused) != run._shown
        or inbox_key(run, visible) not in (None, run.s.inbox_shown)
        or run._clear_memo
    )


def publish_run(run: AgentRun) -> None:
    """Write what operators see of `run`, where it changed.

    Search attributes and the UI's details when its visible state changed; only the details
    (no history event) for a refused signal; the inbox memo when the calls a paused run waits
    on changed. The memo is left as it is when the run goes on: readers use it only while
    `HitlStatus` says the run waits (both are written in the same workflow task).
    """
    visible, refusals = run._visible(), len(run.s.refused)
    key = inbox_key(run, visible)
    if key is not None and key != run.s.inbox_shown:
        run.s.inbox_shown = key
        run._clear_memo = False
        publish_inbox(run.book.pending(run.path(), workflow.info().workflow_id))
    elif run._clear_memo:
        run._clear_memo = False
        workflow.upsert_memo({INBOX_MEMO: None})  # someone else's words: gone
    if visible == run._published:
        if refusals != run._shown:  # a refused signal: the details say so (no event)
            run._shown = refusals
            workflow.set_current_details(details_of(run, visible))
        return
    before = run._published if run._published is not STARTED else None
    run._published, run._shown = visible, refusals
    run.events.note_pause()
    publish(
        visible,
        run.inp.agent,
        details_of(run, visible),
        kept_attributes(run.s),
        before,
    )


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


def carried_memo(run: AgentRun) -> dict[str, Any] | None:
    """The memo a continued run starts with: what this one lists (it is not written again)."""
    if not run.s.inbox_memo or not run.s.inbox_shown:
        return None
    return {INBOX_MEMO: inbox_memo(run.book.pending(run.path(), workflow.info().workflow_id))}


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
        requested_at=p.requested_at,
        deadline=p.deadline,
        kind=p.kind,
        required_approvals=p.required_approvals,
        approved_by=[a.approver or "" for a in p.approvals],
        approvers=p.approvers[:20],
        workflow_id=p.workflow_id,
    )


def details_of(run: AgentRun, visible: Visible) -> str:
    """The current details of `run` as it is now."""
    link = run.inp.parent
    return details(
        status=visible.status,
        turn=run.s.turn,
        agent=run.inp.agent,
        current_agent=run.s.current_agent,
        error=run.error,
        pending=run.book.pending(run.path()),
        root_workflow_id=link.root_workflow_id if link else None,
        refused=run.s.refused,
    )


def _call_lines(wid: str, c: PendingApproval) -> list[str]:
    title = c.request.title if c.request else f"{c.agent_name} wants to run {c.tool_name}"
    where = " → ".join([*c.path, c.tool_name])
    lines = [
        f"### {md_text(title)}",
        f"Tool `{c.tool_name}` ({md_text(where)}), waiting since {when(c.requested_at)}  ",
        f"Call id `{c.call_id}`",
        "",
    ]
    if c.kind == "input" and c.input_request is not None:
        fields = c.input_request.requested_schema.get("properties")
        example = {str(k): "..." for k in (fields if isinstance(fields, dict) else {})}
        answer = {"call_id": c.call_id, "content": example, "approver": "you"}
        return [
            *lines,
            f"**The tool asks:** {md_text(c.input_request.message)}",
            "",
            'To answer, *Send an Update* named `answer` with (`"action": "decline"` says no):',
            *fence(json.dumps(answer, indent=2), "json"),
            f"Or: `hitl answer {wid} {c.call_id} --set NAME=VALUE`",
            "",
        ]
    if c.kind == "uncertain" and c.uncertain is not None:
        settle = {"call_id": c.call_id, "outcome": "happened", "output": "what it did"}
        return [
            *lines,
            f"**Uncertain:** its attempt died ({md_text(c.uncertain.error)}). Did it happen?",
            "",
            "Settle it with *Send an Update* named `resolve` (`happened`, `retry`, `give_up`):",
            *fence(json.dumps(settle, indent=2), "json"),
            f"Or: `hitl resolve {wid} {c.call_id} happened|retry|give-up`",
            "",
        ]
    if c.deadline is not None:
        lines += [f"Decide before {when(c.deadline)} (then it expires).", ""]
    if c.required_approvals > 1:
        so_far = ", ".join(f"`{a.approver}`" for a in c.approvals) or "nobody yet"
        lines += [
            f"Needs {c.required_approvals} different approvers; approved so far by {so_far}.",
            "",
        ]
    if c.request is not None:
        lines += [md_text(c.request.message), ""]
        if c.request.preview:
            label = c.request.preview_label or "Preview"
            lines += [f"**{md_text(label)}**", *fence(c.request.preview[:4000]), ""]
    approve = json.dumps({"call_id": c.call_id, "approver": "you"}, indent=2)
    reject = json.dumps({"call_id": c.call_id, "message": "why, for the model"}, indent=2)
    return [
        *lines,
        "To approve, *Send an Update* named `approve` with:",
        *fence(approve, "json"),
        "To reject, named `reject`:",
        *fence(reject, "json"),
        f"Or: `hitl approve {wid} {c.call_id}`",
        "",
    ]


def _refusal_lines(refused: Sequence[RefusedDecision]) -> list[str]:
    """The latest refused signals (a signal cannot tell its sender it was refused)."""
    signals = [r for r in refused if r.via == "signal"][-REFUSALS_SHOWN:]
    if not signals:
        return []
    lines = ["**Refused signals** (the latest; an update would have said so at once):", ""]
    for r in signals:
        call = f" for `{r.call_id}`" if r.call_id else ""
        lines.append(
            f"- {when(r.received_at)}: `{r.name}`{call}: {md_text(r.error_type)}: "
            f"{md_text(r.message)}"
        )
    return [*lines, ""]


# ----------------------------------------------------------------------------- status


def status(run: AgentRun, kind: type[RunStatus] = RunStatus, *, full: bool = True) -> RunStatus:
    """The run as the `status` query shows it (`full=False`: without the long lists)."""
    info = workflow.info()
    s = run.s
    current = s.graph.agents.get(s.current_agent) if s.graph else None
    output = run.output
    return kind(
        workflow_id=info.workflow_id,
        run_id=info.run_id,
        phase=run.phase(),
        agent=run.inp.agent,
        current_agent=current.id if current else None,
        current_agent_name=current.name if current else None,
        turn=s.turn,
        pending=run.book.pending(run.path(), info.workflow_id) if full else [],
        decisions=run.book.all_decisions() if full else [],
        refused=s.refused if full else [],
        usage=s.usage,
        items=len(s.input_items) + len(s.new_items),
        final_output=output.final_output if output is not None and full else None,
        error=run.error,
        continued_as_new=run.continuing,
    )


def snapshot(run: AgentRun) -> RunSnapshot:
    """The `snapshot` query's answer: the status, the items so far, each call's state."""
    calls = {c.call_id: c.state for c in run.book.calls.values()}
    s, st = run.s, status(run)
    schemas = {}
    for p in st.pending:
        agent = s.graph.agents.get(p.agent_id) if s.graph else None
        tool = agent.tool(p.tool_name) if agent else None
        if tool is not None and tool.kind != "agent":
            schemas[p.call_id] = tool.params_json_schema
    return RunSnapshot(
        status=st,
        input_items=s.input_items,
        new_items=s.new_items,
        call_states=calls,
        schemas=schemas,
    )


def settled_status(
    run: AgentRun, decisions: list[DecisionRecord], *, items: bool = False
) -> SettledStatus:
    """What `wait` and `decide` return; kept small, since it is stored with the update.

    `items` (a `wait` from `Runner.run`): a paused run whose whole status and transcript are
    small returns them, so the caller needs no `snapshot` query.
    """
    if (
        items
        and run.phase() == "awaiting_approval"
        and fits([*run.s.input_items, *run.s.new_items], TRANSCRIPT_INLINE_BYTES)
    ):
        whole = status(run, SettledStatus)
        assert isinstance(whole, SettledStatus)
        whole.refused, whole.final_output = [], None
        whole.input_items, whole.new_items = run.s.input_items, run.s.new_items
        if encoded_size(whole) <= TRANSCRIPT_INLINE_BYTES:
            return whole
    result = status(run, SettledStatus, full=False)
    assert isinstance(result, SettledStatus)
    result.decisions = decisions
    result.pending = [_brief(p) for p in run.book.pending(run.path())[:SETTLED_PENDING_KEPT]]
    final = run.output.final_output if run.output is not None else None
    if final is not None and len(json.dumps(final, default=str)) <= SETTLED_OUTPUT_BYTES:
        result.final_output = final
    return result


def _brief(p: PendingApproval) -> PendingApproval:
    """A pending call with its long texts cut (for results stored in history)."""
    request = p.request
    if request is not None:
        request = request.model_copy(
            update={
                "message": preview(request.message, 1000),
                "preview": preview(request.preview, 1000) if request.preview else None,
            }
        )
    return p.model_copy(update={"arguments": preview(p.arguments, 1000), "request": request})
