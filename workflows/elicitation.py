"""Questions a tool asks in the middle of a call (MCP elicitation), answered by a person.

An MCP server may ask its client for input while a tool runs ("confirm the transfer of
$4,000?", "which account?"). Nobody may be there to answer, and the answer may take days, so the
tool activity does not hold the question open: it tells the server the question was dismissed,
and the run parks the call as *awaiting input*, listed with the pending approvals. A person
answers with the `answer` update (`accept` with content fitting the requested form, `decline`,
or `cancel`); the tool is then called again, with the same idempotency key, and the answers
given so far are handed to the server's questions in order.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from hitl.limits import MAX_APPROVER_CHARS, MAX_CALL_ID_CHARS, MAX_TEXT_CHARS, text_problem
    from hitl.schema import schema_problem
    from hitl.wire import (
        AnswerInput,
        CallRecord,
        CarriedState,
        InputAnswer,
        InputRequest,
        ToolOutput,
    )
    from hitl.workflows import records
    from hitl.workflows.approvers import check_approver
    from hitl.workflows.checks import check_round, check_seen
    from hitl.workflows.failures import NeedsInput
    from hitl.workflows.inputs import read_one, refusal

if TYPE_CHECKING:
    from hitl.workflows.book import ApprovalBook
    from hitl.workflows.decisions import Decisions
    from hitl.workflows.events import Events


class Asker(Protocol):
    """What a tool's question reads and changes of a run."""

    state: CarriedState
    book: ApprovalBook
    decisions: Decisions
    events: Events

    def finished(self) -> bool:
        """The run completed or failed."""
        ...


ANSWER_EXAMPLE = '{"call_id": "<call id>", "content": {"confirm": true}, "approver": "you"}'
MAX_QUESTIONS = 5
"""Questions one call may ask; past them the model reads an error instead of another pause."""
MAX_SCHEMA_BYTES = 16 * 1024


def park(run: Asker, rec: CallRecord, need: NeedsInput) -> ToolOutput | None:
    """Record the tool's question on `rec` (see `wait`); an output when it may ask no more."""
    if need.index < len(rec.answers):
        # The tool asked something else than last time at this point: later answers no
        # longer fit (kept in history, in the earlier attempts' records).
        del rec.answers[need.index :]
    if len(rec.answers) >= MAX_QUESTIONS:
        return ToolOutput(
            output=f"{rec.tool_name} asked more than {MAX_QUESTIONS} questions; it was stopped.",
            is_error=True,
        )
    schema = need.schema if len(repr(need.schema)) <= MAX_SCHEMA_BYTES else {"type": "object"}
    rec.input_request = InputRequest(
        server=need.server[:100],
        message=need.message[:MAX_TEXT_CHARS],
        requested_schema=schema,
        since=workflow.now(),
        timeout_seconds=need.timeout,
    )
    rec.state = "awaiting_input"
    rec.round += 1
    run.events.emit("call_asks", call_id=rec.call_id, tool=rec.tool_name, text=need.message)
    return None


async def wait(run: Asker, rec: CallRecord) -> None:
    """Wait until someone answers `rec`'s question; the tool is then called again.

    A question with a time limit (a client tool's) is answered `cancel` when it runs out, by
    the run itself: counted from when it was asked, so a continued run waits only what is left.
    """
    request = rec.input_request
    limit = request.timeout_seconds if request is not None else None
    if request is None or limit is None:
        await workflow.wait_condition(lambda: rec.input_request is None)
    else:
        left = request.since + timedelta(seconds=limit) - workflow.now()
        try:
            await workflow.wait_condition(
                lambda: rec.input_request is None, timeout=max(left, timedelta(seconds=1))
            )
        except TimeoutError:
            _time_out(run, rec, request, limit)
    rec.state = "running"


def _time_out(run: Asker, rec: CallRecord, request: InputRequest, limit: float) -> None:
    given = InputAnswer(
        question=request.message,
        action="cancel",
        reason=f"no answer within {limit:g} seconds",
        answered_at=workflow.now(),
    )
    rec.answers.append(given)
    rec.input_request = None
    rec.round += 1
    run.book.note(records.answered(rec, given))


def read(args: tuple[Any, ...]) -> AnswerInput:
    """The payload of an `answer` update."""
    return read_one(
        args, AnswerInput, what="an answer", example=ANSWER_EXAMPLE, max_bytes=64 * 1024
    )


def check(run: Asker, d: AnswerInput) -> tuple[CallRecord, bool]:
    """Validate an answer (read-only); the call it answers, and whether it was signed.

    It must be signed when the call's decisions must be.
    """
    problem = (
        text_problem("call_id", d.call_id, MAX_CALL_ID_CHARS)
        or text_problem("reason", d.reason, MAX_TEXT_CHARS)
        or text_problem("approver", d.approver, MAX_APPROVER_CHARS)
    )
    if problem is not None:
        raise refusal("InvalidDecision", problem)
    if run.finished():
        raise refusal("RunFinished", "the run has finished; it takes no more answers")
    rec = run.book.calls.get(d.call_id)
    if rec is None or (rec.input_request is None and not rec.answers):
        raise refusal("UnknownCall", f"no call '{d.call_id}' asks for input")
    request = rec.input_request
    if request is None:
        raise refusal("NotPending", f"call '{d.call_id}' asks nothing now (it is {rec.state})")
    check_approver(d, rec.tool_name, rec.approvers, run.state.directory)
    check_seen(d, rec.arguments, len(rec.edits))
    check_round(d.call_id, d.round, rec.round)
    verified = run.decisions.verified("answer", d)
    if d.action == "accept":
        if d.content is None:
            raise refusal(
                "InvalidDecision", f"accepting needs content for the form; e.g. {ANSWER_EXAMPLE}"
            )
        problem = schema_problem(d.content, request.requested_schema, where="content")
        if problem is not None:
            raise refusal("InvalidDecision", problem)
    elif d.content is not None:
        raise refusal("InvalidDecision", f"{d.action} takes no content")
    return rec, verified


def answer(run: Asker, args: tuple[Any, ...]) -> InputAnswer:
    """Record an answer (synchronously, after `check`); the call runs its tool again."""
    d = read(args)
    rec, verified = check(run, d)
    assert rec.input_request is not None
    given = InputAnswer(
        question=rec.input_request.message,
        action=d.action,
        content=d.content,
        approver=d.approver,
        reason=d.reason,
        answered_at=workflow.now(),
        verified=verified,
    )
    rec.answers.append(given)
    rec.input_request = None
    rec.round += 1
    run.book.note(records.answered(rec, given))
    return given
