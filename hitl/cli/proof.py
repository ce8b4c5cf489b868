"""The decision proof behind `hitl verify`: pure, no I/O, no clock, no Temporal client.

Given one call's pinned rules (its tool and the run's configuration as the run pinned them, the
call's plan), the approver directory, the run's workflow id, the time the call started waiting
and every candidate decision about it in history order (each with the run's clock when it
arrived), a `CallProof` says whether the call had, when it executed, the decisions its rules
required: enough distinct authorized approvers, valid signatures where the rules require them,
for exactly the arguments that ran, before the deadline. It re-derives everything: what the run
recorded as decided (its `DecisionRecord`s) is never read.

The rules are the run's own, from `hitl.rules`, which the run applies too: who may decide, who
joins on escalation, when an approver callback's answer decides, how many approvals a call
needs. What a proof takes and gives (`CallRules`, `Candidate`, `Counted`, `Verdict`) is in
`hitl.cli.verify_terms`. Both are importable from here too.
`tests/unit/test_decision_core_properties.py` drives this proof and the run's approval book with
the same random decisions.

A refusal the run reports (an update that failed) never counts; an acceptance is never taken
on trust: each candidate is checked here as the run should have checked it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Literal

from hitl.cli.verify_terms import CallRules, Candidate, Counted, How, Verdict
from hitl.cli.verify_terms import CandidateKind as CandidateKind  # also here, for tests
from hitl.cli.verify_terms import Via as Via  # also here, for tests
from hitl.limits import (
    MAX_APPROVER_CHARS,
    MAX_CALL_ID_CHARS,
    MAX_EXTEND_SECONDS,
    MAX_TEXT_CHARS,
    text_problem,
)
from hitl.rules import (
    call_approvers,
    escalation_targets,
    may_decide,
    narrow_approvers,
    needs_person,
    policy_may_decide,
    required_approvals,
    signatures_required,
)
from hitl.schema import schema_problem
from hitl.signing import SignatureError, verify_decision
from hitl.wire import (
    AnswerInput,
    ApproverDirectory,
    DecisionInput,
    ExtendInput,
    ResolveInput,
    StandingRule,
    canonical_arguments,
    text_digest,
)

State = Literal["pending", "approved", "rejected", "expired"]


# ----------------------------------------------------------------------------- the proof


def _who(d: DecisionInput | ExtendInput | ResolveInput | AnswerInput) -> str:
    return d.approver or "someone unnamed"


class CallProof:
    """One call's decisions, re-derived as candidates arrive (feed them in history order).

    Created when the call was planned (`requested_at`: the run's clock then), with the
    standing rules that were valid at that moment. `keys` is the directory signatures are
    checked against (the pinned one, or an operator's file); `directory` the pinned one, for
    groups.
    """

    def __init__(
        self,
        rules: CallRules,
        *,
        call_id: str,
        workflow_id: str,
        arguments: str,
        requested_at: datetime,
        directory: ApproverDirectory | None,
        keys: ApproverDirectory | None = None,
        standing: Iterable[StandingRule] = (),
        rule_directory: ApproverDirectory | Literal["same"] | None = "same",
    ) -> None:
        self.rules = rules
        self.call_id = call_id
        self.workflow_id = workflow_id
        self.directory = directory
        self.keys = keys if keys is not None else (directory or ApproverDirectory())
        self.rule_directory = directory if rule_directory == "same" else rule_directory
        tool, cfg, plan = rules.tool, rules.config, rules.plan
        self.arguments = arguments
        self.requested_at = requested_at
        self.approvers = call_approvers(tool, plan, cfg)
        verdict = plan.verdict if plan is not None else None
        narrowed: list[str] | None = self.approvers
        if verdict is not None and verdict.effect == "ask":  # as the run narrowed them
            narrowed = narrow_approvers(self.approvers, verdict.approvers, directory)
            self.approvers = narrowed or self.approvers
        self.required = required_approvals(tool, plan)
        self.signed = signatures_required(tool, cfg)
        self.state: State = "pending"
        self.how: How | None = None
        self.decided_at: datetime | None = None
        self.decider: str = ""
        self.approvals: list[tuple[str, str, Counted]] = []
        """(approver, digest of the arguments approved, the decision)."""
        self.person: list[Counted] = []
        """The decision(s) that decided the call (a person's, or the rule's maker)."""
        self.round = 0
        self.deadline: datetime | None = None
        self.escalate_at: datetime | None = None
        self.escalated = False
        self.notes: list[str] = []
        self.new_rules: list[StandingRule] = []
        """Standing rules this call's valid decisions made (the caller spreads them)."""
        self.reruns = 0
        """Valid `resolve` (retry) and `answer` decisions: each allows the tool to run again."""
        self.problem: str | None = None
        """Why the call must not have run whatever was decided (a refused or missing plan)."""
        self._open(standing)
        if narrowed is None:
            self.problem = "the policy's approvers and the tool's have no one in common"

    # --------------------------------------------------------------- when it is planned

    def _open(self, standing: Iterable[StandingRule]) -> None:
        """Decide what the run decides as it plans the call, before any person can answer.

        In the run's own order: a refused plan, or none where a predicate decides, means it
        must not run; a call that needs no person is approved; else a standing rule, an
        approver callback's answer or two-key auto-approval decides it; else it waits for
        people (until its deadline, escalating on the way).
        """
        tool, plan = self.rules.tool, self.rules.plan
        needs = needs_person(tool, plan)
        if plan is not None and (plan.refusal is not None or plan.tripwire is not None):
            self.problem = "its plan refused the call (it must not run)"
            return
        if needs is None:
            self.problem = (
                f"no plan was recorded for it, and {tool.name}'s approval is decided by a predicate"
            )
            return
        at = self.requested_at
        if not needs:
            mode = "never" if tool.approval == "never" else "predicate: not needed"
            self._decide("approved", "not_needed", at, f"no approval needed ({mode})")
            return
        rule = self._rule_for(standing)
        if rule is not None:
            self._by_rule(rule, at)
            return
        if self._by_policy():
            return
        if self.rules.config.auto_approve and tool.auto_approve and not self.required > 1:
            self._decide("approved", "auto_approval", at, "two-key auto-approval")
            return
        self._wait()

    def _by_policy(self) -> bool:
        """Let the plan's approver callback answer decide, where the rules allow; whether it did.

        An answer from a callback the pinned rules do not have is noted, not counted.
        """
        tool, cfg, plan = self.rules.tool, self.rules.config, self.rules.plan
        policy = plan.policy if plan is not None else None
        if policy is None or not policy_may_decide(tool, policy, self.required > 1):
            return False
        if policy.run_level and not cfg.approver:
            self.notes.append("a run-level approver answered, but the run names none")
        elif not policy.run_level and not tool.approver and not cfg.approver:
            self.notes.append("an approver callback answered, but the tool has none")
        else:
            state: State = "approved" if policy.kind == "approve" else "rejected"
            self._decide(state, "policy", self.requested_at, f"approver callback {policy.approver}")
            return True
        return False

    def _wait(self) -> None:
        """The call waits for people: set its deadline and escalation time, as the run's timers."""
        tool, cfg = self.rules.tool, self.rules.config
        timeout = tool.approval_timeout_seconds or cfg.approval_timeout_seconds
        if timeout:
            self.deadline = self.requested_at + timedelta(seconds=timeout)
        escalate = tool.escalate_after_seconds or cfg.escalate_after_seconds
        if escalate:
            self.escalate_at = self.requested_at + timedelta(seconds=escalate)

    # --------------------------------------------------------------- reading

    @property
    def digest(self) -> str:
        """SHA-256 of the arguments the call holds now, as decisions name them."""
        return text_digest(self.arguments)

    def counted(self) -> list[Counted]:
        """Approvals that count for the arguments the call holds now (one per person)."""
        digest, seen, out = self.digest, set(), []
        for approver, given, decision in self.approvals:
            if given == digest and approver not in seen:
                seen.add(approver)
                out.append(decision)
        return out

    def reapplied(self, approvers: list[str], required: int | None) -> None:
        """An admin's verified `apply_policy` re-asked the waiting call.

        Its new approvers and count; approvals from people it no longer admits stop counting.
        """
        self.approvers = list(approvers)
        self.required = max(self.required, required or 1)
        self.approvals = [
            a for a in self.approvals if may_decide(a[0], self.approvers, self.directory)
        ]

    def rejected_by_policy(self, at: datetime, admin: str) -> None:
        """An admin's verified `apply_policy` rejected the waiting call: it must not run."""
        if self.state == "pending":
            self._decide("rejected", "policy", at, f"the policy {admin} applied")

    # --------------------------------------------------------------- feeding

    def feed(self, c: Candidate) -> None:
        """Take the next candidate (in history order)."""
        if self.problem is not None:
            return
        if c.kind in ("resolve", "answer"):
            self._rerun(c)
            return
        expired = self.state == "pending" and self.advance(c.at)
        if self.state != "pending":
            if c.kind != "rule" and expired and self.deadline is not None:
                self._refused(c, f"it came after the deadline {self.deadline.isoformat()}")
            elif c.kind != "rule":
                self._refused(c, f"the call was already {self.state}")
            return
        if isinstance(c.payload, StandingRule):
            if c.kind == "rule" and self._rule_applies(c.payload):
                self._by_rule(c.payload, c.at)
            return
        if c.refused:
            self._refused(c, "the run refused it")
            return
        if isinstance(c.payload, ExtendInput):
            self._extend(c, c.payload)
        elif isinstance(c.payload, DecisionInput) and c.kind in ("approve", "reject"):
            self._decision(c, c.payload)

    def advance(self, now: datetime) -> bool:
        """Let the run's clock reach `now`; whether the call expired.

        The call escalates, then expires, when due (as the run's timers do).
        """
        if self.state != "pending":
            return False
        if self.escalate_at is not None and not self.escalated and now >= self.escalate_at:
            self.escalated = True
            if self.approvers:  # an empty list lets anyone decide already
                targets = escalation_targets(self.rules.tool, self.rules.config)
                self.approvers += [a for a in targets if a not in self.approvers]
        if self.deadline is not None and now > self.deadline:
            self._decide("expired", None, self.deadline, "its deadline")
            return True
        return False

    def _refused(self, c: Candidate, why: str) -> None:
        if isinstance(c.payload, StandingRule):
            return
        what = (
            c.kind if c.kind != "approve" or not getattr(c.payload, "arguments", None) else "edit"
        )
        self.notes.append(f"{_who(c.payload)}'s {what} ({c.where or c.via}) did not count: {why}")

    def _rule_for(self, standing: Iterable[StandingRule]) -> StandingRule | None:
        for rule in reversed(list(standing)):
            if self._rule_applies(rule):
                return rule
        return None

    def _rule_applies(self, rule: StandingRule) -> bool:
        if rule.kind == "approve" and self.required > 1:
            return False  # several people must approve, each one in person
        return rule.covers(self.rules.agent_id, self.rules.tool.name) and may_decide(
            rule.approver, self.approvers, self.rule_directory
        )

    def _by_rule(self, rule: StandingRule, at: datetime) -> None:
        state: State = "approved" if rule.kind == "approve" else "rejected"
        source = f"call {rule.call_id}" if rule.call_id else "an earlier call"
        self._decide(state, "always_rule", at, f"always_{rule.kind} by {rule.approver} ({source})")

    def _decide(self, state: State, how: How | None, at: datetime, by: str) -> None:
        self.state, self.how, self.decided_at, self.decider = state, how, at, by

    # --------------------------------------------------------------- checks

    def _problem(self, c: Candidate, d: DecisionInput | ExtendInput) -> str | None:
        """Why a person's decision cannot count (bounds, who, what they saw, signature)."""
        if not d.call_id:
            return "it names no call"
        problem = (
            text_problem("call_id", d.call_id, MAX_CALL_ID_CHARS)
            or text_problem("reason", d.reason, MAX_TEXT_CHARS)
            or text_problem("approver", d.approver, MAX_APPROVER_CHARS)
        )
        if isinstance(d, DecisionInput):
            problem = problem or text_problem("message", d.message, MAX_TEXT_CHARS)
        if problem is not None:
            return problem
        if not may_decide(d.approver, self.approvers, self.directory):
            allowed = ", ".join(self.approvers)
            return f"{_who(d)} may not decide {self.rules.tool.name} calls (allowed: {allowed})"
        if d.seen_sha256 is not None and d.seen_sha256 != self.digest:
            return "it was made on other arguments than the call held then"
        return None

    def _signature(self, c: Candidate, d: DecisionInput | ExtendInput) -> tuple[bool, str | None]:
        """Whether a decision is verified, and why it cannot count (`None`: it can).

        A signature is checked whenever it is required or given.
        """
        if d.signature is None and d.key_id is None:
            if self.signed:
                return False, "it is unsigned and the rules require signed decisions"
            return False, None
        try:
            verify_decision(self.keys, d, kind=c.kind, workflow_id=self.workflow_id, now=c.at)
        except SignatureError as err:
            return False, f"its signature does not hold ({err.type}: {err.message})"
        return True, None

    def _extend(self, c: Candidate, d: ExtendInput) -> None:
        if self.rules.nested:
            return self._refused(c, "a nested call's deadline cannot be moved")
        if not 0 < d.seconds <= MAX_EXTEND_SECONDS:
            return self._refused(c, "its length is out of bounds")
        if self.deadline is None:
            return self._refused(c, "the call has no deadline")
        problem = self._problem(c, d)
        if problem is None and d.round is not None and d.round != self.round:
            problem = f"it was made for round {d.round} of the call, not {self.round}"
        if problem is not None:
            return self._refused(c, problem)
        _, why = self._signature(c, d)
        if why is not None:
            return self._refused(c, why)
        self.deadline += timedelta(seconds=d.seconds)
        self.round += 1

    def _decision(self, c: Candidate, d: DecisionInput) -> None:
        kind = c.kind
        edit = d.arguments is not None
        problem = self._problem(c, d)
        several = kind == "approve" and self.required > 1
        if problem is None and several:
            if not d.approver:
                problem = f"the call needs {self.required} different, named approvers"
            elif d.always:
                problem = "a call that needs several approvers takes no standing rule"
            elif any(a == d.approver for a, _, _ in self.approvals):
                problem = f"{d.approver} had already approved these arguments"
        if problem is None and edit:
            problem = self._edit_problem(c, d)
        if problem is not None:
            return self._refused(c, problem)
        verified, why = self._signature(c, d)
        if why is not None:
            return self._refused(c, why)
        decision = Counted(
            approver=d.approver,
            verified=verified,
            key_id=d.key_id if verified else None,
            at=c.at,
            where=c.where,
            via=c.via,
        )
        if kind == "reject":
            self.person = [decision]
            self._decide("rejected", "person", c.at, f"{_who(d)}'s rejection")
            self._rule_from(d, "reject")
            return
        if edit and not self._apply_edit(c, d):
            return  # the edit took the call out of this approver's reach: nothing approved
        if self.required > 1:
            assert d.approver
            if any(a == d.approver for a, _, _ in self.approvals):
                return self._refused(c, f"{d.approver} had already approved these arguments")
            self.approvals.append((d.approver, self.digest, decision))
            valid = self.counted()
            if len(valid) < self.required:
                return
            self.person = valid
        else:
            self.person = [decision]
        self._decide("approved", "person", c.at, f"{_who(d)}'s approval")
        self._rule_from(d, "approve")

    def _edit_problem(self, c: Candidate, d: DecisionInput) -> str | None:
        assert d.arguments is not None
        tool = self.rules.tool
        if c.kind != "approve" or c.via != "update":
            return "edited arguments go with the approve update, alone"
        if self.rules.nested or tool.kind == "agent":
            return "this call's arguments cannot be edited"
        if not tool.allow_edits:
            return f"{tool.name} calls cannot be edited"
        text = canonical_arguments(d.arguments)
        if len(text.encode("utf-8")) > self.rules.config.max_tool_argument_bytes:
            return "the edited arguments are too large"
        problem = schema_problem(d.arguments, tool.params_json_schema)
        if problem is not None:
            return f"the edited arguments do not fit {tool.name}: {problem}"
        plan = c.plan
        if plan is None:
            return "no plan of the edited arguments was recorded"
        if plan.refusal is not None or plan.tripwire is not None:
            return f"{tool.name} refused the edited arguments"
        return None

    def _apply_edit(self, c: Candidate, d: DecisionInput) -> bool:
        """Switch the call to the edit; whether the editor may still approve it."""
        assert d.arguments is not None and c.plan is not None
        tool, cfg, plan = self.rules.tool, self.rules.config, c.plan
        needs = plan.needs_approval or tool.approval == "always"
        self.required = max(tool.required_approvals, plan.required_approvals or 1) if needs else 1
        if plan.approvers is not None:
            self.approvers = list(plan.approvers or cfg.approvers)
        text = canonical_arguments(d.arguments)
        if text != self.arguments:
            for approver, _, _ in self.approvals:
                self.notes.append(f"{approver}'s approval was for earlier arguments")
            self.arguments = text
            self.approvals = []  # an approval counts only for the arguments it approved
        if not may_decide(d.approver, self.approvers, self.directory):
            self.notes.append(f"{_who(d)}'s edit moved the call out of their reach")
            return False
        return True

    def _rule_from(self, d: DecisionInput, kind: Literal["approve", "reject"]) -> None:
        if d.always:
            self.new_rules.append(
                StandingRule(
                    agent_id=self.rules.agent_id,
                    tool_name=self.rules.tool.name,
                    kind=kind,
                    approver=d.approver,
                    call_id=self.call_id,
                )
            )

    def _rerun(self, c: Candidate) -> None:
        d = c.payload
        if c.refused or not isinstance(d, ResolveInput | AnswerInput):
            return
        if isinstance(d, ResolveInput) and d.outcome != "retry":
            return
        if not may_decide(d.approver, self.approvers, self.directory):
            return self._refused(c, f"{_who(d)} may not decide it")
        if d.seen_sha256 is not None and d.seen_sha256 != self.digest:
            return self._refused(c, "it was made on other arguments than the call held then")
        if self.signed or d.signature is not None or d.key_id is not None:
            try:
                wid = c.workflow_id or self.workflow_id
                verify_decision(self.keys, d, workflow_id=wid, now=c.at)
            except SignatureError as err:
                return self._refused(c, f"its signature does not hold ({err.type})")
        self.reruns += 1

    # --------------------------------------------------------------- the verdict

    def verdict(self, executed: str, *, again: bool = False) -> Verdict:
        """Whether the call may have run with arguments `executed` (now, in history order).

        `again`: the tool ran for this call before; a person must have allowed it to run
        again (a `resolve` with `retry`, or an `answer` to the tool's question).
        """
        tool = self.rules.tool.name
        digest = text_digest(executed)
        base = Verdict(
            ok=False,
            reason="",
            how=self.how,
            required=self.required,
            arguments_sha256=digest,
            requested_at=self.requested_at,
            deadline=self.deadline,
        )
        base.notes = list(self.notes)
        if self.problem is not None:
            base.reason = self.problem
            return base
        if self.state == "rejected":
            base.reason = f"{self.decider} came before the approvals it needed"
            return base
        if self.state == "expired":
            base.reason = f"it expired at {self.decided_at.isoformat() if self.decided_at else ''}"
            base.reason += f" with {len(self.counted())} of {self.required} approval(s)"
            return base
        if self.state == "pending":
            n = len(self.counted())
            base.reason = (
                f"only {n} valid approval(s) of {self.required} for the arguments that ran"
                if n
                else f"no valid approval for the arguments that ran ({tool} needs a person)"
            )
            base.approvals = self.counted()
            return base
        if executed != self.arguments:
            base.reason = (
                "the arguments that ran are not the ones approved "
                f"(approved sha256:{self.digest[:12]}, ran sha256:{digest[:12]})"
            )
            return base
        if again:
            if self.reruns <= 0:
                base.reason = "it ran again without a person's resolve (retry) or answer"
                return base
            self.reruns -= 1
        base.ok = True
        base.approvals = list(self.person)
        base.reason = self.decider
        return base


def prove_call(
    rules: CallRules,
    directory: ApproverDirectory | None,
    workflow_id: str,
    candidates: Iterable[Candidate],
    requested_at: datetime,
    arguments: str,
    executed: str,
    *,
    call_id: str = "",
    keys: ApproverDirectory | None = None,
    standing: Iterable[StandingRule] = (),
) -> Verdict:
    """The verdict on one call.

    From its rules, the directory, the run, every candidate decision in history order, when it
    started waiting, the model's arguments and the arguments that ran.
    """
    proof = CallProof(
        rules,
        call_id=call_id,
        workflow_id=workflow_id,
        arguments=arguments,
        requested_at=requested_at,
        directory=directory,
        keys=keys,
        standing=standing,
    )
    for c in candidates:
        proof.feed(c)
    return proof.verdict(executed)
