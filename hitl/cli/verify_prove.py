"""Proving a tree of runs for `hitl verify`: every fact, in history order, to what it concerns.

The facts of every run of the tree (`hitl.cli.verify_read`) are walked in one timeline: the
runs of a chain in order, chains interleaved by time. Each fact goes to what it concerns: its
chain's turns and calls (`hitl.cli.verify_calls`), a call's proof (a decision, fed to the
root's call it names: decisions are made at the root, nested calls under qualified ids), the
standing rules a decision made (kept for later calls, offered to waiting ones), or what ran
(`hitl.cli.verify_executed`, which judges it).
"""

from __future__ import annotations

from datetime import datetime

from hitl.cli.proof import CallProof
from hitl.cli.verify_calls import SEP, Call, ChainReplay
from hitl.cli.verify_executed import judge_agent_tool, judge_execution
from hitl.cli.verify_read import Chain, Fact, Run, Tree
from hitl.cli.verify_report import Report
from hitl.cli.verify_terms import CallRules, Candidate, CandidateKind
from hitl.policy import PolicyError, digest_of, from_data
from hitl.policy_signing import APPLY_DOMAIN, verify_publication
from hitl.signing import SignatureError
from hitl.wire import (
    ApplyPolicy,
    ApproverDirectory,
    DecisionInput,
    PolicyChange,
    ResolveInput,
    StandingRule,
    canonical_arguments,
    child_workflow_id,
)


