"""`hitl show`: one run, as a person reads it (status, transcript, what waits, what was decided).

Every value printed is the run's (anyone's text): each goes through `one_line` or `_short`, and
multi-line text (a request's message and preview) stays indented under its call.
"""

from __future__ import annotations

import argparse
import json

from temporalio.client import Client

from hitl.cli.common import (
    EXIT_OK,
    _ago,
    _handle,
    _path_text,
    _query,
    _short,
    labelled_text,
    one_line,
)
from hitl.items import message_text
from hitl.wire import (
    QUERY_SNAPSHOT,
    ApprovalRequestData,
    CallAction,
    PendingApproval,
    RunSnapshot,
    RunStatus,
)

STATE_WORDS = {
    "done": "(done; its output joins the transcript when the turn's other calls have theirs)",
    "approved": "(approved; about to run)",
    "running": "(running)",
    "rejected": "(rejected)",
    "expired": "(expired)",
}


def _transcript_lines(snap: RunSnapshot) -> list[str]:
    """One line per item; every value on it escaped (it may come from anyone)."""
    lines: list[str] = []
    for given in snap.input_items:
        content = given.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        lines.append(f"  {one_line(given.get('role', 'input'))}: {_short(str(text), 100)}")
    outputs = {
        (i.call_id or i.raw_item.get("call_id")): i.raw_item.get("output")
        for i in snap.new_items
        if i.type in ("tool_call_output_item", "handoff_output_item")
    }
    waiting = {p.call_id for p in snap.status.pending}
    decided = {d.call_id: d for d in snap.status.decisions}
    for item in snap.new_items:
        raw = item.raw_item
        who = one_line(item.agent_name)
        if item.type == "message_output_item":
            lines.append(f"  {who}: {_short(message_text(raw), 100)}")
        elif item.type in ("tool_call_item", "handoff_call_item"):
            call_id = item.call_id or raw.get("call_id")  # the run's id (older runs: the model's)
            out = outputs.get(call_id)
            state = snap.call_states.get(str(call_id))
            if out is not None:
                result = _short(str(out), 60)
            elif call_id in waiting:
                result = "(waiting for a person)"
            elif state in STATE_WORDS:
                result = STATE_WORDS[state]
            elif call_id in decided:
                kind = decided[call_id].kind
                result = f"({kind if kind == 'expired' else kind + 'd'}; no output yet)"
            else:
                result = "(running)"
            name = one_line(raw.get("name"))
            lines.append(f"  {who} -> {name}({_short(raw.get('arguments', ''), 50)}) = {result}")
    return lines


async def cmd_show(client: Client, args: argparse.Namespace) -> int:
    """Show one run: status, transcript summary, pending requests with their preview."""
    handle = await _handle(client, args.run)
    snap: RunSnapshot = await _query(client, handle, QUERY_SNAPSHOT, RunSnapshot, args.timeout)
    if args.json:
        print(snap.model_dump_json(indent=2))
        return EXIT_OK
    st = snap.status
    _print_summary(st)
    print("\nTranscript:")
    print("\n".join(_transcript_lines(snap)) or "  (empty)")
    if st.pending:
        print(f"\nPending approvals ({len(st.pending)}):")
    for n, p in enumerate(st.pending, 1):
        _print_call(st, n, p)
    _print_decided(st)
    return EXIT_OK


def _print_summary(st: RunStatus) -> None:
    """The run's first lines: its id, agent, phase and turn, usage, output or failure."""
    run, agent = one_line(st.workflow_id), one_line(st.agent)
    print(f"Run {run}  agent {agent}  phase {st.phase}  turn {st.turn}")
    print(
        f"Usage: {st.usage.requests} model requests, {st.usage.input_tokens} in / "
        f"{st.usage.output_tokens} out tokens"
    )
    if st.final_output is not None:
        print("\n".join(labelled_text("Final output", st.final_output)))
    if st.error is not None:
        print(f"Failed: {one_line(st.error.type)}: {one_line(st.error.message)}")


def _print_call(st: RunStatus, n: int, p: PendingApproval) -> None:
    """Pending call number `n`: what it is, how it stands, and the commands that decide it."""
    req = p.request
    print(f"\n[{n}] {one_line(req.title if req else p.tool_name)}")
    where = one_line(_path_text(p.path or [p.agent_name], p.tool_name))
    since = p.waiting_since  # a question or an uncertain call: not since its approval request
    waiting = f"waiting since {since} ({_ago(since)})" if since else "waiting"
    print(f"    call {one_line(p.call_id)}, path {where}, {waiting}")
    _print_question(st, p)
    _print_standing(st, p)
    if req is not None:
        _print_request(st, p, req)
    else:
        print(f"    arguments: {one_line(p.arguments)}")


