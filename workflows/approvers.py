"""Refusing a decision by someone who may not make it, and taking a person's edit of arguments.

Pure and deterministic, like the approval book that uses it: the approver directory (groups and
keys, configured on the worker) is pinned into the run when it starts, so a replay reads the
same directory the run first read. Who may decide is `hitl.rules.may_decide`, the one statement
of the rule that `hitl verify` and the console also apply.
"""

from __future__ import annotations

from datetime import datetime

from hitl.rules import may_decide
from hitl.schema import schema_problem
from hitl.wire import (
    AnswerInput,
    ApproverDirectory,
    ArgumentEdit,
    CallRecord,
    DecisionInput,
    DecisionKind,
    DecisionRecord,
    ExtendInput,
    ResolveInput,
    ToolSpec,
    canonical_arguments,
)
from hitl.workflows.inputs import refusal


def check_approver(
    d: DecisionInput | ExtendInput | ResolveInput | AnswerInput,
    tool: str,
    allowed: list[str],
    directory: ApproverDirectory | None,
) -> None:
    """Refuse (`NotAuthorized`) a decision by someone not on the call's approver list."""
    # The list stops mistakes, not forgery, unless decisions are signed: Temporal does not
    # authenticate who sends an update (see docs/security.md).
    if not may_decide(d.approver, allowed, directory):
        who = f"approver '{d.approver}'" if d.approver else "a decision without an approver"
        raise refusal(
            "NotAuthorized",
            f"{who} may not decide {tool} calls (allowed: {', '.join(allowed)})",
        )


def check_edit(kind: DecisionKind, d: DecisionInput, tool: ToolSpec, max_bytes: int) -> str:
    """The edited arguments as the JSON text the tool will get, once they pass every check.

    Refused: an edit with a rejection, on a tool that forbids edits, larger than the run's
    argument limit, or not fitting the tool's schema.
    """
    assert d.arguments is not None
    if kind != "approve":
        raise refusal("InvalidDecision", "only an approval can carry edited arguments")
    if not tool.allow_edits:
        raise refusal(
            "EditsNotAllowed", f"{tool.name} calls cannot be edited; approve or reject them"
        )
    if tool.kind == "agent":
        raise refusal("EditsNotAllowed", f"{tool.name} is an agent tool; its input is not edited")
    text = canonical_arguments(d.arguments)
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise refusal(
            "InvalidDecision", f"the edited arguments are {size} bytes; the limit is {max_bytes}"
        )
    problem = schema_problem(d.arguments, tool.params_json_schema)
    if problem is not None:
        raise refusal("InvalidDecision", f"the edited arguments do not fit {tool.name}: {problem}")
    return text


def apply_edit(call: CallRecord, d: DecisionInput, text: str, now: datetime) -> None:
    """Replace a pending call's arguments with a person's (keeping the model's)."""
    if text == call.arguments:
        return
    if call.original_arguments is None:
        call.original_arguments = call.arguments
    call.edits.append(
        ArgumentEdit(approver=d.approver, edited_at=now, before=call.arguments, after=text)
    )
    call.arguments = text
    call.approvals = []  # approvals given so far were for other arguments


def edit_note(call: CallRecord) -> str:
    """What the model reads before the output of a call a person edited."""
    last = call.edits[-1] if call.edits else None
    who = f"{last.approver}" if last is not None and last.approver else "a person"
    return (
        f"[Before approving, {who} edited the arguments of this call; the tool ran with "
        f"{call.arguments}]\n"
    )


def out_of_reach(call: CallRecord, d: DecisionInput, now: datetime) -> DecisionRecord:
    """The answer to an edit that moved the call out of its editor's reach.

    Approvers named per call by the edited arguments: the edit stands, and the call waits for
    the right people.
    """
    return DecisionRecord(
        call_id=d.call_id,
        tool_name=call.tool_name,
        kind="approve",
        approver=d.approver,
        reason=f"edited; now only {', '.join(call.approvers)} may approve it",
        decided_at=now,
        arguments=call.arguments,
        original_arguments=call.original_arguments,
        still_needed=call.required_approvals,
    )
