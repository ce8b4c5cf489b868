"""`hitl run` and `hitl watch`: start a run, follow one."""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from hitl.cli.common import EXIT_FAILED, EXIT_OK, Refused, _short, labelled_text, one_line
from hitl.wire import (
    UPDATE_WAIT,
    RunEvent,
    RunOutput,
    RunStatus,
    WaitInput,
)


async def cmd_run(client: Client, args: argparse.Namespace) -> int:
    """Start a run by agent name; with --wait, wait until it pauses or finishes.

    A business id (`--id`) names one run for good, as with `Runner.run`: if its run has closed,
    nothing starts and its outcome is reported.
    """
    from hitl.starting import StartRequest

    request = StartRequest.build(args.agent, _input_text(args.input), workflow_id=args.id)
    wid = request.workflow_id
    try:
        handle = await request.start(client, args.task_queue)
    except WorkflowAlreadyStartedError:
        print(f"run {wid} already exists and has closed; nothing was started")
        return _report(await _closed_status(client.get_workflow_handle(wid, result_type=RunOutput)))
    except RPCError as exc:
        raise Refused(f"cannot start {wid}: {exc.message}") from None
    print(f"started {wid}")
    if not args.wait:
        return EXIT_OK
    try:
        status: RunStatus = await handle.execute_update(
            UPDATE_WAIT,
            WaitInput(),
            result_type=RunStatus,
            rpc_timeout=timedelta(seconds=args.timeout),
        )
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        raise Refused(await _not_running_message(client, handle, args.timeout)) from None
    except WorkflowUpdateFailedError as exc:
        raise Refused(f"the run failed: {exc.cause}") from None
    except RPCError:
        status = await _closed_status(handle)
    if status.phase == "completed" and status.final_output is None:
        status = await _closed_status(handle)  # a large output is left out of `wait`'s answer
    return _report(status)


def _input_text(given: str) -> str:
    """The run's input: `given`, or standard input for `-` (a long or piped text); UTF-8 only.

    Python hands undecodable bytes of argv and stdin on as lone surrogates, which no payload
    can carry: such an input is refused here, before anything starts.
    """
    raw = sys.stdin.buffer.read() if given == "-" else given.encode("utf-8", "surrogateescape")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = "standard input" if given == "-" else "the input"
        raise Refused(f"{where} is not UTF-8 text (byte {exc.start}); nothing started") from None


async def _not_running_message(
    client: Client, handle: WorkflowHandle[Any, Any], seconds: float
) -> str:
    """Why a started run did not pause or finish within `--timeout` (never "a decision")."""
    from hitl.serving import live_pollers

    try:
        queue = (await handle.describe()).task_queue
        pollers = await live_pollers(client, queue)
    except RPCError:
        queue, pollers = "?", -1
    if pollers == 0:
        return (
            f"run {handle.id} is started and stored, but no worker is polling task queue "
            f"{queue!r}: nothing has run yet. It begins when a worker serves that queue "
            f"(`python -m hitl.worker --task-queue {queue}`); follow it with "
            f"`hitl watch {handle.id}`."
        )
    return (
        f"run {handle.id} did not pause or finish within {seconds:g} s (a worker polls task "
        f"queue {queue!r}; a slow model or tool, or a busy worker). It goes on; follow it with "
        f"`hitl watch {handle.id}` or `hitl show {handle.id}`."
    )


async def _closed_status(handle: WorkflowHandle[Any, Any]) -> RunStatus:
    from hitl.settling import _typed

    try:
        out: RunOutput = await handle.result()
    except Exception as exc:
        err = _typed(exc)
        raise Refused(f"the run failed: {err.type_name}: {err.message}") from None
    return RunStatus(
        workflow_id=handle.id,
        run_id=out.run_id,
        phase="completed",
        agent="",
        final_output=out.final_output,
        decisions=out.decisions,
        usage=out.usage,
    )


def _report(status: RunStatus) -> int:
    if status.phase == "failed" and status.error:
        print(f"failed: {one_line(status.error.type)}: {one_line(status.error.message)}")
        return EXIT_FAILED
    if status.phase == "completed":
        print("\n".join(labelled_text("completed", status.final_output)))
        return EXIT_OK
    print(f"{status.phase}: {len(status.pending)} pending approval(s)")
    for p in status.pending:
        title = p.request.title if p.request else p.tool_name
        print(f"  {one_line(p.call_id)}  {one_line(p.tool_name)}  {_short(title)}")
    print(f"see them with: hitl show {one_line(status.workflow_id)}")
    return EXIT_OK


def format_event(event: RunEvent) -> str:
    """One line per event for `hitl watch` (every value escaped and kept on the line)."""
    L = one_line
    head = f"[{event.offset}] turn {event.turn}"
    who = f" {L(event.agent)}" if event.agent else ""
    kind, tool, call = event.type, L(event.tool), L(event.call_id)
    text = event.text or ""
    if kind == "message":
        return f"{head}{who}: {_short(text, 100)}"
    if kind == "model_text_delta":
        return f"{head}{who} ...{L(text)}"
    if kind == "tool_called":
        args = _short(str(event.data.get("arguments", "")), 60)
        return f"{head}{who} calls {tool}({args})  [{call}]"
    if kind == "tool_started":
        return f"{head} running {tool} [{call}]"
    if kind == "tool_finished":
        return f"{head} {call} -> {_short(text, 80)}"
    if kind == "approval_requested":
        return f"{head} WAITING FOR APPROVAL {tool} [{call}]: {L(text)}"
    if kind == "approval_decided":
        who_decided = L(event.data.get("approver") or event.data.get("source"))
        return f"{head} {L(text)} {tool} [{call}] by {who_decided}"
    if kind == "deadline_extended":
        return f"{head} deadline of [{call}] moved to {L(text)}"
    if kind == "arguments_edited":
        return f"{head} arguments of {tool} [{call}] edited to {_short(text, 80)}"
    if kind == "approval_reminder":
        return f"{head} REMINDER {tool} [{call}] still waits for a decision"
    if kind == "approval_escalated":
        return f"{head} ESCALATED {tool} [{call}]: now also {L(text)}"
    if kind == "call_uncertain":
        return f"{head} UNCERTAIN {tool} [{call}]: {L(text)}"
    if kind == "call_asks":
        return f"{head} ASKS {tool} [{call}]: {L(text)}"
    if kind == "call_resolved":
        return f"{head} resolved {tool} [{call}]: {L(text)}"
    if kind == "handoff":
        return f"{head} handoff {L(event.data.get('from'))} -> {L(event.data.get('to'))}"
    if kind == "paused":
        return f"{head} paused: waiting for {L(', '.join(event.data.get('pending', [])))}"
    if kind == "final_output":
        return f"{head} final output: {L(text)}"
    if kind == "run_failed":
        return f"{head} FAILED ({L(event.data.get('type'))}): {L(text)}"
    return f"{head} {L(kind)}"


async def cmd_watch(client: Client, args: argparse.Namespace) -> int:
    """Follow a run's event stream, as it runs and while it waits, until it finishes."""
    from hitl.stream import stream_events

    last: RunEvent | None = None
    try:
        async for event in stream_events(client, args.run, from_offset=args.from_offset):
            print(format_event(event), flush=True)
            last = event
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise Refused(f"no run {args.run!r} in this namespace") from None
        raise Refused(f"cannot follow run {args.run}: {exc.message}") from None
    if last is not None and last.type == "run_failed":
        return EXIT_FAILED
    return EXIT_OK