class Prover:
    """Walks a tree's facts in history order, one proof per call."""

    def __init__(self, tree: Tree, keys: ApproverDirectory | None) -> None:
        self.tree = tree
        self.keys = keys
        self.report = Report(tree.root.workflow_id, sum(len(c.runs) for c in tree.chains))
        self.report.notes += tree.notes
        self.rules: list[tuple[datetime, StandingRule]] = []
        """Standing rules made so far, each since the run's clock when it was made."""
        self.replays: dict[str, ChainReplay] = {}
        self.by_child: dict[str, Call] = {}
        """Agent-tool calls by the workflow id of the nested run they started."""
        self.root: ChainReplay | None = None

    def run(self) -> Report:
        """Every fact of the tree, in history order; the report on every executed call."""
        timeline = self._timeline()
        started: set[int] = set()
        self.root = self._replay(self.tree.root)
        for chain, run, fact in timeline:
            replay = self._replay(chain)
            if id(run) not in started:
                started.add(id(run))
                replay.start(run, [r for _, r in self.rules])
            self._fact(replay, run, fact)
        return self.report

    def _timeline(self) -> list[tuple[Chain, Run, Fact]]:
        """Every fact of every run: facts of one run keep their order; runs interleave by time.

        (The runs' notes go to the report as they are gathered.)
        """
        timeline: list[tuple[datetime, int, int, Chain, Run, Fact]] = []
        for n, chain in enumerate(self.tree.chains):
            for m, run in enumerate(chain.runs):
                self.report.notes += run.notes
                timeline += [(f.time, n, m, chain, run, f) for f in run.facts]
        timeline.sort(key=lambda x: (x[0], x[1], x[2], x[5].event_id))
        return [(chain, run, fact) for _, _, _, chain, run, fact in timeline]

    def _replay(self, chain: Chain) -> ChainReplay:
        """The chain's replay (a nested chain's calls are qualified by its agent tool's call)."""
        replay = self.replays.get(chain.workflow_id)
        if replay is None:
            parent_call = self.by_child.get(chain.workflow_id)
            path = [*parent_call.replay.call_path, parent_call.call_id] if parent_call else []
            nested = chain.parent is not None
            replay = ChainReplay(chain, path, nested=nested, notes=self.report.notes)
            self.replays[chain.workflow_id] = replay
        return replay

    def _fact(self, replay: ChainReplay, run: Run, f: Fact) -> None:
        """One fact, to what it concerns: the chain's turns, a call's decisions, what ran."""
        if f.kind == "resolved":
            replay.resolved(f)
        elif f.kind == "model":
            if replay.model_turn(run, f):
                self._settle(replay, f.clock)
        elif f.kind == "plans":
            if replay.plan_tools(f):
                self._settle(replay, f.clock)
        elif f.kind == "execute":
            self.report.calls.append(judge_execution(replay.calls, run, f))
        elif f.kind == "child":
            self._child(replay, run, f)
        elif f.kind == "apply":
            self._applied(replay, f)
        elif f.kind == "rerun" and replay.nested:
            # Uncertain calls and tools' questions of a nested run are settled on that run.
            self._rerun(replay, run, f)
        elif f.kind in ("decision", "rerun"):
            if replay.nested:
                if not f.refused:
                    self.report.notes.append(
                        f"{run.workflow_id} (a nested run) took a decision itself "
                        f"(event {f.event_id}); decisions are made at the root"
                    )
                return
            self._decision(replay, f)

    def _settle(self, replay: ChainReplay, clock: datetime) -> None:
        """The turn's calls are planned: each that may run starts its proof (at `clock`).

        With the root's pinned directory, the operator's keys if given, and the standing
        rules made by then.
        """
        assert self.root is not None
        root_wid = self.root.chain.workflow_id
        directory = self.root.directory
        keys = self.keys if self.keys is not None else directory
        standing = [r for at, r in self.rules if at <= clock]
        for c in replay.calls:
            if c.refused is not None or c.tool is None:
                continue
            if c.plan is not None and c.plan.refusal is not None:
                c.refused = "its plan refused it"
                continue
            rules = CallRules(
                tool=c.tool,
                agent_id=c.agent.id,
                config=replay.config,
                plan=c.plan,
                nested=replay.nested,
            )
            c.proof = CallProof(
                rules,
                call_id=c.qualified,
                workflow_id=root_wid,
                arguments=c.arguments,
                requested_at=clock,
                directory=directory,
                keys=keys,
                standing=standing,
                rule_directory=replay.directory if replay.nested else "same",
            )

    def _applied(self, replay: ChainReplay, f: Fact) -> None:
        """An admin's `apply_policy` at the root: the calls it re-asked or rejected.

        Only once its signature holds (an admin of the directory signed it for this run).
        """
        p, change = f.data, f.extra
        assert isinstance(p, ApplyPolicy) and isinstance(change, PolicyChange)
        keys = self.keys if self.keys is not None else replay.directory
        try:
            doc = from_data(p.document, source="an applied policy")
            verify_publication(
                keys or ApproverDirectory(), p, registry_id=replay.chain.workflow_id,
                digest=digest_of(doc), now=f.clock, domain=APPLY_DOMAIN,
            )  # fmt: skip
        except (PolicyError, SignatureError) as exc:
            self.report.notes.append(f"{f.where}: an apply_policy that does not hold: {exc}")
            return
        for c in change.calls:
            call = self._find(replay, c.call_id)
            if call is None or call.proof is None:
                continue
            if c.change == "asked":
                call.proof.reapplied(c.approvers, c.required_approvals)
            elif c.change == "rejected":
                call.proof.rejected_by_policy(f.clock, change.admin)

    # ------------------------------------------------------------ decisions

    def _find(self, replay: ChainReplay, call_id: str) -> Call | None:
        """The call a decision at `replay` (the root) names: own, or nested by qualified id."""
        own = next((c for c in replay.calls if c.call_id == call_id), None)
        if own is not None or SEP not in call_id:
            return own
        head, rest = call_id.split(SEP, 1)
        parent = next((c for c in replay.calls if c.call_id == head), None)
        if parent is None:
            return None
        child = next(
            (s for wid, s in self.replays.items() if self.by_child.get(wid) is parent), None
        )
        return self._find(child, rest) if child is not None else None

    def _decision(self, replay: ChainReplay, f: Fact) -> None:
        """A person's decision at the root, to the proof of the call it names."""
        d = f.data
        call = self._find(replay, getattr(d, "call_id", ""))
        if call is None or call.proof is None:
            return
        kind: CandidateKind
        if f.kind == "rerun":
            self._rerun(replay, None, f)
            return
        kind = "approve" if f.extra in ("approve", "edit") else f.extra
        if kind not in ("approve", "reject", "extend"):
            return
        if f.extra == "edit" and not f.refused and isinstance(d, DecisionInput):
            assert d.arguments is not None
            call.held = canonical_arguments(d.arguments)  # the run took the edit
        call.proof.feed(
            Candidate(
                at=f.clock,
                kind=kind,
                payload=d,
                via=f.via,
                refused=f.refused,
                plan=f.plan,
                where=f.where,
            )
        )
        self._spread(call.proof, f.clock)

    def _rerun(self, replay: ChainReplay, run: Run | None, f: Fact) -> None:
        """A `resolve` or `answer`: it lets an approved call's tool run again."""
        d = f.data
        call = next((c for c in replay.calls if c.call_id == getattr(d, "call_id", "")), None)
        if call is None or call.proof is None:
            return
        kind: CandidateKind = "resolve" if isinstance(d, ResolveInput) else "answer"
        call.proof.feed(
            Candidate(
                at=f.clock,
                kind=kind,
                payload=d,
                refused=f.refused,
                where=f.where,
                workflow_id=run.workflow_id if run is not None else "",
            )
        )

    def _spread(self, proof: CallProof, at: datetime) -> None:
        """New standing rules: kept for later calls, and offered to every waiting call."""
        for rule in proof.new_rules:
            self.rules = [
                (t, r)
                for t, r in self.rules
                if (r.agent_id, r.tool_name, r.approver)
                != (rule.agent_id, rule.tool_name, rule.approver)
            ] + [(at, rule)]
            for s in self.replays.values():
                for c in s.calls:
                    if c.proof is not None and c.proof.state == "pending":
                        c.proof.feed(Candidate(at=at, kind="rule", payload=rule))
                        self._spread(c.proof, at)
        proof.new_rules = []

    # ------------------------------------------------------------ what ran

    def _child(self, replay: ChainReplay, run: Run, f: Fact) -> None:
        """A nested run started: the agent-tool call it ran for (judged), and its chain's."""
        child_id = f.data
        call = next(
            (c for c in replay.calls if child_workflow_id(run.workflow_id, c.call_id) == child_id),
            None,
        )
        if call is None:
            self.report.notes.append(f"{run.workflow_id} started {child_id} for no known call")
            return
        self.by_child[child_id] = call
        self.report.calls.append(judge_agent_tool(call, run, f))