def _print_question(st: RunStatus, p: PendingApproval) -> None:
    """What an uncertain call, or a tool's question, asks, and the command that answers it."""
    if p.kind == "uncertain" and p.uncertain is not None:
        print(f"    UNCERTAIN: its attempt died ({one_line(p.uncertain.error)}); did it happen?")
        run, call = one_line(st.workflow_id), one_line(p.call_id)
        print(f"    hitl resolve {run} {call} happened|retry|give-up")
    if p.kind == "input" and p.input_request is not None:
        ask = p.input_request
        print(f"    ASKS ({one_line(ask.server)}): {one_line(ask.message)}")
        fields = ask.requested_schema.get("properties")
        names = " ".join(
            f"--set {one_line(str(k))}=..." for k in (fields if isinstance(fields, dict) else {})
        )
        run, call = one_line(st.workflow_id), one_line(p.call_id)
        print(f"    hitl answer {run} {call} {names or '--set NAME=VALUE'} | --decline")


def _print_standing(st: RunStatus, p: PendingApproval) -> None:
    """How a call stands: edits, reminders, its deadline, approvals so far, its nested run."""
    if p.original_arguments is not None:
        print(f"    arguments edited from {one_line(p.original_arguments)}")
    if p.escalated_at is not None:
        print(f"    escalated at {p.escalated_at.isoformat()}: {', '.join(p.approvers)}")
    elif p.reminded_at is not None:
        print(f"    reminded at {p.reminded_at.isoformat()}")
    if p.deadline is not None:
        print(f"    decide before {p.deadline.isoformat()} (then it expires)")
    for e in p.extensions:
        who = one_line(e.approver or "someone")
        print(f"    deadline moved from {e.previous.isoformat()} by {who}")
    if p.required_approvals > 1:
        so_far = ", ".join(one_line(a.approver) for a in p.approvals) or "nobody yet"
        print(f"    needs {p.required_approvals} different approvers; approved so far by {so_far}")
    if p.workflow_id and p.workflow_id != st.workflow_id:
        print(f"    in nested run {one_line(p.workflow_id)} (decide it here, on the root run)")


def _print_request(st: RunStatus, p: PendingApproval, req: ApprovalRequestData) -> None:
    """The call's request, indented: message, preview, note, and how to approve or reject."""
    for line in req.message.splitlines():
        print(f"    {line}")
    if req.preview:
        print(f"    --- {one_line(req.preview_label or 'Preview')} ---")
        for line in req.preview.splitlines():
            print(f"    {line}")
        print("    ---")
    if req.note:
        print(f"    note: {one_line(req.note)}")
    if p.kind != "approval":
        return  # approved already: it is settled by `hitl resolve` or `hitl answer` (above)
    run_and_call = f"{one_line(st.workflow_id)} {one_line(p.call_id)}"
    print(f"    [{one_line(req.primary_label)}] hitl approve {run_and_call}")
    reject = f'hitl reject {run_and_call} --message "..."'
    print(f"    [{one_line(req.secondary_label)}] {reject}")


def _action_text(a: CallAction) -> str:
    """One resolve, extend or answer, as `hitl show` lists it (every value escaped)."""
    who = one_line(a.approver or "someone unnamed")
    signed = ", signed" if a.verified else ""
    if a.kind == "extend":
        moved = a.deadline.isoformat() if a.deadline else "?"
        what = f"deadline moved to {moved} by {who}{signed}"
    elif a.kind == "resolve":
        what = f"resolved: {one_line(a.outcome)} by {who}{signed}"
    else:
        what = f"answered: {one_line(a.outcome)} by {who}{signed}"
    if a.reason:
        what += f" ({one_line(a.reason)})"
    return f"  {a.at.isoformat()} {one_line(a.call_id)} {one_line(a.tool_name)}: {what}"


def _print_decided(st: RunStatus) -> None:
    """The run's decisions, its actions on calls, and the attempts it refused."""
    if st.decisions:
        print("\nDecisions:")
        for d in st.decisions:
            who = one_line(d.approver or d.source.replace("_", " "))
            extra = f": {one_line(d.message)}" if d.message else ""
            others = [one_line(a.approver) for a in d.approvals if a.approver != d.approver]
            if others:
                extra += f" (approved before by {', '.join(others)})"
            call = f"{one_line(d.call_id)} {one_line(d.tool_name)}"
            if d.kind == "expired":  # nobody decided it: say when, not by whom
                print(f"  {call}: expired at {d.decided_at.isoformat()} (deadline){extra}")
                continue
            print(f"  {call}: {d.kind} by {who} ({d.source}){extra}")
    if st.actions:
        print("\nActions (resolve, extend, answer):")
        for a in st.actions:
            print(_action_text(a))
    if st.refused:
        print("\nRefused:")
        for r in st.refused:
            call = f" (call {one_line(r.call_id)})" if r.call_id else ""
            if r.approver:
                call += f" from {one_line(r.approver)}"
            print(
                f"  {r.received_at} {r.via} {one_line(r.name)}{call}: "
                f"{one_line(r.error_type)}: {one_line(r.message)}"
            )
