"""The checks a decision passes before it counts: pure functions the approval book calls.

Bounds, the arguments a decision names as seen, a call's round, the deadline, one approval of
several (four eyes), and which approvals count for the arguments a call has now.
"""

from __future__ import annotations

from datetime import datetime

from hitl.limits import (
    MAX_APPROVER_CHARS,
    MAX_CALL_ID_CHARS,
    MAX_EXTEND_SECONDS,
    MAX_TEXT_CHARS,
    text_problem,
)
from hitl.wire import (
    AnswerInput,
    Approval,
    DecisionInput,
    DecisionRecord,
    ExtendInput,
    ResolveInput,
    expiry_text,
    text_digest,
)
from hitl.workflows.inputs import refusal


def decision_problem(d: DecisionInput) -> str | None:
    """Why a decision's fields are out of bounds (`hitl.limits`), or `None`."""
    if not d.call_id:
        return "call_id must not be empty"
    return (
        text_problem("call_id", d.call_id, MAX_CALL_ID_CHARS)
        or text_problem("message", d.message, MAX_TEXT_CHARS)
        or text_problem("reason", d.reason, MAX_TEXT_CHARS)
        or text_problem("approver", d.approver, MAX_APPROVER_CHARS)
    )


def extend_problem(d: ExtendInput) -> str | None:
    """Why an extension's fields are out of bounds (`hitl.limits`), or `None`."""
    problem = (
        text_problem("call_id", d.call_id, MAX_CALL_ID_CHARS)
        or text_problem("reason", d.reason, MAX_TEXT_CHARS)
        or text_problem("approver", d.approver, MAX_APPROVER_CHARS)
    )
    if problem is None and not 0 < d.seconds <= MAX_EXTEND_SECONDS:
        problem = f"seconds must be above 0 and at most {MAX_EXTEND_SECONDS:g}"
    return problem


def check_seen(
    d: DecisionInput | ExtendInput | AnswerInput | ResolveInput, arguments: str, edits: int = 0
) -> None:
    """Refuse (`ArgumentsChanged`) a decision made on other arguments than the call has now.

    `seen_sha256` is optional (the plain `temporal` CLI sends only a call id); when given, or
    signed, it must name the arguments as they are: an approval counts only for what was seen.
    """
    seen = d.seen_sha256
    if seen is not None and seen != text_digest(arguments):
        edited = f" (edited {edits} time(s) since the model made it)" if edits else ""
        raise refusal(
            "ArgumentsChanged",
            f"call '{d.call_id}': its arguments are not the ones you saw{edited}; read it "
            "again (hitl show) and decide on what it holds now",
        )


def check_round(call_id: str, given: int | None, current: int) -> None:
    """Refuse (`Stale`) an answer, resolution or extension made for an earlier round of a call.

    Each of them moves the call to its next round, so a copy of one (say, from history) is
    refused instead of applying again.
    """
    if given is not None and given != current:
        raise refusal(
            "Stale",
            f"call '{call_id}' moved on since you saw it (round {given}, now {current}); read "
            "it again and decide",
        )


def check_deadline(
    d: DecisionInput | ExtendInput, deadline: datetime | None, now: datetime | None
) -> None:
    """Refuse (`DeadlinePassed`) a decision that reaches the run after the call's deadline."""
    # Same-task rule: a decision that reaches the run after the deadline loses to it.
    if deadline is not None and now is not None and now > deadline:
        raise refusal("DeadlinePassed", expiry_text(d.call_id, deadline))


def one_of_several(
    d: DecisionInput, tool: str, required: int, approvals: list[Approval]
) -> DecisionRecord | None:
    """Check one approval of a call that needs `required` distinct approvers.

    Returns the answer already given when `d` repeats an approval (a retry); raises when the
    approval cannot count: it names no approver, asks for `always`, or comes from someone who
    already approved the call differently.
    """
    if not d.approver:
        raise refusal(
            "InvalidDecision",
            f"call '{d.call_id}' needs {required} different approvers: name yours (approver)",
        )
    if d.always:
        raise refusal(
            "InvalidDecision",
            f"call '{d.call_id}' needs {required} approvers, so no standing rule can approve "
            "it (always)",
        )
    given = next((a for a in approvals if a.approver == d.approver), None)
    if given is None:
        return None
    if given.answers(d):
        return DecisionRecord.partial(d.call_id, tool, approvals, required)
    raise refusal(
        "AlreadyDecided",
        f"{d.approver} already approved call '{d.call_id}'; it needs "
        f"{required - len(approvals)} more approval(s) from someone else",
    )


def counted(approvals: list[Approval], digest: str) -> list[Approval]:
    """The approvals that count for arguments with this digest (one per person).

    An approval is for the arguments it was given on: once they change (an edit), it no
    longer counts, whatever else happened to the list.
    """
    seen: set[str] = set()
    out = []
    for a in approvals:
        if a.arguments_sha256 in (None, digest) and a.approver not in seen:
            seen.add(a.approver)
            out.append(a)
    return out
