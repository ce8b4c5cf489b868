"""`hitl approve` and `hitl reject`: what the run recorded, never an echo of the flags."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from hitl.cli.common import (
    _DEADLINE_KEY,
    EXIT_OK,
    Refused,
    _code,
    _handle,
    _status,
    approver_name,
    one_line,
    parse_span,
    refused_update,
)
from hitl.errors import UserError
from hitl.signing import sign_input, signing_key_from_env
from hitl.starting import decision_update_id
from hitl.wire import (
    UPDATE_ANSWER,
    UPDATE_APPROVE,
    UPDATE_DECIDE,
    UPDATE_EXTEND,
    UPDATE_REJECT,
    UPDATE_RESOLVE,
    AnswerInput,
    DecideInput,
    DecisionInput,
    DecisionKind,
    DecisionRecord,
    DecisionRequest,
    ExtendInput,
    Extension,
    InputAnswer,
    PendingApproval,
    Resolution,
    ResolveInput,
    RunOutput,
    RunStatus,
)

R = TypeVar("R", bound=BaseModel)


async def _no_worker_message(client: Client, handle: WorkflowHandle[Any, Any]) -> str:
    """Why a decision is not applied yet, and until when it still can be (honestly)."""
    from hitl.serving import live_pollers

    deadline = None
    try:
        desc = await handle.describe()
        queue = desc.task_queue
        deadline = desc.typed_search_attributes.get(_DEADLINE_KEY)
        pollers = await live_pollers(client, queue)
    except RPCError:
        queue, pollers = "?", 0
    who = "no worker is polling" if pollers == 0 else "no worker answered on"
    until = (
        f" It can still apply until {deadline.isoformat()} (the earliest approval deadline of "
        "the run's pending calls); one that arrives later is refused and recorded on the run."
        if deadline is not None
        else ""
    )
    return (
        f"{who} task queue {queue!r}: the decision is queued on the server, which holds it in "
        f"memory until a worker takes it (a server restart loses it).{until} Re-run the same "
        "command to see its outcome (it is deduplicated)."
    )


def _decided_text(rec: DecisionRecord) -> str:
    """What a recorded decision says: `approve by alice (always, for the rest of the run)`.

    An expiry says when: `expired at 2026-...` (nobody decided it).
    """
    if rec.kind == "expired":
        return f"expired at {rec.decided_at.isoformat()} (its deadline passed; nothing ran)"
    who = one_line(rec.approver or rec.source.replace("_", " "))
    text = f"{rec.kind} by {who}"
    if rec.approver and rec.source != "person":
        text += f" ({rec.source.replace('_', ' ')})"
    if rec.always:
        text += " (always, for the rest of the run)"
    if rec.message:
        text += f", message {json.dumps(rec.message)}"
    if rec.reason:
        text += f", reason {json.dumps(rec.reason)}"
    return text


def _outcome(
    run_id: str, decisions: Sequence[DecisionRequest], recorded: dict[str, DecisionRecord]
) -> list[DecisionRecord]:
    """The recorded decision for each request, or `Refused` when one was decided otherwise."""
    records = []
    for d in decisions:
        rec = recorded.get(d.call_id)
        if rec is None:
            raise Refused(f"run {run_id} recorded no decision for call '{d.call_id}'")
        if rec.kind == "expired":
            raise Refused(f"refused: {one_line(rec.expiry_text())} (DeadlinePassed)")
        if not rec.answers(d.kind, d):
            raise Refused(
                f"refused: call '{d.call_id}' was already decided: {_decided_text(rec)} "
                "(AlreadyDecided)"
            )
        records.append(rec)
    return records


async def _finished_run_decisions(
    handle: WorkflowHandle[Any, Any], timeout: float
) -> dict[str, DecisionRecord]:
    """The decisions a closed run recorded (its result), or `Refused` saying why there are none."""
    try:
        desc = await handle.describe(rpc_timeout=timedelta(seconds=timeout))
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise Refused(f"no run {handle.id!r} in this namespace") from None
        raise Refused(f"cannot read run {handle.id}: {exc.message} ({_code(exc)})") from None
    if desc.status == WorkflowExecutionStatus.COMPLETED:
        out: RunOutput = await handle.result(rpc_timeout=timedelta(seconds=timeout))
        return {d.call_id: d for d in out.decisions}
    state = desc.status.name.lower() if desc.status else "unknown"
    raise Refused(f"run {handle.id} has finished ({state}); it takes no more decisions")


def signing_key() -> tuple[str, Any] | None:
    """The key `HITL_SIGNING_KEY` names (decisions are then signed), or `None`."""
    try:
        return signing_key_from_env()
    except UserError as exc:
        raise Refused(str(exc)) from None


async def _pending(
    client: Client, handle: WorkflowHandle[Any, Any], args: argparse.Namespace, why: str
) -> dict[str, PendingApproval]:
    """The run's pending calls by id, read from the run (`why` says what needs them)."""
    try:
        status = await _status(client, handle, args.timeout)
    except Refused as exc:
        raise Refused(f"{exc}; {why}") from None
    return {p.call_id: p for p in status.pending}


