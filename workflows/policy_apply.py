"""`apply_policy`: an admin's signed change of a running run's policy (docs/policies.md).

A run pins the policy version it started with. An admin may move a run to another version:
the update carries the document, signed by a member of the run's pinned approver directory's
`admins` group for this run's workflow id (`hitl.policy_signing`, domain `APPLY_DOMAIN`). The
validator refuses anything else before it reaches history. The handler asks the new version
about each of the run's own pending calls (`reevaluate_policy`, a regular activity: no limit is
reserved again) and changes each call the new version is stricter about:

- `deny` (or an `ask` whose approvers no one of the code's list is in): the call is rejected
  with the rule's message, recorded as a decision of source `policy` naming the admin, the rule
  and the version; its limit reservations are released as for any rejection;
- `ask`: the call waits for the approvers the new rule narrows the code's list to (approvals
  already given by people it no longer admits stop counting), at least as many as before and
  as the rule asks, and its deadline moves earlier if the rule's timeout is shorter;
- `allow`, or no rule: the call keeps waiting as it was. An apply never frees a waiting call:
  someone was asked, and only a decision answers that.

Then the new version is the run's pinned policy, for the calls it plans from now on; the change
(who, when, why, each call's outcome) is kept in `CarriedState.policy_changes` and is the
update's result in history.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from hitl.policy.loading import MAX_DOCUMENT_BYTES
    from hitl.policy_signing import APPLY_DOMAIN
    from hitl.rules import may_decide, narrow_approvers
    from hitl.wire import (
        ACT_REEVALUATE_POLICY,
        UPDATE_APPLY_POLICY,
        AgentSpec,
        ApplyPolicy,
        ApproverDirectory,
        CallChange,
        CallRecord,
        CarriedState,
        PinnedPolicy,
        PolicyChange,
        PolicyDecision,
        PolicyVerdict,
        ReevaluateCall,
        ReevaluateInput,
        ReevaluateOutput,
        RunInput,
    )
    from hitl.workflows import records
    from hitl.workflows.book import ApprovalBook
    from hitl.workflows.inputs import read_one, refusal
    from hitl.workflows.policy_registry import check_signature, document_pin
    from hitl.workflows.turn import MAX_VERDICTS_KEPT

MAX_CHANGES_KEPT = 50
APPLY_EXAMPLE = (
    '{"document": {...}, "admin": "...", "key_id": "...", "signature": "...", '
    '"expires_at": "...", "reason": "..."}'
)


class Announces(Protocol):
    """The run's events, as far as applying a policy uses them."""

    def announce_decisions(self) -> None:
        """Tell subscribers about decisions just recorded."""
        ...


class Host(Protocol):
    """What applying a policy reads and changes of a run."""

    inp: RunInput
    state: CarriedState
    book: ApprovalBook

    @property
    def events(self) -> Announces:
        """The run's events."""
        ...

    def finished(self) -> bool:
        """The run completed or failed."""
        ...


def install(run: Host) -> Applying:
    """Give the run its `apply_policy` update (handler and validator)."""
    applying = Applying(run)

    async def handler(*args: Any) -> PolicyChange:
        return await applying.apply(args)

    def validator(*args: Any) -> None:
        applying.check(args)

    workflow.set_update_handler(UPDATE_APPLY_POLICY, handler, validator=validator)
    return applying


