"""Agents used as tools: each call is a nested run (a child workflow) of the same graph.

Approvals raised inside a nested run are decided at the root. Parent and child talk like this:

- either side signals the other only to say "read me again" (`__hitl_child_report` from the
  child, `__hitl_from_root` from the parent); the signal's content is ignored;
- what either side acts on it reads from the other run itself, by query, in an activity
  (`read_run`): the parent reads the child's pending calls (`__hitl_report`), the child reads
  the decisions and standing rules its parent holds for it (`__hitl_mail`), addressing its
  parent by the id the server gave it (`workflow.info().parent`).

So nobody with access to the namespace can decide a nested call, or show the root a pending
call that does not exist, by signalling one of the runs: a signal only ever causes a read.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict
from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError, FailureError
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from hitl.items import TOOL_ERROR_PREFIX
    from hitl.limits import MAX_SIGNAL_BYTES
    from hitl.wire import (
        QUERY_MAIL,
        QUERY_REPORT,
        SIGNAL_CHILD_REPORT,
        SIGNAL_FROM_ROOT,
        WORKFLOW_TYPE,
        AgentSpec,
        CallRecord,
        CarriedState,
        ChildReport,
        FromRoot,
        ParentLink,
        Phase,
        ReadRunInput,
        RunInput,
        RunOutput,
        ToolOutput,
        ToolSpec,
        child_workflow_id,
    )
    from hitl.workflows.book import ApprovalBook
    from hitl.workflows.children import ChildView
    from hitl.workflows.failures import RunFailure
    from hitl.workflows.inputs import read_one
    from hitl.workflows.steps import Steps, output_text


class ReportHint(BaseModel):
    """The content of a child's "read me" signal: which agent-tool call it answers."""

    model_config = ConfigDict(extra="ignore")
    call_id: str = ""


class Host(Protocol):
    """What the nested-run protocol needs from the run it is part of."""

    inp: RunInput
    state: CarriedState
    book: ApprovalBook
    steps: Steps

    def phase(self) -> Phase:
        """The run's phase."""
        ...

    def path(self) -> list[str]:
        """Agents and agent tools from the root down to this run."""
        ...

    def announce_request(self, call_id: str, tool: str, request: Any, call: Any = None) -> None:
        """Publish an `approval_requested` event once per call."""
        ...


# ----------------------------------------------------------------------------- parent side


async def run_child(host: Host, agent: AgentSpec, rec: CallRecord, tool: ToolSpec) -> ToolOutput:
    """Run an agent tool as a child workflow; its approvals surface and are decided here."""
    info = workflow.info()
    link = host.inp.parent
    try:
        text = json.loads(rec.arguments or "{}").get("input", "")
    except (json.JSONDecodeError, AttributeError):
        text = rec.arguments
    child_id = child_workflow_id(info.workflow_id, rec.call_id)
    view = host.book.add_child(rec.call_id, child_id)
    child_input = RunInput(
        agent=host.inp.agent,
        input=str(text),
        context=host.state.context.value if host.state.context else None,
        max_turns=host.inp.max_turns,
        run_config=host.inp.run_config,
        parent=ParentLink(
            workflow_id=info.workflow_id,
            call_id=rec.call_id,
            root_workflow_id=link.root_workflow_id if link else info.workflow_id,
            path=[*host.path(), agent.name, tool.name],
            call_path=[*(link.call_path if link else []), rec.call_id],
            tracing=host.state.tracing,
            notify=host.state.notify,
            run_call_ids=host.state.run_call_ids,
        ),
        graph=host.state.graph,
        directory=host.state.directory,
        policy=host.state.policy,
        start_agent=tool.agent_id,
        rules=list(host.state.rules),
    )
    handle = await workflow.start_child_workflow(
        WORKFLOW_TYPE,
        child_input,
        id=child_id,
        result_type=RunOutput,
        parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
        # No limit by default: a nested run may wait days for a person, like its root.
        execution_timeout=(
            timedelta(seconds=tool.run_timeout_seconds) if tool.run_timeout_seconds else None
        ),
        static_summary=f"{tool.name} for {agent.name}: {str(text)[:100]}",
    )
    exchange = asyncio.create_task(_exchange(host, view, handle))
    try:
        out: RunOutput = await handle
    except ChildWorkflowError as err:
        cause: BaseException | None = err.cause
        message = cause.message if isinstance(cause, FailureError) else str(err)
        if tool.on_failure == "raise":
            kind = cause.type if isinstance(cause, ApplicationError) and cause.type else None
            raise RunFailure(kind or "RunFailedError", message) from None
        return ToolOutput(output=TOOL_ERROR_PREFIX + message, is_error=True)
    finally:
        view.done = True
        exchange.cancel()
    return ToolOutput(output=output_text(out.final_output))