def _one(pending: dict[str, PendingApproval], call_id: str, run: str) -> PendingApproval:
    call = pending.get(call_id)
    if call is None:
        raise Refused(
            f"call '{one_line(call_id)}' is not pending on run {one_line(run)} (UnknownCall)"
        )
    return call


def _arguments_of(call: PendingApproval) -> dict[str, Any]:
    """A pending call's arguments, which `--set` edits."""
    try:
        loaded = json.loads(call.arguments or "{}")
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


SIGNING_NEEDS = (
    "a signed decision names the arguments it saw, so it needs a worker to read them (the run's "
    "status)"
)


def edited_arguments(
    args: argparse.Namespace, current: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The arguments `--args-file` and `--set NAME=VALUE` give (`None`: no edit).

    A VALUE that parses as JSON is taken as JSON (`amount=100` is a number, `note='"100"'` a
    string); anything else is text. `--set` applies on top of `--args-file`, else on top of
    the call's `current` arguments.
    """
    sets: list[str] = getattr(args, "set", None) or []
    path: str | None = getattr(args, "args_file", None)
    if not sets and not path:
        return None
    arguments: dict[str, Any] = dict(current or {})
    if path:
        try:
            loaded = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise Refused(f"cannot read --args-file {path}: {exc}") from None
        if not isinstance(loaded, dict):
            raise Refused(f"--args-file {path} must hold a JSON object")
        arguments = loaded
    for item in sets:
        name, eq, raw = item.partition("=")
        if not eq or not name:
            raise Refused(f"--set takes NAME=VALUE, not {item!r}")
        try:
            arguments[name] = json.loads(raw)
        except ValueError:
            arguments[name] = raw
    return arguments


async def cmd_decide(client: Client, args: argparse.Namespace, kind: DecisionKind) -> int:
    """Approve or reject one call, or all pending calls of a run.

    What is printed is what the run recorded (returned by the update), never the flags given:
    a call decided earlier in another way is reported as refused (AlreadyDecided, exit 1).
    """
    handle = await _handle(client, args.run)
    approver = approver_name(args)
    signing = signing_key()
    editing = kind == "approve" and bool(
        getattr(args, "set", None) or getattr(args, "args_file", None)
    )
    call_ids, pending = await _calls(client, handle, args, signing is not None, editing)
    decisions = _requests(args, kind, approver, call_ids, pending, editing)
    if signing is not None:
        key_id, key = signing
        decisions = [
            sign_input(d, kind=kind, workflow_id=args.run, key_id=key_id, key=key)
            for d in decisions
        ]
    recorded = await _send(client, handle, args, kind, decisions)
    for rec in _outcome(args.run, decisions, recorded):
        _print_recorded(rec, args.run)
    return EXIT_OK


async def _calls(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    args: argparse.Namespace,
    signed: bool,
    editing: bool,
) -> tuple[list[str], dict[str, PendingApproval]]:
    """The calls to decide, and the run's pending calls when the decision needs them.

    What the person decides on is read from the run when it is needed (a list, an edit, a
    signature): the decision then names the arguments seen, and the run refuses it if they
    changed meanwhile. A bare `hitl approve RUN CALL` queues without a worker.
    """
    if args.all:
        why = (
            "--all needs a worker to list the calls (name a CALL_ID to queue a decision until "
            "one runs)"
        )
        pending = await _pending(client, handle, args, why)
        if not pending:
            raise Refused(f"run {args.run} has no pending approvals")
        return list(pending), pending
    if signed or (editing and getattr(args, "set", None)):
        why = (
            SIGNING_NEEDS
            if signed
            else "--set edits the call's arguments, so it needs a worker to read them (or "
            "give them all with --args-file)"
        )
        pending = await _pending(client, handle, args, why)
        _one(pending, args.call_id, args.run)
        return [args.call_id], pending
    return [args.call_id], {}


def _requests(
    args: argparse.Namespace,
    kind: DecisionKind,
    approver: str,
    call_ids: list[str],
    pending: dict[str, PendingApproval],
    editing: bool,
) -> list[DecisionRequest]:
    """One decision per call, as the flags say, naming the arguments seen when they were read."""
    edited = None
    if editing:
        current = _arguments_of(pending[args.call_id]) if args.call_id in pending else None
        edited = edited_arguments(args, current)
    return [
        DecisionRequest(
            kind=kind,
            call_id=c,
            always=args.always,
            message=getattr(args, "message", None),
            approver=approver,
            reason=args.reason,
            arguments=edited,
            client="hitl",
            seen_sha256=pending[c].arguments_sha256 if c in pending else None,
        )
        for c in call_ids
    ]


async def _send(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    args: argparse.Namespace,
    kind: DecisionKind,
    decisions: list[DecisionRequest],
) -> dict[str, DecisionRecord]:
    """Send the decisions (one: `approve` / `reject`; more: `decide`); what the run recorded.

    The update id is the decision's own, so a re-run command is deduplicated and reports the
    outcome. A closed run takes no new update: what it recorded is the outcome.
    """
    update = _UPDATES[kind] if len(decisions) == 1 else UPDATE_DECIDE
    uid = decision_update_id(args.run, update, decisions)
    timeout = timedelta(seconds=args.timeout)
    try:
        if len(decisions) == 1:
            payload = DecisionInput.model_validate(decisions[0].model_dump(exclude={"kind"}))
            rec: DecisionRecord = await handle.execute_update(
                update, payload, id=uid, rpc_timeout=timeout, result_type=DecisionRecord
            )
            return {rec.call_id: rec}
        after: RunStatus = await handle.execute_update(
            update,
            DecideInput(decisions=decisions, wait=False),
            id=uid,
            rpc_timeout=timeout,
            result_type=RunStatus,
        )
    except WorkflowUpdateFailedError as exc:
        raise refused_update(exc) from None
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        raise Refused(await _no_worker_message(client, handle)) from None
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise Refused(
                f"cannot decide on run {args.run}: {exc.message} ({_code(exc)})"
            ) from None
        return await _finished_run_decisions(handle, args.timeout)
    partial = {
        p.call_id: DecisionRecord.partial(p.call_id, p.tool_name, p.approvals, p.required_approvals)
        for p in after.pending
        if p.approvals
    }
    return {r.call_id: r for r in after.decisions} | partial


_UPDATES: dict[DecisionKind, str] = {"approve": UPDATE_APPROVE, "reject": UPDATE_REJECT}
"""The update that takes one decision of each kind."""


def _print_recorded(rec: DecisionRecord, run: str) -> None:
    """One recorded decision, as the run has it (with four eyes: who approved so far)."""
    verb, _, rest = _decided_text(rec).partition(" ")
    verb = {"approve": "approved", "reject": "rejected"}.get(verb, verb)
    print(f"{verb} {one_line(rec.call_id)} ({one_line(rec.tool_name)}) on {one_line(run)} {rest}")
    if rec.still_needed:
        so_far = ", ".join(one_line(a.approver) for a in rec.approvals)
        print(
            f"  it waits for {rec.still_needed} more approval(s) from someone else "
            f"(approved so far by {so_far})"
        )
    elif len(rec.approvals) > 1 and rec.kind == "approve":
        print(f"  approved by {', '.join(one_line(a.approver) for a in rec.approvals)}")
    if rec.arguments is not None:
        print(f"  it runs with the edited arguments {one_line(rec.arguments)}")


S = TypeVar("S", ExtendInput, ResolveInput, AnswerInput)


async def _update(
    client: Client,
    args: argparse.Namespace,
    name: str,
    payload: S,
    result_type: type[R],
    verb: str,
) -> R:
    """Send one update to `args.run`; a refusal, no worker or an RPC error as `Refused`.

    With `HITL_SIGNING_KEY` set, the payload is signed first, naming the call's arguments and
    round as the run shows them now (read from the run).
    """
    handle = await _handle(client, args.run)
    signing = signing_key()
    if signing is not None:
        call = _one(await _pending(client, handle, args, SIGNING_NEEDS), args.call_id, args.run)
        key_id, key = signing
        payload = sign_input(
            payload.model_copy(
                update={"seen_sha256": call.arguments_sha256, "round": call.round, "client": "hitl"}
            ),
            workflow_id=args.run,
            key_id=key_id,
            key=key,
        )
    try:
        result: R = await handle.execute_update(
            name, payload, rpc_timeout=timedelta(seconds=args.timeout), result_type=result_type
        )
    except WorkflowUpdateFailedError as exc:
        raise refused_update(exc) from None
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        raise Refused(await _no_worker_message(client, handle)) from None
    except RPCError as exc:
        raise Refused(f"cannot {verb} on run {args.run}: {exc.message} ({_code(exc)})") from None
    return result


async def cmd_extend(client: Client, args: argparse.Namespace) -> int:
    """Move a pending call's approval deadline later; prints the new deadline."""
    approver = approver_name(args)
    payload = ExtendInput(
        call_id=args.call_id,
        seconds=parse_span(args.span).total_seconds(),
        approver=approver,
        reason=args.reason,
    )
    ext = await _update(client, args, UPDATE_EXTEND, payload, Extension, "extend")
    call, run = one_line(args.call_id), one_line(args.run)
    print(
        f"extended {call} on {run} by {one_line(approver)}: it now waits until "
        f"{ext.deadline.isoformat()} (was {ext.previous.isoformat()})"
    )
    return EXIT_OK


async def cmd_resolve(client: Client, args: argparse.Namespace) -> int:
    """Settle an uncertain call: it happened, run it again, or give up."""
    payload = ResolveInput(
        call_id=args.call_id,
        outcome=args.outcome.replace("-", "_"),
        output=args.output,
        message=args.message,
        approver=approver_name(args),
        reason=args.reason,
    )
    res = await _update(client, args, UPDATE_RESOLVE, payload, Resolution, "resolve")
    what = {
        "happened": "it happened; the model reads the result given",
        "retry": "the tool runs again, with the same idempotency key",
        "give_up": "given up; the model reads an error",
    }[res.outcome]
    print(f"resolved {one_line(args.call_id)} on {one_line(args.run)}: {what}")
    return EXIT_OK


async def cmd_answer(client: Client, args: argparse.Namespace) -> int:
    """Answer the question a tool asks in the middle of a call (MCP elicitation)."""
    action = "decline" if args.decline else "cancel" if args.cancel else "accept"
    content = edited_arguments(args) if action == "accept" else None
    if action == "accept" and content is None:
        raise Refused(
            "say what to answer: --set NAME=VALUE (repeatable), --args-file, --decline or --cancel"
        )
    if action != "accept" and (args.set or args.args_file):
        raise Refused(f"--{action} takes no --set or --args-file")
    payload = AnswerInput(
        call_id=args.call_id,
        action=action,
        content=content,
        approver=approver_name(args),
        reason=args.reason,
    )
    given = await _update(client, args, UPDATE_ANSWER, payload, InputAnswer, "answer")
    what = {"accept": "answered", "decline": "declined", "cancel": "dismissed"}[given.action]
    print(
        f"{what} {one_line(args.call_id)} on {one_line(args.run)}: the tool is asked again "
        "with the answer"
    )
    return EXIT_OK