class Applying:
    """Checks and applies `apply_policy` updates for one run (one at a time)."""

    def __init__(self, run: Host) -> None:
        self.run = run
        self.busy = False
        """An apply is re-evaluating the pending calls: another waits (`PolicyBeingApplied`)."""

    def check(self, args: tuple[Any, ...]) -> tuple[ApplyPolicy, PinnedPolicy]:
        """The update and the pinned form of its document, or a typed refusal."""
        p = read_one(
            args,
            ApplyPolicy,
            what="a policy apply",
            example=APPLY_EXAMPLE,
            max_bytes=MAX_DOCUMENT_BYTES * 2,
            error_type="InvalidApply",
        )
        run, s = self.run, self.run.state
        if run.inp.parent is not None:
            raise refusal("NotRoot", "apply a policy to the root run (nested runs keep theirs)")
        if run.finished() or s.graph is None:
            raise refusal("RunNotActive", "the run has finished (or not started): nothing to apply")
        pinned = document_pin(p.document, "the applied policy")
        check_signature(s.directory or ApproverDirectory(), p, pinned.digest, APPLY_DOMAIN)
        if s.policy is not None and s.policy.digest == pinned.digest:
            raise refusal("AlreadyPinned", f"the run already pins {pinned.name}@{pinned.version}")
        if self.busy:
            raise refusal("PolicyBeingApplied", "another policy is being applied: send again")
        return p, pinned

    async def apply(self, args: tuple[Any, ...]) -> PolicyChange:
        """Re-evaluate the pending calls under the new version, then pin it."""
        p, pinned = self.check(args)  # (again: a replay runs no validator)
        self.busy = True
        try:
            waiting = self.run.book.awaiting()
            verdicts = await self._reevaluate(pinned, waiting) if waiting else []
        finally:
            self.busy = False
        s = self.run.state
        change = PolicyChange(
            admin=p.admin,
            key_id=p.key_id,
            at=workflow.now(),
            reason=p.reason,
            before=_version(s.policy),
            after=_version(pinned) or "",
        )
        for rec, verdict in zip(waiting, verdicts, strict=True):
            change.calls.append(self._change(rec, verdict, change))
        s.policy = pinned
        s.policy_changes = [*s.policy_changes, change][-MAX_CHANGES_KEPT:]
        self.run.events.announce_decisions()
        return change

    async def _reevaluate(
        self, pinned: PinnedPolicy, waiting: list[CallRecord]
    ) -> list[PolicyVerdict]:
        graph = self.run.state.graph
        assert graph is not None
        calls = []
        for rec in waiting:
            agent = graph.agents[rec.agent_id]
            calls.append(
                ReevaluateCall(
                    call_id=rec.model_id,
                    agent=rec.agent_name,
                    tool=rec.tool_name,
                    arguments=rec.arguments,
                    categories=_categories(agent, rec.tool_name),
                )
            )
        inp = ReevaluateInput(policy=pinned, workflow_id=workflow.info().workflow_id, calls=calls)
        try:
            out: ReevaluateOutput = await workflow.execute_activity(
                ACT_REEVALUATE_POLICY,
                inp,
                result_type=ReevaluateOutput,
                start_to_close_timeout=timedelta(seconds=60),
            )
        except ActivityError as err:
            cause = err.cause if isinstance(err.cause, ApplicationError) else None
            raise refusal(
                "ReevaluationFailed",
                f"the new version could not be evaluated: {cause.message if cause else err}",
            ) from None
        return out.verdicts

    def _change(self, rec: CallRecord, verdict: PolicyVerdict, change: PolicyChange) -> CallChange:
        """Apply one call's new verdict; what changed and why."""
        old = rec.policy
        verdict.call_id, verdict.deferred = rec.call_id, old.deferred if old else False
        verdict.reservations = list(old.reservations) if old else []  # kept: released if rejected
        by = f"policy {change.after} applied by {change.admin}"
        base = CallChange(
            call_id=rec.call_id,
            tool_name=rec.tool_name,
            change="unchanged",
            effect=verdict.effect,
            rule=verdict.rule,
            reason="",
        )
        if rec.decision is not None or rec.state != "awaiting_approval":
            base.change, base.reason = "decided", "decided while the new version was read"
            return base
        if verdict.effect == "deny":
            why = f"{by}: rule {verdict.rule} denies it"
            return self._reject(rec, verdict, base, why, change.admin)
        if verdict.effect != "ask":
            base.reason = (
                f"{by}: it does not ask ({verdict.effect or 'no rule'}); "
                "a waiting call is never freed by an apply"
            )
            return base
        narrowed = narrow_approvers(_code_approvers(self.run, rec), verdict.approvers, _dir(self))
        if narrowed is None:
            why = f"{by}: rule {verdict.rule} names {verdict.approvers}; no one is in both lists"
            return self._reject(rec, verdict, base, why, change.admin)
        return self._ask(rec, verdict, base, narrowed, by)

    def _reject(
        self, rec: CallRecord, verdict: PolicyVerdict, base: CallChange, why: str, admin: str
    ) -> CallChange:
        verdict.outcome = "refused"
        self._record_verdict(rec, verdict)
        message = verdict.message or f"The call was not run: {why}."
        decision = PolicyDecision(kind="reject", message=message, reason=why, approver=admin)
        recorded = self.run.book.decide_by(rec, decision, workflow.now())
        recorded.via = "update"  # (an admin's update, not a callback in the workflow)
        base.change, base.reason = "rejected", why
        return base

    def _ask(
        self,
        rec: CallRecord,
        verdict: PolicyVerdict,
        base: CallChange,
        narrowed: list[str],
        by: str,
    ) -> CallChange:
        directory = _dir(self)
        verdict.outcome = "asked"
        self._record_verdict(rec, verdict)
        rec.approvers = narrowed
        rec.required_approvals = max(rec.required_approvals, verdict.required_approvals or 1)
        kept = [a for a in rec.approvals if may_decide(a.approver, narrowed, directory)]
        base.dropped_approvals = [a.approver for a in rec.approvals if a not in kept]
        rec.approvals = kept
        timeout = verdict.approval_timeout_seconds
        if timeout and rec.requested_at is not None:
            due = rec.requested_at + timedelta(seconds=timeout)
            if rec.deadline is None or due < rec.deadline:
                rec.deadline = due
        base.change, base.approvers = "asked", list(narrowed)
        base.required_approvals = rec.required_approvals
        base.reason = f"{by}: rule {verdict.rule} asks {rec.required_approvals} of {narrowed}"
        return base

    def _record_verdict(self, rec: CallRecord, verdict: PolicyVerdict) -> None:
        rec.policy = verdict
        verdicts = self.run.state.verdicts
        verdicts.append(verdict)
        del verdicts[:-MAX_VERDICTS_KEPT]


def _dir(applying: Applying) -> ApproverDirectory | None:
    return applying.run.state.directory


def _code_approvers(run: Host, rec: CallRecord) -> list[str]:
    """Who the code lets decide the call: the tool's list, else the run's.

    A tool whose callable names each call's approvers: the call's list as it is (the callable
    is not asked again; narrowing it further never widens who decides).
    """
    graph = run.state.graph
    assert graph is not None
    tool = graph.agents[rec.agent_id].tool(rec.tool_name)
    if tool is None or tool.approvers_by_call:
        return list(rec.approvers)
    return list(tool.approvers or run.inp.run_config.approvers)


def _categories(agent: AgentSpec, tool_name: str) -> list[str]:
    tool = agent.tool(tool_name)
    return list(tool.categories) if tool is not None else []


def _version(pinned: PinnedPolicy | None) -> str | None:
    if pinned is None:
        return None
    return records.policy_version(
        PolicyVerdict(policy=pinned.name, version=pinned.version, digest=pinned.digest)
    )
