"""`hitl verify`'s decision proof (`hitl.cli.proof`), without a server.

The proof judges by the run's own rules (`hitl.rules`, which the run, the proof and the console
share): the rules first, then each way a call may be decided, and each way a decision may fail
to count.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hitl import rules as R  # the rules, shared by the run, the proof and the console
from hitl.cli import proof
from hitl.cli.proof import CallRules, Candidate, Verdict, prove_call
from hitl.console.rules import Rules
from hitl.signing import key_id_for, new_key_pair, sign_input
from hitl.wire import (
    ApproverDirectory,
    ApproverEntry,
    CallPlan,
    DecisionInput,
    ExtendInput,
    PolicyDecision,
    ResolveInput,
    RunConfigSpec,
    StandingRule,
    ToolSpec,
    text_digest,
)
from hitl.workflows import approvers as run_approvers
from hitl.workflows import book as run_book
from hitl.workflows import decisions as run_decisions
from hitl.workflows import turn as run_turn

T0 = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)
WID = "proof-run"
ARGS = '{"amount": 500}'
KEYS = {name: new_key_pair() for name in ("ann", "bob")}
IDS = {name: key_id_for(public) for name, (_, public) in KEYS.items()}
DIRECTORY = ApproverDirectory(
    approvers={
        "ann": ApproverEntry(groups=["finance"], keys={IDS["ann"]: KEYS["ann"][1]}),
        "bob": ApproverEntry(groups=["finance"], keys={IDS["bob"]: KEYS["bob"][1]}),
        "dan": ApproverEntry(groups=["leads"]),
    }
)


def tool(**kw: Any) -> ToolSpec:
    return ToolSpec(**{"name": "refund", "approval": "always", **kw})


def rules(t: ToolSpec | None = None, plan: CallPlan | None = None, **cfg: Any) -> CallRules:
    return CallRules(tool=t or tool(), agent_id="desk", config=RunConfigSpec(**cfg), plan=plan)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def approve(who: str | None, minutes: float = 1, **kw: Any) -> Candidate:
    d = DecisionInput(call_id="t1.1", approver=who, **kw)
    return Candidate(at=at(minutes), kind="approve", payload=d, where=f"{who} at {minutes}")


def signed(who: str, minutes: float = 1, kind: str = "approve", **kw: Any) -> Candidate:
    d = DecisionInput(call_id="t1.1", approver=who, seen_sha256=text_digest(ARGS), **kw)
    d = sign_input(
        d, kind=kind, workflow_id=WID, key_id=IDS[who], key=KEYS[who][0], now=at(minutes)
    )
    return Candidate(at=at(minutes), kind=kind, payload=d)  # type: ignore[arg-type]


def verdict(r: CallRules, *candidates: Candidate, ran: str = ARGS, **kw: Any) -> Verdict:
    return prove_call(r, DIRECTORY, WID, candidates, T0, ARGS, ran, call_id="t1.1", **kw)


# ----------------------------------------------------------------------------- the rules


def test_the_run_the_proof_and_the_console_share_one_statement_of_the_rules() -> None:
    # One function each, not restatements that could drift apart.
    assert proof.may_decide is R.may_decide
    assert run_approvers.may_decide is R.may_decide
    assert run_book.may_decide is R.may_decide
    assert run_decisions.escalation_targets is proof.escalation_targets is R.escalation_targets
    assert run_turn.policy_may_decide is proof.policy_may_decide is R.policy_may_decide
    assert run_turn.call_approvers is proof.call_approvers is R.call_approvers
    assert run_turn.required_approvals is proof.required_approvals is R.required_approvals
    console = Rules.of(DIRECTORY)
    for who, allowed in itertools.product(
        ["ann", "bob", "dan", "eve"], [[], ["ann"], ["group:finance"], ["group:leads", "bob"]]
    ):
        assert console.may_decide(who, allowed) == R.may_decide(who, allowed, DIRECTORY)


def test_who_may_decide() -> None:
    assert R.may_decide(None, [])  # an empty list: anyone
    assert not R.may_decide(None, ["ann"])
    assert R.may_decide("ann", ["ann"])
    assert not R.may_decide("bob", ["ann"])
    assert R.may_decide("ann", ["group:finance"], DIRECTORY)
    assert not R.may_decide("ann", ["group:finance"])  # no directory: no groups
    assert not R.may_decide("dan", ["group:finance"], DIRECTORY)


def test_a_run_narrows_who_decides_and_never_widens_it() -> None:
    plain, listed, by_call = tool(), tool(approvers=["ann"]), tool(approvers_by_call=True)
    own = tool(approvers=["ann"], escalate_to=["group:leads"])
    widen = RunConfigSpec(escalate_to=["eve"], approvers=["eve"])
    assert R.escalation_targets(plain, widen) == ["eve"]
    assert R.escalation_targets(listed, widen) == []
    assert R.escalation_targets(by_call, widen) == []
    assert R.escalation_targets(own, widen) == ["group:leads"]
    assert R.call_approvers(plain, None, widen) == ["eve"]
    assert R.call_approvers(listed, None, widen) == ["ann"]
    plan = CallPlan(call_id="m", needs_approval=True, approvers=["bob"], required_approvals=2)
    assert R.call_approvers(listed, plan, widen) == ["bob"]
    assert R.required_approvals(tool(required_approvals=3), plan) == 3
    assert R.required_approvals(tool(), plan) == 2
    assert R.required_approvals(tool(), None) == 1


def test_when_an_approver_callbacks_answer_decides() -> None:
    by_tool = PolicyDecision(kind="approve", approver="cb")
    by_run = PolicyDecision(kind="approve", approver="run", run_level=True)
    no = PolicyDecision(kind="reject", approver="run", run_level=True)
    plain, listed = tool(), tool(approvers=["ann"])
    assert not R.policy_may_decide(plain, None, several=False)
    assert R.policy_may_decide(listed, by_tool, several=False)
    assert not R.policy_may_decide(listed, by_tool, several=True)  # four eyes needs people
    assert R.policy_may_decide(plain, by_run, several=False)
    assert not R.policy_may_decide(listed, by_run, several=False)  # the run may not widen
    assert R.policy_may_decide(listed, no, several=True)  # a rejection always decides


# ----------------------------------------------------------------------------- deciders


def test_a_call_that_needs_no_person_is_proven_by_its_rule() -> None:
    v = verdict(rules(tool(approval="never")))
    assert (v.ok, v.how) == (True, "not_needed")
    plan = CallPlan(call_id="m", needs_approval=False)
    assert verdict(rules(tool(approval="predicate"), plan)).ok
    missing = verdict(rules(tool(approval="predicate")))
    assert not missing.ok and "no plan was recorded" in missing.reason
    assert not verdict(rules(tool(approval="never")), ran='{"amount": 9}').ok


def test_an_approver_callback_decides_only_where_the_rules_let_it() -> None:
    yes = CallPlan(
        call_id="m", needs_approval=True, policy=PolicyDecision(kind="approve", approver="cb")
    )
    assert verdict(rules(tool(approver=True), yes)).how == "policy"
    assert not verdict(rules(tool(approver=True, required_approvals=2), yes)).ok, "four eyes"
    assert not verdict(rules(tool(), yes)).ok, "no callback on the tool or the run"
    run_level = yes.model_copy(
        update={"policy": PolicyDecision(kind="approve", approver="r", run_level=True)}
    )
    assert verdict(rules(tool(), run_level, approver="mod:fn")).ok
    assert not verdict(rules(tool(approvers=["ann"]), run_level, approver="mod:fn")).ok


def test_auto_approval_needs_both_keys_and_one_approver() -> None:
    assert verdict(rules(tool(auto_approve=True), auto_approve=True)).how == "auto_approval"
    assert not verdict(rules(tool(auto_approve=True))).ok
    assert not verdict(rules(tool(), auto_approve=True)).ok
    assert not verdict(rules(tool(auto_approve=True, required_approvals=2), auto_approve=True)).ok


def test_a_standing_rule_decides_only_what_its_maker_may() -> None:
    mine = StandingRule(agent_id="desk", tool_name="refund", kind="approve", approver="ann")
    r = rules(tool(approvers=["group:finance"]))
    assert verdict(r, standing=[mine]).how == "always_rule"
    other_agent = mine.model_copy(update={"agent_id": "intern"})
    assert not verdict(r, standing=[other_agent]).ok
    by_dan = mine.model_copy(update={"approver": "dan"})
    assert not verdict(r, standing=[by_dan]).ok
    assert not verdict(rules(tool(required_approvals=2)), standing=[mine]).ok
    # The newest rule that applies wins: a later always-reject.
    reject = mine.model_copy(update={"kind": "reject", "approver": "bob"})
    assert not verdict(r, standing=[mine, reject]).ok
    # A rule made while the call waits decides it too.
    later = Candidate(at=at(5), kind="rule", payload=mine)
    assert verdict(r, later).how == "always_rule"


# ----------------------------------------------------------------------------- people


def test_a_person_approves_for_what_they_saw() -> None:
    v = verdict(rules(), approve("ann", seen_sha256=text_digest(ARGS)))
    assert (v.ok, v.how, [a.approver for a in v.approvals]) == (True, "person", ["ann"])
    stale = verdict(rules(), approve("ann", seen_sha256=text_digest("{}")))
    assert not stale.ok and "other arguments" in " ".join(stale.notes)
    assert not verdict(rules(), approve("ann"), ran='{"amount": 501}').ok


def test_only_listed_approvers_count_and_escalation_adds_people_later() -> None:
    t = tool(approvers=["group:finance"], escalate_after_seconds=3600, escalate_to=["dan"])
    assert not verdict(rules(t), approve("eve")).ok
    early = verdict(rules(t), approve("dan", minutes=30))
    assert not early.ok and "may not decide" in " ".join(early.notes)
    assert verdict(rules(t), approve("dan", minutes=61)).ok


def test_four_eyes_needs_two_people_for_the_same_arguments() -> None:
    r = rules(tool(required_approvals=2))
    assert not verdict(r, approve("ann"), approve("ann", minutes=2)).ok
    assert verdict(r, approve("ann"), approve("bob", minutes=2)).ok
    assert not verdict(r, approve(None), approve("bob", minutes=2)).ok, "named approvers"
    edit = Candidate(
        at=at(3),
        kind="approve",
        payload=DecisionInput(call_id="t1.1", approver="bob", arguments={"amount": 400}),
        plan=CallPlan(call_id="m", needs_approval=True),
    )
    edited = '{"amount":400}'
    v = verdict(r, approve("ann"), edit, ran=edited)
    assert v.reason == "only 1 valid approval(s) of 2 for the arguments that ran"
    assert "ann's approval was for earlier arguments" in v.notes
    again = approve("ann", minutes=4, seen_sha256=text_digest(edited))
    v = verdict(r, approve("ann"), edit, again, ran=edited)
    assert v.ok and [a.approver for a in v.approvals] == ["bob", "ann"]
    assert not verdict(r, approve("ann"), edit, again, ran=ARGS).ok, "the model's arguments"


def test_a_rejection_before_the_approvals_means_it_must_not_run() -> None:
    r = rules(tool(required_approvals=2))
    reject = Candidate(at=at(2), kind="reject", payload=DecisionInput(call_id="t1.1"))
    v = verdict(r, approve("ann"), reject, approve("bob", minutes=3))
    assert not v.ok and "rejection came before" in v.reason


def test_refused_updates_and_edits_by_signal_never_count() -> None:
    refused = Candidate(
        at=at(1), kind="approve", payload=DecisionInput(call_id="t1.1"), refused=True
    )
    assert not verdict(rules(), refused).ok
    by_signal = Candidate(
        at=at(1),
        kind="approve",
        via="signal",
        payload=DecisionInput(call_id="t1.1", arguments={"amount": 1}),
        plan=CallPlan(call_id="m", needs_approval=True),
    )
    assert not verdict(rules(), by_signal, ran='{"amount":1}').ok


# ----------------------------------------------------------------------------- signatures


def test_signed_rules_take_only_valid_signatures() -> None:
    for r in (rules(tool(signed_decisions=True)), rules(signed_decisions=True)):
        v = verdict(r, signed("ann"))
        assert v.ok and v.approvals[0].verified and v.approvals[0].key_id == IDS["ann"]
        unsigned = verdict(r, approve("ann", seen_sha256=text_digest(ARGS)))
        assert not unsigned.ok and "unsigned" in " ".join(unsigned.notes)
    r = rules(tool(signed_decisions=True))
    late = signed("ann", minutes=1)
    late = Candidate(at=at(120), kind="approve", payload=late.payload)  # signed for an hour
    assert "SignatureExpired" in " ".join(verdict(r, late).notes)
    as_reject = Candidate(at=at(1), kind="reject", payload=signed("ann").payload)
    assert not verdict(r, as_reject).ok
    forged = signed("bob").payload.model_copy(update={"approver": "ann"})  # type: ignore[union-attr]
    assert not verdict(r, Candidate(at=at(1), kind="approve", payload=forged)).ok
    # Another directory (an operator's file) without ann's key cannot check hers.
    theirs = ApproverDirectory(approvers={"bob": DIRECTORY.approvers["bob"]})
    assert "UnknownKey" in " ".join(verdict(r, signed("ann"), keys=theirs).notes)


# ----------------------------------------------------------------------------- deadlines


def test_a_deadline_is_met_or_moved_by_a_valid_extension() -> None:
    r = rules(tool(approval_timeout_seconds=3600))
    assert verdict(r, approve("ann", minutes=59)).ok
    v = verdict(r, approve("ann", minutes=61))
    assert not v.ok and v.reason.startswith("it expired at")
    extend = Candidate(
        at=at(30),
        kind="extend",
        payload=ExtendInput(call_id="t1.1", seconds=1800, approver="ann", round=0),
    )
    assert verdict(r, extend, approve("ann", minutes=61)).ok
    stale_round = Candidate(
        at=at(30), kind="extend", payload=extend.payload.model_copy(update={"round": 3})
    )
    assert not verdict(r, stale_round, approve("ann", minutes=61)).ok


def test_running_again_needs_a_persons_retry() -> None:
    p = proof.CallProof(
        rules(),
        call_id="t1.1",
        workflow_id=WID,
        arguments=ARGS,
        requested_at=T0,
        directory=DIRECTORY,
    )
    p.feed(approve("ann"))
    assert p.verdict(ARGS).ok
    assert not p.verdict(ARGS, again=True).ok
    retry = ResolveInput(call_id="t1.1", outcome="retry", approver="ann")
    p.feed(Candidate(at=at(9), kind="resolve", payload=retry))
    assert p.verdict(ARGS, again=True).ok
    assert not p.verdict(ARGS, again=True).ok, "one retry, one more run"


@pytest.mark.parametrize("who", ["ann", None])
def test_prove_call_is_pure(who: str | None) -> None:
    """The same inputs, the same verdict (no clock, no I/O)."""
    args = (rules(), approve(who))
    assert verdict(*args) == verdict(*args)
