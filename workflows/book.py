"""The approval book: the current turn's calls, every decision, and the standing rules.

Pure and deterministic (no Temporal calls besides raising `ApplicationError`), so it can be
unit-tested without a server and used both by update validators (read-only `check`) and by
handlers (`record`, which mutates synchronously, before any `await`). Its data lives in the
run's state (`CarriedState`: `calls`, `decisions`, `rules`), which continue-as-new carries.

Nested runs (agents used as tools) are read by their parent, which shows their pending
approvals under qualified call ids (`<agent tool call id>/<nested call id>`, recursively) and
hands decisions down. Every decision of the run graph is therefore made, validated and recorded
at the root.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from hitl.limits import MAX_ACTIONS_KEPT
from hitl.rules import may_decide
from hitl.signing import SignatureError, Signed, verify_decision
from hitl.wire import (
    Approval,
    ApproverDirectory,
    CallAction,
    CallRecord,
    CarriedState,
    DecisionInput,
    DecisionKind,
    DecisionRecord,
    DecisionSource,
    DecisionVia,
    ExtendInput,
    Extension,
    PendingApproval,
    PolicyDecision,
    StandingRule,
    text_digest,
)
from hitl.workflows import records
from hitl.workflows.approvers import check_approver
from hitl.workflows.checks import (
    check_deadline,
    check_round,
    check_seen,
    counted,
    decision_problem,
    extend_problem,
    one_of_several,
)
from hitl.workflows.children import ChildView
from hitl.workflows.inputs import refusal

SEP = "/"

WAITING_STATES = ("awaiting_approval", "uncertain", "awaiting_input")
"""Call states in which a person, not the run, moves the call on."""


def _repeated(prior: DecisionRecord, kind: DecisionKind, d: DecisionInput) -> DecisionRecord:
    """A decision for a call already decided: the record when it repeats it (a retry).

    Else a refusal saying what was decided, or that the call expired (no decision repeats an
    expiry: a rejection after it is as late as an approval).
    """
    if prior.kind == "expired":
        raise refusal("DeadlinePassed", prior.expiry_text())
    if prior.answers(kind, d):
        return prior  # a retry: idempotent, answered with what was recorded
    who = prior.approver or prior.source.replace("_", " ")
    what = prior.kind + (" (always)" if prior.always else "")
    raise refusal("AlreadyDecided", f"call '{d.call_id}' already decided: {what} by {who}")


def _approval(
    d: DecisionInput,
    now: datetime,
    via: DecisionVia,
    verified: bool,
    digest: str,
    edit: str | None,
) -> Approval:
    """One approval of several (four eyes), for the arguments with `digest`."""
    assert d.approver  # `check` refuses nameless approvals of such calls
    return Approval(
        approver=d.approver,
        reason=d.reason,
        via=via,
        approved_at=now,
        arguments=edit,
        verified=verified,
        arguments_sha256=digest,
        key_id=d.key_id if verified else None,
    )


class ApprovalBook:
    """Calls of the current turn plus every decision and standing rule of the run."""

    def __init__(self, state: CarriedState, signed_run: bool = False) -> None:
        self.state = state
        if state.always_rules and not state.rules:
            # Rules of older runs named a tool only: they keep applying to any agent's tool of
            # that name, but only to calls anyone may decide (they record no approver).
            state.rules = [
                StandingRule(agent_id="*", tool_name=tool, kind=kind)
                for tool, kind in state.always_rules.items()
            ]
        state.always_rules = {}
        self.calls: dict[str, CallRecord] = {c.call_id: c for c in state.calls}
        self.decisions: dict[str, DecisionRecord] = {d.call_id: d for d in state.decisions}
        self.model_ids: set[str] = {
            # (a hosted MCP server's `mcp_approval_request` is named by its `id`)
            str(i.raw_item.get("call_id", i.raw_item.get("id")))
            for i in state.new_items
            if i.type in ("tool_call_item", "handoff_call_item")
        }
        """Call ids the model used so far (it may not use one twice)."""
        self.past_calls: set[str] = (self.model_ids | set(self.decisions)) - set(self.calls)
        self.children: dict[str, ChildView] = {}
        self.signed_run = signed_run
        """The run takes only signed decisions (`RunConfig(signed_decisions=True)`)."""

    # ----------------------------------------------------------------- turn lifecycle

    def begin_turn(self, records: list[CallRecord]) -> None:
        """Start a turn with these calls."""
        self.past_calls.update(self.calls)
        self.model_ids.update(r.model_id for r in records)
        self.state.calls = records
        self.calls = {r.call_id: r for r in records}

    def end_turn(self) -> None:
        """Close the turn: its calls become past calls, its nested runs are over."""
        self.past_calls.update(self.calls)
        self.state.calls = []
        self.calls = {}
        self.children = {}

    def known(self, call_id: str) -> bool:
        """True when the run has seen this call id."""
        return call_id in self.calls or call_id in self.past_calls

    def model_id_used(self, model_id: str) -> bool:
        """True when the model already used this call id in the run (its outputs would clash)."""
        return model_id in self.model_ids or model_id in self.calls

    def new_call_id(self, turn: int, n: int) -> str:
        """The run's own id for the `n`th call of model turn `turn`: `t<turn>.<n>`.

        Short, and only letters, digits and dots: it fits every update, URL, file name and
        terminal, whatever id the model gave the call (kept as `model_call_id`).
        """
        call_id, again = f"t{turn}.{n}", 1
        while call_id in self.calls or call_id in self.past_calls or call_id in self.model_ids:
            again += 1  # (only runs started before the run named its calls could clash)
            call_id = f"t{turn}.{n}.{again}"
        return call_id

    def signed(self, agent_id: str, tool_name: str) -> bool:
        """Whether decisions on this agent's tool must be signed (the pinned graph, the run)."""
        if self.signed_run:
            return True
        graph = self.state.graph
        agent = graph.agents.get(agent_id) if graph is not None else None
        tool = agent.tool(tool_name) if agent is not None else None
        return tool is not None and tool.signed_decisions

    def add_child(self, call_id: str, workflow_id: str) -> ChildView:
        """Track the nested run started for agent-tool call `call_id`."""
        view = ChildView(call_id=call_id, workflow_id=workflow_id)
        self.children[call_id] = view
        return view

    # ----------------------------------------------------------------- views

    def awaiting(self) -> list[CallRecord]:
        """This run's own calls waiting for a person, in call order."""
        return [c for c in self.calls.values() if c.state == "awaiting_approval"]

    def nested_pending(self) -> list[PendingApproval]:
        """Pending calls of nested runs, under qualified call ids."""
        out = []
        for view in self.children.values():
            for p in view.pending():
                out.append(p.model_copy(update={"call_id": f"{view.call_id}{SEP}{p.call_id}"}))
        return out

    def uncertain(self) -> list[CallRecord]:
        """This run's own calls that ran and wait for a person.

        To settle an uncertain effect (see `UncertainCall`), or to answer the tool's question.
        """
        return [c for c in self.calls.values() if c.state in ("uncertain", "awaiting_input")]

    def has_pending(self) -> bool:
        """True when any call of this run or a nested run waits for a person."""
        return (
            bool(self.awaiting())
            or bool(self.uncertain())
            or any(v.pending() for v in self.children.values())
        )

    def active(self) -> bool:
        """True while some call can progress without a person."""
        for c in self.calls.values():
            if c.output is not None or c.state in WAITING_STATES:
                continue
            view = self.children.get(c.call_id)
            if view is not None and c.state == "running" and view.waiting_for_person():
                continue
            return True
        return False

    def pending(
        self, path: list[str] | None = None, workflow_id: str | None = None
    ) -> list[PendingApproval]:
        """The interruptions: own calls waiting for a person, then nested ones."""
        own = [
            records.pending(c, path, workflow_id, self.signed(c.agent_id, c.tool_name))
            for c in self.calls.values()
            if c.state in WAITING_STATES
        ]
        return own + self.nested_pending()

    def owner(self, call_id: str) -> str | None:
        """Name of the agent whose tool a call (own or nested, by qualified id) belongs to."""
        call = self.calls.get(call_id)
        if call is not None:
            return call.agent_name
        if SEP in call_id:
            head, rest = call_id.split(SEP, 1)
            view = self.children.get(head)
            if view is not None and view.report is not None:
                for p in view.report.pending:
                    if p.call_id == rest:
                        return p.agent_name
        return None

    def target(self, call_id: str) -> tuple[str, str] | None:
        """The agent id and tool name of a pending call (nested ones too), if known."""
        call = self.calls.get(call_id)
        if call is not None:
            return call.agent_id, call.tool_name
        if SEP in call_id:
            head, rest = call_id.split(SEP, 1)
            view = self.children.get(head)
            for p in view.pending() if view is not None else []:
                if p.call_id == rest:
                    return p.agent_id, p.tool_name
        return None

    # ----------------------------------------------------------------- signatures

    def needs_signature(self, call_id: str) -> bool:
        """Whether decisions on `call_id` (own or nested) must be signed."""
        if self.signed_run:
            return True
        target = self.target(call_id)
        if target is None and call_id in self.calls:  # an own call that no longer waits
            call = self.calls[call_id]
            target = (call.agent_id, call.tool_name)
        return target is not None and self.signed(*target)

    def verify(self, kind: str, d: Signed, *, now: datetime, workflow_id: str) -> bool:
        """Check the signature a decision carries, or must carry; whether it was verified.

        A signature is checked against the approver directory pinned into the run at its start
        (keys configured on the worker, never from a payload): its key must belong to the
        decision's approver, and it must cover this run, call and kind, the arguments the
        person saw (`seen_sha256`, which `check` compares with the call), what the decision
        says, and not have expired by the run's clock (`now`). Every kind of decision (approve,
        reject, answer, resolve, extend) on a call of a tool with `signed_decisions`, or of a
        run with `RunConfig(signed_decisions=True)`, must be signed; nested calls are judged by
        their own tool in the pinned graph. Refusals are typed (`Unsigned`, `BadSignature`...).
        """
        if d.signature is None and d.key_id is None:
            if self.needs_signature(d.call_id):
                raise refusal(
                    "Unsigned",
                    f"call '{d.call_id}' takes only signed decisions (hitl keys new; then "
                    "decide with HITL_SIGNING_KEY set, or through the approval console)",
                )
            return False
        try:
            verify_decision(
                self.state.directory or ApproverDirectory(),
                d,
                kind=kind,
                workflow_id=workflow_id,
                now=now,
            )
        except SignatureError as err:
            raise refusal(err.type, err.message) from None
        return True

    # ----------------------------------------------------------------- decisions

    def check(
        self,
        kind: DecisionKind,
        d: DecisionInput,
        now: datetime | None = None,
        *,
        edited: bool = False,
    ) -> DecisionRecord | None:
        """Validate a decision without changing anything.

        Returns the existing record when the same decision was already made (so repeating it is
        idempotent), `None` when the decision is new and acceptable. Raises a typed
        `ApplicationError` when it must be refused: fields out of bounds, unknown call,
        conflicting decision, a call that needs no decision, an approver not on the call's
        list, a passed deadline (`DeadlinePassed`, also for a call that already expired),
        arguments other than the ones the decision says it saw (`ArgumentsChanged`; `edited`:
        the caller checked that before applying the decision's own edit).
        """
        problem = decision_problem(d)
        if problem is not None:
            raise refusal("InvalidDecision", problem)
        prior = self.decisions.get(d.call_id)
        if prior is not None:
            return _repeated(prior, kind, d)
        if SEP in d.call_id:
            return self._check_nested(kind, d, now)
        call = self.calls.get(d.call_id)
        if call is None:
            if d.call_id in self.past_calls:
                raise refusal("NotPending", f"call '{d.call_id}' did not need approval")
            raise refusal("UnknownCall", f"unknown call id '{d.call_id}'")
        if call.state != "awaiting_approval":
            raise refusal(
                "NotPending", f"call '{d.call_id}' is not awaiting approval (it is {call.state})"
            )
        check_approver(d, call.tool_name, call.approvers, self.state.directory)
        if not edited:
            check_seen(d, call.arguments, len(call.edits))
        check_deadline(d, call.deadline, now)
        if kind == "approve" and call.required_approvals > 1:
            return one_of_several(d, call.tool_name, call.required_approvals, call.approvals)
        return None

    def _check_nested(
        self, kind: DecisionKind, d: DecisionInput, now: datetime | None
    ) -> DecisionRecord | None:
        """`check` for a nested run's call, as its last report shows it."""
        view, rest = self._nested_target(d.call_id)
        pending = next(p for p in view.pending() if p.call_id == rest)
        check_approver(d, pending.tool_name, pending.approvers, self.state.directory)
        check_seen(d, pending.arguments)
        check_deadline(d, pending.deadline, now)
        if kind == "approve" and pending.required_approvals > 1:
            return one_of_several(
                d, pending.tool_name, pending.required_approvals, pending.approvals
            )
        return None

    def check_extend(self, d: ExtendInput, now: datetime) -> CallRecord:
        """Validate moving a pending call's deadline later; the call (read-only)."""
        problem = extend_problem(d)
        if problem is not None:
            raise refusal("InvalidDecision", problem)
        if SEP in d.call_id:
            raise refusal(
                "NotSupported",
                f"call '{d.call_id}' belongs to a nested run; its deadline cannot be moved",
            )
        call = self.calls.get(d.call_id)
        if call is None or call.state != "awaiting_approval":
            if d.call_id in self.decisions:
                raise refusal("AlreadyDecided", f"call '{d.call_id}' is already decided")
            raise refusal("UnknownCall", f"no pending call '{d.call_id}'")
        if call.deadline is None:
            raise refusal("NoDeadline", f"call '{d.call_id}' has no deadline: it waits forever")
        check_approver(d, call.tool_name, call.approvers, self.state.directory)
        check_seen(d, call.arguments, len(call.edits))
        check_round(d.call_id, d.round, call.round)
        check_deadline(d, call.deadline, now)
        return call

    def extend(self, d: ExtendInput, now: datetime, *, verified: bool = False) -> Extension:
        """Move a pending call's deadline `d.seconds` later (synchronously, after the check)."""
        call = self.check_extend(d, now)
        assert call.deadline is not None
        ext = Extension(
            approver=d.approver,
            reason=d.reason,
            extended_at=now,
            previous=call.deadline,
            deadline=call.deadline + timedelta(seconds=d.seconds),
            verified=verified,
        )
        call.deadline = ext.deadline
        call.extensions.append(ext)
        call.round += 1
        self.note(records.extended(call, ext))
        return ext

    def note(self, action: CallAction) -> None:
        """Keep a resolution, extension or answer for the audit (the latest `MAX_ACTIONS_KEPT`).

        Kept on the run, not only on the call: a turn's calls are let go when it ends.
        """
        actions = self.state.actions
        actions.append(action)
        del actions[:-MAX_ACTIONS_KEPT]

    def _nested_target(self, call_id: str) -> tuple[ChildView, str]:
        head, rest = call_id.split(SEP, 1)
        view = self.children.get(head)
        if view is None or not any(p.call_id == rest for p in view.pending()):
            raise refusal("UnknownCall", f"unknown call id '{call_id}'")
        return view, rest

    def record(
        self,
        kind: DecisionKind,
        d: DecisionInput,
        *,
        now: datetime,
        source: DecisionSource = "person",
        via: DecisionVia = "update",
        verified: bool = False,
        edited: bool = False,
    ) -> DecisionRecord:
        """Apply a decision that `check` accepted (synchronously; call before any `await`).

        `verified`: the caller checked the decision's signature against the run's directory.
        `edited`: the decision's own edit was just applied (see `check`).
        """
        existing = self.check(kind, d, now, edited=edited)
        if existing is not None:
            return existing
        call = None if SEP in d.call_id else self.calls[d.call_id]
        if call is None:  # a nested run's call, decided here (`check` found it)
            view, rest = self._nested_target(d.call_id)
            target: CallRecord | PendingApproval = next(
                p for p in view.pending() if p.call_id == rest
            )
            given = view.approvals.setdefault(rest, [])
        else:
            target, given = call, call.approvals
        digest = text_digest(target.arguments)
        if kind == "approve" and target.required_approvals > 1:
            # One of several: it counts only while the call keeps these arguments.
            edit = call.arguments if call is not None and d.arguments is not None else None
            given.append(_approval(d, now, via, verified, digest, edit))
            valid = counted(given, digest)
            if len(valid) < target.required_approvals:
                return DecisionRecord.partial(
                    d.call_id, target.tool_name, valid, target.required_approvals
                )
        rec = records.by_person(d.call_id, target.tool_name, kind, d, now, source, via)
        rec.requested_at, rec.escalated_at = target.requested_at, target.escalated_at
        rec.approvals = counted(given, digest) if kind == "approve" else list(given)
        rec.verified, rec.key_id = verified, d.key_id if verified else None
        rec.arguments_sha256 = digest
        if call is not None and call.original_arguments is not None and kind == "approve":
            rec.arguments, rec.original_arguments = call.arguments, call.original_arguments
        if call is None:
            self._store(rec)
            self._mail(view, rest, rec)
        else:
            self._apply(call, rec)
        if d.always:
            rule = StandingRule(
                agent_id=target.agent_id,
                tool_name=rec.tool_name,
                kind=kind,
                approver=d.approver,
                call_id=d.call_id,
            )
            self.add_rule(rule, now)
        return rec

    def _mail(self, view: ChildView, rest: str, rec: DecisionRecord) -> None:
        view.decided[rest] = rec.model_copy(update={"call_id": rest})
        view.seq += 1

    # ----------------------------------------------------------------- standing rules

    def rule_for(self, call: CallRecord) -> StandingRule | None:
        """The newest standing rule that decides `call`, if any.

        It must be about the call's agent's tool and made by someone who may decide the call:
        an approver list is never bypassed by a rule.
        """
        for rule in reversed(self.state.rules):
            if rule.kind == "approve" and call.required_approvals > 1:
                continue  # several people must approve it, each one in person
            if rule.covers(call.agent_id, call.tool_name) and may_decide(
                rule.approver, call.approvers, self.state.directory
            ):
                return rule
        return None

    def ruled_tools(self, agent_id: str, approvers: dict[str, list[str]]) -> list[str]:
        """Tools of `agent_id` whose calls a rule decides (`approvers`: each tool's list)."""
        return sorted(
            tool
            for tool, allowed in approvers.items()
            if any(
                r.covers(agent_id, tool) and may_decide(r.approver, allowed, self.state.directory)
                for r in self.state.rules
            )
        )

    def add_rule(self, rule: StandingRule, now: datetime) -> None:
        """A standing always-approve / always-reject rule, everywhere in the run graph."""
        self.state.rules = [
            r
            for r in self.state.rules
            if (r.agent_id, r.tool_name, r.approver)
            != (rule.agent_id, rule.tool_name, rule.approver)
        ] + [rule]
        # The rule also decides this turn's other waiting calls it covers...
        for other in self.awaiting():
            if self.rule_for(other) is rule:
                self._apply(other, records.by_rule(other, rule, now))
        # ...and travels to every nested run in flight.
        for view in self.children.values():
            view.seq += 1

    def merge_rules(self, rules: list[StandingRule], now: datetime) -> None:
        """Adopt rules a parent hands down (those not known yet)."""
        for rule in rules:
            if rule not in self.state.rules:
                self.add_rule(rule, now)

    def apply_rule(self, call: CallRecord, now: datetime) -> bool:
        """Decide `call` by a standing rule, if one decides it."""
        rule = self.rule_for(call)
        if rule is None:
            return False
        self._apply(call, records.by_rule(call, rule, now))
        return True

    # ----------------------------------------------------------------- other deciders

    def apply_forwarded(self, rec: DecisionRecord) -> str | None:
        """Apply a decision made at the root (in a nested run); the reason if it cannot."""
        if SEP in rec.call_id:
            head, rest = rec.call_id.split(SEP, 1)
            view = self.children.get(head)
            if view is None:
                return f"unknown call id '{rec.call_id}'"
            if rec.call_id in self.decisions:
                return None
            self._store(rec)
            self._mail(view, rest, rec)
            return None
        call = self.calls.get(rec.call_id)
        prior = self.decisions.get(rec.call_id)
        if prior is not None:
            return None if prior.kind == rec.kind else f"already decided: {prior.kind}"
        if call is None or call.state != "awaiting_approval":
            return f"call '{rec.call_id}' is not awaiting approval"
        self._apply(call, rec.model_copy(update={"via": "root"}))
        return None

    def decide_by(self, call: CallRecord, policy: PolicyDecision, now: datetime) -> DecisionRecord:
        """Record an approver callback's decision (source `policy`)."""
        rec = records.by_policy(call, policy, now)
        self._apply(call, rec)
        return rec

    def auto_approve(self, call: CallRecord, now: datetime) -> DecisionRecord:
        """Record a two-key auto-approval (the run's preset and the tool both allow it)."""
        rec = records.auto_approval(call, now)
        self._apply(call, rec)
        return rec

    def expire(self, call: CallRecord, now: datetime, message: str) -> DecisionRecord:
        """Close a call whose approval deadline passed: its own outcome, kind `expired`.

        Like a rejection it runs nothing, and the model sees `message`; unlike one, nobody
        decided it (`source` `deadline`), and no later decision is taken for it.
        """
        rec = records.expiry(call, now, message)
        self._apply(call, rec)
        call.state = "expired"
        return rec

    def _apply(self, call: CallRecord, rec: DecisionRecord) -> None:
        if rec.arguments_sha256 is None:
            rec.arguments_sha256 = text_digest(call.arguments)
        # When it waited and whether it escalated: what insights count (`hitl.insights`).
        rec.requested_at = rec.requested_at or call.requested_at
        rec.escalated_at = rec.escalated_at or call.escalated_at
        rec.policy_rule, rec.policy_version = records.policy_names(call.policy)
        call.decision = rec
        call.state = "approved" if rec.kind == "approve" else "rejected"
        self._store(rec)

    def _store(self, rec: DecisionRecord) -> None:
        if rec.call_id not in self.decisions:
            self.state.decisions.append(rec)
        self.decisions[rec.call_id] = rec

    def all_decisions(self) -> list[DecisionRecord]:
        """Every decision of the run, in the order they were made."""
        return list(self.state.decisions)
