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
from typing import TYPE_CHECKING, NamedTuple

from temporalio import workflow
from temporalio.common import SearchAttributeKey

with workflow.unsafe.imports_passed_through():
    from hitl.wire import (
        SA_AGENT,
        SA_DEADLINE,
        SA_OUTCOMES,
        SA_PENDING_SINCE,
        SA_PENDING_TOOLS,
        SA_STATUS,
        DecisionRecord,
        PendingApproval,
        RunErrorInfo,
        RunStatus,
        SettledStatus,
    )
    from hitl.workflows.events import preview

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


def publish(
    visible: Visible, agent: str, details: str, search_attributes: bool, outcomes: bool = False
) -> None:
    """Write what operators see (search attributes when registered, the UI's details)."""
    if search_attributes:
        extra = [OUTCOMES_KEY.value_set(list(visible.outcomes))] if outcomes else []
        workflow.upsert_search_attributes(
            [
                *extra,
                STATUS_KEY.value_set(visible.status),
                PENDING_TOOLS_KEY.value_set(list(visible.tools)),
                AGENT_KEY.value_set(agent),
                PENDING_SINCE_KEY.value_set(visible.since)
                if visible.since is not None
                else PENDING_SINCE_KEY.value_unset(),
                DEADLINE_KEY.value_set(visible.deadline)
                if visible.deadline is not None
                else DEADLINE_KEY.value_unset(),
            ]
        )
    workflow.set_current_details(details)


def details(
    *,
    status: str,
    turn: int,
    agent: str,
    current_agent: str,
    error: RunErrorInfo | None,
    pending: Sequence[PendingApproval],
    root_workflow_id: str | None,
) -> str:
    """Markdown for the Temporal UI: what the run waits for and how to decide it."""
    wid = workflow.info().workflow_id
    if status == "cancelled":
        return f"**Cancelled** after {turn} model turns."
    if status == "completed":
        return f"**Completed** after {turn} model turns."
    if status == "failed" and error is not None:
        return f"**Failed** ({error.type}): {error.message}"
    if not pending:
        return f"**Running** (turn {turn}, agent {current_agent or agent})."
    if root_workflow_id is not None:
        return (
            f"**Waiting for approval** ({len(pending)} call(s)). This is a nested run: "
            f"its approvals are decided on the root run `{root_workflow_id}`."
        )
    lines = [f"**Waiting for approval** ({len(pending)} call(s)), agent {agent}", ""]
    for c in pending:
        title = c.request.title if c.request else f"{c.agent_name} wants to run {c.tool_name}"
        where = " -> ".join([*c.path, c.tool_name])
        lines += [
            f"### {title}",
            f"({where})",
            f"Tool `{c.tool_name}`, call `{c.call_id}`, waiting since {c.requested_at}",
            "",
        ]
        if c.kind == "input" and c.input_request is not None:
            fields = c.input_request.requested_schema.get("properties")
            example = {str(k): "..." for k in (fields if isinstance(fields, dict) else {})}
            answer = json.dumps({"call_id": c.call_id, "content": example, "approver": "you"})
            lines += [
                f"**The tool asks:** {c.input_request.message}",
                "",
                'Answer with *Send an Update* (name `answer`; `"action": "decline"` says no):',
                "```",
                f"temporal workflow update execute --workflow-id {wid} --name answer "
                f"--input '{answer}'",
                "```",
                "",
            ]
            continue
        if c.deadline is not None:
            lines += [f"Decide before {c.deadline.isoformat()} (then it expires).", ""]
        if c.required_approvals > 1:
            so_far = ", ".join(f"`{a.approver}`" for a in c.approvals) or "nobody yet"
            lines += [
                f"Needs {c.required_approvals} different approvers; approved so far by {so_far}.",
                "",
            ]
        if c.request is not None:
            lines += [c.request.message, ""]
            if c.request.preview:
                label = c.request.preview_label or "Preview"
                lines += [f"**{label}**", "```", c.request.preview[:4000], "```", ""]
        approve = json.dumps({"call_id": c.call_id, "approver": "you@example.com"})
        reject = json.dumps({"call_id": c.call_id, "message": "why, for the model"})
        lines += [
            "Decide with *Send an Update* (name `approve` or `reject`), or:",
            "```",
            f"temporal workflow update execute --workflow-id {wid} --name approve "
            f"--input '{approve}'",
            f"temporal workflow update execute --workflow-id {wid} --name reject "
            f"--input '{reject}'",
            "```",
            "",
        ]
    return "\n".join(lines)


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


def settled_status(run: AgentRun, decisions: list[DecisionRecord]) -> SettledStatus:
    """What `wait` and `decide` return; kept small, since it is stored with the update."""
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