async def _exchange(host: Host, view: ChildView, handle: ChildWorkflowHandle[Any, Any]) -> None:
    """Read the nested run when it asks to be read; tell it when it has mail."""
    poked = [0]
    while True:
        await workflow.wait_condition(lambda: view.done or view.stale or view.seq != poked[0])
        if view.done:
            return
        if view.stale:
            view.stale = False
            out = await host.steps.read_run(
                ReadRunInput(workflow_id=view.workflow_id, query=QUERY_REPORT, call_id="")
            )
            if out.report is not None and not view.done:
                view.report = out.report
                for p in view.pending():
                    host.announce_request(f"{view.call_id}/{p.call_id}", p.tool_name, p.request, p)
        if view.seq != poked[0]:
            poked[0] = view.seq
            await handle.signal(SIGNAL_FROM_ROOT, {})


def on_child_report(host: Host, args: tuple[Any, ...]) -> None:
    """A nested run asks to be read again (only a hint: a garbled or unknown one is ignored)."""
    try:
        hint = read_one(
            args, ReportHint, what="a report hint", example="(internal)", max_bytes=MAX_SIGNAL_BYTES
        )
    except ApplicationError:
        return
    view = host.book.children.get(hint.call_id)
    if view is not None and not view.done:
        view.stale = True


def mail_for(host: Host, call_id: str) -> FromRoot:
    """What this run holds for the nested run answering `call_id` (the `__hitl_mail` query)."""
    view = host.book.children.get(call_id)
    if view is None:
        return FromRoot(seq=0)
    return FromRoot(
        seq=view.seq, decisions=list(view.decided.values()), standing=list(host.state.rules)
    )


# ----------------------------------------------------------------------------- child side


def report(host: Host) -> ChildReport:
    """This nested run's pending calls and phase (the `__hitl_report` query)."""
    link = host.inp.parent
    return ChildReport(
        call_id=link.call_id if link else "",
        phase=host.phase(),
        pending=host.book.pending(host.path(), workflow.info().workflow_id),
        seen=host.state.seen_from_root,
    )


MAIL_ON_CONTINUE = "hitl-nested-reads-mail-on-continue"


class ChildSide:
    """A nested run's side of the protocol: read its mail when told, ask to be read."""

    def __init__(self, host: Host) -> None:
        self.host = host
        # Mail must not be lost across continue-as-new: a run does not continue as new while
        # it reads its mail (`reading`), and a continued run reads its mail once at start (it may
        # have been told of mail its predecessor never read). Patched: nested runs recorded
        # before replay as they were.
        self.careful = workflow.patched(MAIL_ON_CONTINUE)
        self.mail_stale = host.inp.carried is not None and self.careful
        self.reading = False
        self._reported: tuple[Any, ...] = ("running", (), 0)

    def key(self) -> tuple[Any, ...]:
        """What the parent cares about: phase, pending call ids, mail acknowledged."""
        pending = self.host.book.pending()
        return (
            self.host.phase(),
            tuple(p.call_id for p in pending),
            self.host.state.seen_from_root,
        )

    async def keep_parent_informed(self) -> None:
        """Ask the parent to read this run whenever what it cares about changes."""
        link = self.host.inp.parent
        assert link is not None
        parent = workflow.get_external_workflow_handle(link.workflow_id)
        while True:
            await workflow.wait_condition(lambda: self.key() != self._reported)
            self._reported = self.key()
            await parent.signal(SIGNAL_CHILD_REPORT, {"call_id": link.call_id})

    async def read_mail(self) -> None:
        """Read the decisions and rules the parent holds for this run, when told to."""
        link = self.host.inp.parent
        parent = workflow.info().parent
        assert link is not None and parent is not None
        while True:
            await workflow.wait_condition(lambda: self.mail_stale)
            self.mail_stale, self.reading = False, True
            try:
                out = await self.host.steps.read_run(
                    ReadRunInput(
                        workflow_id=parent.workflow_id,
                        run_id=parent.run_id,
                        query=QUERY_MAIL,
                        call_id=link.call_id,
                    )
                )
            finally:
                self.reading = False
            if out.mail is not None:
                self.apply(out.mail)

    def apply(self, mail: FromRoot) -> None:
        """Apply mail: decisions first, then rules.

        Decisions first, so the call a person decided is recorded as theirs; then the rules,
        which decide this run's other waiting calls they cover.
        """
        book, now = self.host.book, workflow.now()
        if mail.seq <= self.host.state.seen_from_root:
            return
        for rec in mail.decisions:
            problem = book.apply_forwarded(rec)
            if problem is not None:
                workflow.logger.info("mail for %s not applied: %s", rec.call_id, problem)
        book.merge_rules(mail.standing, now)
        self.host.state.seen_from_root = mail.seq
