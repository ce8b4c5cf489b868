"""Decisions as they arrive at a run: by update (validated first) or by signal (recorded).

`AgentRun`'s `approve`, `reject` and `decide` handlers are a line each; this is what they do.
A validator reads and checks the payload without changing anything; the handler records the
decision synchronously, before any `await`, so two concurrent decisions can never both win.

Deadlines: a decision that reaches the run after its call's deadline (by the run's clock) loses.
The first such decision per call is accepted only to be recorded as refused (`DeadlinePassed`,
with its call id, in the run's `refused` list) and fails for its caller; later ones are refused
by the validator. A person can therefore see afterwards why a decision queued while no worker
ran did not apply.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from hitl.limits import (
        MAX_APPROVER_CHARS,
        MAX_CALL_ID_CHARS,
        MAX_CONTEXT_BYTES,
        MAX_DECIDE_BYTES,
        MAX_DECISION_BYTES,
        MAX_DECISIONS_PER_UPDATE,
        MAX_REFUSED_KEPT,
    )
    from hitl.rules import escalate_after, escalation_targets, may_decide
    from hitl.signing import Signed
    from hitl.wire import (
        AgentSpec,
        CallPlan,
        CallRecord,
        CarriedState,
        DecideInput,
        DecisionInput,
        DecisionKind,
        DecisionRecord,
        DecisionVia,
        ExtendInput,
        Extension,
        RefusedDecision,
        RunContextData,
        RunInput,
        ToolSpec,
    )
    from hitl.workflows.approvers import apply_edit, check_edit, out_of_reach
    from hitl.workflows.book import SEP
    from hitl.workflows.checks import one_of_several
    from hitl.workflows.failures import RunFailure
    from hitl.workflows.inputs import preview, read_one, refusal
    from hitl.workflows.reservations import edit_reservation, release_holds, take_edit_holds

if TYPE_CHECKING:
    from hitl.workflows.book import ApprovalBook
    from hitl.workflows.events import Events
    from hitl.workflows.notices import Notices
    from hitl.workflows.steps import Steps

DECISION_EXAMPLE = '{"call_id": "<call id>", "approver": "you@example.com"}'
DECIDE_EXAMPLE = '{"decisions": [{"kind": "approve", "call_id": "<call id>"}]}'
EXTEND_EXAMPLE = '{"call_id": "<call id>", "seconds": 86400, "approver": "you@example.com"}'


class Decided(Protocol):
    """What taking decisions reads and changes of a run."""

    inp: RunInput
    state: CarriedState
    book: ApprovalBook
    steps: Steps
    events: Events
    notices: Notices
    continuing: bool

    def finished(self) -> bool:
        """The run completed or failed (it takes no more decisions)."""
        ...


class Decisions:
    """Read, validate, record and refuse the decisions sent to one run."""

    def __init__(self, run: Decided) -> None:
        self.run = run
        self.previews: dict[str, int] = {}
        """Edit previews taken, by call (`MAX_PREVIEWS_PER_CALL`)."""
        self.previewing = False
        self.editing = 0
        """Edits planning now: a preview asked meanwhile is refused (`Busy`), never in between."""
        """An edit preview is planning: an edit waits for it, so that each edit's plan is the
        one recorded between its update's acceptance and completion (`hitl verify` reads it so).
        """

    # ----------------------------------------------------------------- reading

    def read(self, args: tuple[Any, ...], kind: str) -> DecisionInput:
        """The payload of an `approve` / `reject` update or signal."""
        return read_one(
            args,
            DecisionInput,
            what=f"{'an' if kind == 'approve' else 'a'} {kind} decision",
            example=DECISION_EXAMPLE,
            max_bytes=MAX_DECISION_BYTES,
        )

    def read_batch(self, args: tuple[Any, ...]) -> DecideInput:
        """The payload of a `decide` update: at most 100 decisions, one kind per call."""
        req = read_one(
            args,
            DecideInput,
            what="a decide request",
            example=DECIDE_EXAMPLE,
            max_bytes=MAX_DECIDE_BYTES,
        )
        if len(req.decisions) > MAX_DECISIONS_PER_UPDATE:
            raise refusal(
                "InvalidDecision",
                f"{len(req.decisions)} decisions in one request; the limit is "
                f"{MAX_DECISIONS_PER_UPDATE}",
            )
        kinds: dict[str, str] = {}
        for d in req.decisions:
            if d.arguments is not None:
                raise refusal(
                    "InvalidDecision",
                    f"call '{d.call_id}': edited arguments go with the approve update, alone",
                )
            if kinds.setdefault(d.call_id, d.kind) != d.kind:
                raise refusal(
                    "InvalidDecision", f"call '{d.call_id}' is both approved and rejected"
                )
            if d.approver and sum(x.call_id == d.call_id for x in req.decisions) > 1:
                # One request is one caller: it cannot be two of a call's approvers.
                raise refusal(
                    "InvalidDecision", f"call '{d.call_id}' appears more than once in one request"
                )
        if req.context is not None:
            self._check_new_context(req.context)
        return req

    def _check_new_context(self, ctx: RunContextData) -> None:
        """A resume may replace the context's value, never how workers rebuild it."""
        size = len(json.dumps(ctx.value))
        if size > MAX_CONTEXT_BYTES:
            raise refusal(
                "InvalidDecision",
                f"the new context is {size} bytes; the limit is {MAX_CONTEXT_BYTES}",
            )
        current = self.run.state.context
        for field in ("type", "deserializer"):
            given = getattr(ctx, field)
            pinned = getattr(current, field) if current else None
            if given is not None and given != pinned:
                raise refusal(
                    "InvalidDecision",
                    f"a new context keeps the run's context {field} ({pinned or 'none'}), "
                    f"not {given[:100]!r}",
                )

    # ----------------------------------------------------------------- validating

    def validate(self, kind: DecisionKind, args: tuple[Any, ...]) -> None:
        """The `approve` / `reject` validator: read and admit, logging a refusal."""
        with self.logged(kind, args):
            self.admit(kind, self.read(args, kind))

    @contextmanager
    def logged(self, name: str, args: tuple[Any, ...]) -> Iterator[None]:
        """Log an update its validator refuses (for the audit).

        A refused update leaves no trace in history; this line in the worker's log is its record.
        """
        try:
            yield
        except ApplicationError as err:
            sent = preview(args)
            refusal = {
                "at": workflow.now().isoformat(),
                "update": name,
                "error_type": err.type,
                "message": err.message,
                "sent": sent,
            }
            workflow.logger.warning(
                "refused %s update: %s: %s (sent: %s)",
                name,
                err.type,
                err.message,
                sent,
                extra={"hitl_refusal": refusal},
            )
            raise

    def _open(self, call_id: str) -> None:
        run = self.run
        link = run.inp.parent
        if link is not None:
            # No approval path bypasses the root: it sees, validates and records every decision.
            qualified = "/".join([*link.call_path, call_id])
            raise refusal(
                "NotRoot",
                f"this is a nested run; decide on the root run {link.root_workflow_id} "
                f"(call id '{qualified}')",
            )
        if run.finished():
            raise refusal("RunFinished", "the run has finished; it takes no more decisions")

    def admit(self, kind: DecisionKind, d: DecisionInput) -> None:
        """Validate a decision (read-only; validators call this).

        One that arrives after its call's deadline is let through once, so the handler can
        record it as refused (the caller still gets `DeadlinePassed`).
        """
        self._open(d.call_id)
        try:
            known = self.run.book.check(kind, d, workflow.now())
        except ApplicationError as err:
            if err.type != "DeadlinePassed" or self._late_recorded(d.call_id):
                raise
            return
        if known is None:
            self.verified(kind, d)
            if d.arguments is not None:
                self._edit_target(kind, d)

    def verified(self, kind: str, d: Signed) -> bool:
        """Check the signature a decision carries, or must carry (`ApprovalBook.verify`)."""
        return self.run.book.verify(
            kind, d, now=workflow.now(), workflow_id=workflow.info().workflow_id
        )

    def admit_batch(self, req: DecideInput) -> None:
        """Validate every decision of a `decide` request."""
        for d in req.decisions:
            self.admit(d.kind, d)

    # ----------------------------------------------------------------- recording

    def decide(self, kind: DecisionKind, d: DecisionInput, via: DecisionVia) -> DecisionRecord:
        """Record one decision, synchronously (never awaits)."""
        run = self.run
        self._open(d.call_id)
        try:
            known = run.book.check(kind, d, workflow.now())
            if known is not None:
                return known
            verified = self.verified(kind, d)
            rec = run.book.record(kind, d, now=workflow.now(), via=via, verified=verified)
        except ApplicationError as err:
            if err.type == "DeadlinePassed" and via == "update":
                self._refuse_late(kind, d, err)
            raise
        run.events.announce_decisions()
        run.events.note_pause()
        return rec

    def decide_batch(self, req: DecideInput) -> list[DecisionRecord]:
        """Record a `decide` request: all of it, or nothing if one decision is refused."""
        run, now = self.run, workflow.now()
        late = []
        for d in req.decisions:
            self._open(d.call_id)
            try:
                if run.book.check(d.kind, d, now) is None:
                    self.verified(d.kind, d)
            except ApplicationError as err:
                if err.type != "DeadlinePassed":
                    raise
                late.append((d, err))
        if late:
            for d, refused in late:
                self._refuse_late(d.kind, d, refused)
            raise late[0][1]
        made = [self.decide(d.kind, d, "update") for d in req.decisions]
        if req.context is not None:
            ctx = req.context
            if run.state.context is not None:
                # The run's context type and deserializer still rebuild the new value.
                ctx = ctx.model_copy(
                    update={
                        "deserializer": run.state.context.deserializer,
                        "type": ctx.type or run.state.context.type,
                    }
                )
            run.state.context = ctx
        return made

    def by_signal(self, kind: DecisionKind, args: tuple[Any, ...]) -> None:
        """A decision sent as a signal: it cannot return an error, so a refusal is recorded.

        With the call and approver it named, when it could be read.
        """
        d: DecisionInput | None = None
        try:
            d = self.read(args, kind)
            if d.arguments is not None:
                raise refusal(
                    "InvalidDecision", "edited arguments need the approve update (not a signal)"
                )
            self.decide(kind, d, "signal")
        except ApplicationError as err:
            self.refuse(
                kind,
                preview(args),
                err.type or "InvalidDecision",
                err.message,
                call_id=d.call_id if d is not None else None,
                approver=d.approver if d is not None else None,
            )

    # ----------------------------------------------------------------- edits

    async def approve(self, args: tuple[Any, ...]) -> DecisionRecord:
        """The `approve` update: with `arguments`, edit the call first, then approve it."""
        d = self.read(args, "approve")
        if d.arguments is None:
            return self.decide("approve", d, "update")
        return await self._edit_then_approve(d)

    def _edit_target(
        self, kind: DecisionKind, d: DecisionInput
    ) -> tuple[CallRecord, AgentSpec, ToolSpec, str]:
        """The call an edit is for, its agent and tool, and the edited arguments' JSON text."""
        run = self.run
        if SEP in d.call_id:
            raise refusal(
                "EditsNotAllowed",
                f"call '{d.call_id}' belongs to a nested run; its arguments cannot be edited",
            )
        call = run.book.calls[d.call_id]  # `check` found it pending
        assert run.state.graph is not None
        agent = run.state.graph.agents[call.agent_id]
        tool = agent.tool(call.tool_name)
        assert tool is not None
        text = check_edit(kind, d, tool, run.inp.run_config.max_tool_argument_bytes)
        return call, agent, tool, text

    async def _edit_then_approve(self, d: DecisionInput) -> DecisionRecord:
        """Edit, then approve: the tool's own checks and approval requirement see the edit.

        The tool plans the edited call (argument validation, `needs_approval`,
        `required_approvals`, the approval request) in an activity; the edit is taken only if
        the call is still pending as it was when that ends (the same arguments the person saw,
        and a signature that still verifies). An edit that now needs more approvers than this
        one leaves the call waiting for them.
        """
        run = self.run
        self._open(d.call_id)
        if run.book.check("approve", d, workflow.now()) is not None:
            return self.decide("approve", d, "update")  # a retry: answered as recorded
        call, agent, tool, text = self._edit_target("approve", d)
        probe = call.model_copy(update={"arguments": text})
        reserve_as = edit_reservation(call, text)
        if self.previewing:  # never true in runs recorded before previews existed
            await workflow.wait_condition(lambda: not self.previewing)
        self.editing += 1
        try:
            planned = await run.steps.plan(
                agent, [probe], [tool.name], busy=False, reserve_as=reserve_as
            )
        except RunFailure as failed:  # the tool's planning code failed: the edit is not taken
            raise refusal("EditRefused", f"planning the edited call failed: {failed}") from None
        finally:
            self.editing -= 1
        plan = planned.plans[0]
        held = plan.verdict.reservations if plan.verdict and reserve_as else []
        try:
            rec, replaced = self._take_edit(d, plan, swap=reserve_as is not None)
        except ApplicationError:
            await release_holds(held)  # not taken: what it reserved goes back
            raise
        if replaced is None:  # a retry: answered as recorded
            await release_holds(held)
            return rec
        await release_holds(replaced)  # the model's amount: the edited one is held now
        return rec

    def _take_edit(
        self, d: DecisionInput, plan: CallPlan, *, swap: bool
    ) -> tuple[DecisionRecord, Any]:
        """Take a planned edit if the call is still pending as it was, then approve it.

        Returns the record and the holds the edit replaced (with `swap`: the call then holds
        its plan's; `None`: not taken, a retry).
        """
        run = self.run
        self._open(d.call_id)
        if run.book.check("approve", d, workflow.now()) is not None:
            return self.decide("approve", d, "update"), None
        verified = self.verified("approve", d)
        call, _agent, tool, text = self._edit_target("approve", d)
        refused = plan.refusal or (plan.tripwire.message if plan.tripwire else None)
        if refused is not None:
            raise refusal("EditRefused", f"{tool.name} refuses the edited arguments: {refused}")
        needs = plan.needs_approval or tool.approval == "always"
        asked = plan.required_approvals or 1
        required = max(tool.required_approvals, asked) if needs else 1
        if required > 1:
            # Refused now, before anything changes, if this approval could not count once the
            # edit makes the call need several people (no name, or `always`).
            one_of_several(d, call.tool_name, required, [])
        call.required_approvals = required
        if plan.request is not None:
            call.request = plan.request
        if plan.approvers is not None:
            call.approvers = plan.approvers or run.inp.run_config.approvers
        apply_edit(call, d, text, workflow.now())
        replaced = take_edit_holds(call, plan.verdict, run.state.verdicts) if swap else []
        run.events.emit("arguments_edited", call_id=d.call_id, tool=call.tool_name, text=text)
        if not may_decide(d.approver, call.approvers, run.state.directory):
            return out_of_reach(call, d, workflow.now()), replaced
        # The person saw the arguments before their edit (checked above): what they approve
        # is the edit itself.
        rec = run.book.record(
            "approve", d, now=workflow.now(), via="update", verified=verified, edited=True
        )
        run.events.announce_decisions()
        run.events.note_pause()
        return rec, replaced

    # ----------------------------------------------------------------- deadlines

    def read_extend(self, args: tuple[Any, ...]) -> ExtendInput:
        """The payload of an `extend` update."""
        return read_one(
            args,
            ExtendInput,
            what="an extend request",
            example=EXTEND_EXAMPLE,
            max_bytes=MAX_DECISION_BYTES,
        )

    def validate_extend(self, args: tuple[Any, ...]) -> None:
        """The `extend` validator (read-only)."""
        with self.logged("extend", args):
            d = self.read_extend(args)
            self._open(d.call_id)
            self.run.book.check_extend(d, workflow.now())
            self.verified("extend", d)

    def extend(self, args: tuple[Any, ...]) -> Extension:
        """Move a pending call's deadline later (synchronously)."""
        d = self.read_extend(args)
        self._open(d.call_id)
        self.run.book.check_extend(d, workflow.now())
        verified = self.verified("extend", d)
        ext = self.run.book.extend(d, workflow.now(), verified=verified)
        self.run.events.emit("deadline_extended", call_id=d.call_id, text=ext.deadline.isoformat())
        return ext

    async def wait(self, rec: CallRecord, tool: ToolSpec) -> None:
        """Wait for a person's decision on `rec`: remind, escalate, and expire it on time.

        The deadline is `extend`-able; a reminder and an escalation happen once each, after
        `remind_after` / `escalate_after` from the request (the tool's, else the run's). A run
        about to continue as new starts nothing more (its successor will): then it waits here
        for good, decision or not.
        """
        run = self.run
        cfg = run.inp.run_config
        if not rec.announced:
            rec.announced = True
            run.notices.tell("waiting", rec)
        remind = tool.remind_after_seconds or cfg.remind_after_seconds
        escalate = escalate_after(tool, cfg, rec.policy)
        while rec.decision is None or run.continuing:
            deadline = rec.deadline
            steps: list[tuple[datetime, str]] = []
            if deadline is not None:
                steps.append((deadline, "expire"))
            if rec.requested_at is not None and remind and rec.reminded_at is None:
                steps.append((rec.requested_at + timedelta(seconds=remind), "remind"))
            if rec.requested_at is not None and escalate and rec.escalated_at is None:
                steps.append((rec.requested_at + timedelta(seconds=escalate), "escalate"))
            when, step = min(steps) if steps else (None, "")
            left = (when - workflow.now()).total_seconds() if when is not None else None

            def settled(until: datetime | None = deadline) -> bool:
                return (rec.decision is not None and not run.continuing) or rec.deadline != until

            try:
                if left is not None and left <= 0:
                    raise TimeoutError
                await workflow.wait_condition(
                    settled, timeout=timedelta(seconds=left) if left is not None else None
                )
            except TimeoutError:
                if run.continuing:
                    await workflow.wait_condition(lambda: False)
                if rec.decision is not None or rec.deadline != deadline:
                    continue
                if step == "remind":
                    self._remind(rec)
                elif step == "escalate":
                    self._escalate(rec, escalation_targets(tool, cfg, rec.policy))
                else:
                    waited = tool.approval_timeout_seconds or cfg.approval_timeout_seconds
                    seconds = f"{waited or 0:g}s"
                    message = (
                        f"Approval for {rec.tool_name} expired after {seconds} without a decision."
                    )
                    run.book.expire(rec, workflow.now(), message)
                    run.events.announce_decisions()
        decision = rec.decision
        if decision is not None and decision.still_needed == 0:
            run.notices.tell("expired" if decision.kind == "expired" else "decided", rec)

    def _remind(self, rec: CallRecord) -> None:
        rec.reminded_at = workflow.now()
        self.run.events.emit("approval_reminder", call_id=rec.call_id, tool=rec.tool_name)
        self.run.notices.tell("reminder", rec)

    def _escalate(self, rec: CallRecord, to: list[str]) -> None:
        rec.escalated_at = workflow.now()
        self.run.events.metrics.escalated(rec.tool_name)
        if rec.approvers:  # an empty list lets anyone decide already
            rec.approvers = [*rec.approvers, *(a for a in to if a not in rec.approvers)]
        self.run.events.emit(
            "approval_escalated",
            call_id=rec.call_id,
            tool=rec.tool_name,
            text=", ".join(to) or "(no one added)",
        )
        self.run.notices.tell("escalated", rec)

    # ----------------------------------------------------------------- refusals

    def _late_recorded(self, call_id: str) -> bool:
        return any(
            r.call_id == call_id and r.error_type == "DeadlinePassed" and r.via == "update"
            for r in self.run.state.refused
        )

    def _refuse_late(self, kind: str, d: DecisionInput, err: ApplicationError) -> None:
        who = f" from {d.approver}" if d.approver else ""
        self.refuse(
            kind,
            f"{kind}{who} for call {d.call_id}"[:200],
            "DeadlinePassed",
            err.message,
            via="update",
            call_id=d.call_id,
            approver=d.approver,
        )

    def refuse(
        self,
        name: str,
        payload: str,
        error_type: str,
        message: str,
        *,
        via: Literal["signal", "update"] = "signal",
        call_id: str | None = None,
        approver: str | None = None,
    ) -> None:
        """Keep a record of a refused message (the latest `MAX_REFUSED_KEPT`).

        With the call and approver it named (cut to their limits: a refusal may be for their
        length).
        """
        workflow.logger.warning("refused %s %s: %s", name, via, message)
        refused = self.run.state.refused
        refused.append(
            RefusedDecision(
                received_at=workflow.now(),
                name=name[:100],
                payload=payload,
                error_type=error_type,
                message=message[:500],
                via=via,
                call_id=call_id[:MAX_CALL_ID_CHARS] if call_id is not None else None,
                approver=approver[:MAX_APPROVER_CHARS] if approver is not None else None,
            )
        )
        del refused[:-MAX_REFUSED_KEPT]
