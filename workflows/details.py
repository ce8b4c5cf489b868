"""The Temporal UI's current details of a run, as markdown.

What the run waits for and how to decide it (the exact payload to paste); `visibility` writes
them whenever that changes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from hitl.markdown import fence, md_text
    from hitl.wire import PendingApproval, RefusedDecision, RunErrorInfo

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
    lines += _who_lines(c)
    if c.request is not None:
        lines += [md_text(c.request.message), ""]
        if c.request.preview:
            label = c.request.preview_label or "Preview"
            lines += [f"**{md_text(label)}**", *fence(wrapped(c.request.preview[:4000])), ""]
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


def _who_lines(c: PendingApproval) -> list[str]:
    """Who may decide a call, and, for four eyes, who approved it so far."""
    lines = []
    if c.required_approvals > 1:
        so_far = ", ".join(f"`{a.approver}`" for a in c.approvals) or "nobody yet"
        lines += [
            f"Needs {c.required_approvals} different approvers; approved so far by {so_far}.",
            "",
        ]
    if c.approvers:
        names = ", ".join(f"`{a}`" for a in c.approvers[:20])
        more = f" and {len(c.approvers) - 20} more" if len(c.approvers) > 20 else ""
        lines += [f"Who may decide: {names}{more}.", ""]
    return lines


WRAP = 96
"""Preview lines longer than this are folded (the UI's code blocks scroll sideways)."""


def wrapped(text: str, width: int = WRAP) -> str:
    """`text` with each line longer than `width` folded, its continuations marked `↪`.

    A diff's line keeps its `+`/`-`/space mark on every piece, so added and removed text still
    read as such.
    """
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        mark = (
            line[0] if line[:1] in ("+", "-", " ") and not line.startswith(("+++", "---")) else ""
        )
        rest = line[len(mark) :]
        step = width - len(mark) - 2
        out.append(mark + rest[:step] + " ↪")
        rest = rest[step:]
        while rest:
            piece, rest = rest[:step], rest[step:]
            out.append(mark + "↪ " + piece)
    return "\n".join(out)


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
