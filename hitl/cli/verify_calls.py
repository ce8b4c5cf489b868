"""Replaying a chain's calls for `hitl verify`: which calls each turn made, as the run named them.

A `ChainReplay` follows one workflow id's continue-as-new chain through its facts: the rules it
started with (or the state a continuation carried), the agent each turn ran, the calls of each
model answer, named as the run names them (`t<turn>.<n>`, or the model's ids), and whether the
run let each of them run at all (a reused id, a handoff, no such tool, arguments it refuses),
then their plans. Each call that may run gets its `hitl.cli.proof.CallProof` from
`hitl.cli.verify_prove`, which feeds it the decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hitl.cli.proof import CallProof
from hitl.cli.verify_read import Chain, Fact, Run
from hitl.items import FunctionCall, check_arguments, parse_model_output
from hitl.wire import (
    AgentGraph,
    AgentSpec,
    ApproverDirectory,
    CallModelInput,
    CallPlan,
    CallRecord,
    CarriedState,
    ModelResponse,
    PlanToolsOutput,
    ResolvedRun,
    RunConfigSpec,
    StandingRule,
    ToolSpec,
)

SEP = "/"
"""Separates the levels of a qualified call id (`<agent tool call id>/<nested call id>`)."""


@dataclass
class Call:
    """One call a turn made, as the run named it, and what verify knows of it so far."""

    replay: ChainReplay
    call_id: str
    model_id: str
    name: str
    arguments: str
    agent: AgentSpec
    turn: int
    tool: ToolSpec | None = None
    refused: str | None = None
    plan: CallPlan | None = None
    proof: CallProof | None = None
    held: str = ""
    """The arguments the run holds: the model's, or the latest edit it took."""
    executions: int = 0

    @property
    def qualified(self) -> str:
        """Its id as decided at the root: nested calls under their agent tools' call ids."""
        return SEP.join([*self.replay.call_path, self.call_id])


@dataclass
class ChainReplay:
    """One chain's turns and calls, replayed from its facts in history order."""

    chain: Chain
    call_path: list[str]
    nested: bool
    notes: list[str]
    """Where it says what it could not follow (the report's notes)."""
    graph: AgentGraph | None = None
    policy: bool = False
    """The run pinned an approval policy: every call is planned (it may ask about any)."""
    directory: ApproverDirectory | None = None
    config: RunConfigSpec = field(default_factory=RunConfigSpec)
    agent_id: str = ""
    turn: int = 0
    own_ids: bool = False
    model_ids: set[str] = field(default_factory=set)
    past: set[str] = field(default_factory=set)
    calls: list[Call] = field(default_factory=list)
    awaiting_plans: list[Call] | None = None
    handoff: str | None = None
    started: bool = False
    untrusted: list[StandingRule] = field(default_factory=list)
    """Standing rules carried from runs that could not be read."""

    # ------------------------------------------------------------ the chain's start

    def start(self, run: Run, made: list[StandingRule]) -> None:
        """A run of the chain starts: its pinned rules, or (a continuation) what it carries.

        `made`: the standing rules verify saw made so far; a start input that brings others is
        noted.
        """
        inp = run.start
        if inp is None:
            self.notes.append(f"run {run.run_id or self.chain.workflow_id}: no start input")
            return
        if self.started:
            # A continuation: the state it carries is the previous run's (read already).
            carried = inp.carried
            if carried is not None and carried.turn != self.turn:
                self.notes.append(
                    f"{self.chain.workflow_id}: a continuation carries turn {carried.turn}, "
                    f"its history says {self.turn}"
                )
            return
        self.started = True
        self.config = inp.run_config
        if inp.carried is not None:
            self._from_carried(inp.carried, run)
        elif inp.graph is not None:
            self.graph, self.policy = inp.graph, inp.policy is not None
            self.agent_id = inp.start_agent or inp.graph.root
            self.own_ids = bool(inp.parent and inp.parent.run_call_ids)
            for rule in inp.rules:
                if not any(r == rule for r in made):
                    self.notes.append(
                        f"{self.chain.workflow_id} started with a standing rule verify did not "
                        f"see made ({rule.kind} {rule.tool_name} by {rule.approver})"
                    )

    def _from_carried(self, carried: CarriedState, run: Run) -> None:
        """A chain whose first runs are not available: start from what the run carried."""
        self.graph, self.directory = carried.graph, carried.directory
        self.policy = carried.policy is not None
        self.agent_id, self.turn = carried.current_agent, carried.turn
        self.own_ids = carried.run_call_ids
        self.model_ids = {
            str(i.raw_item.get("call_id"))
            for i in carried.new_items
            if i.type in ("tool_call_item", "handoff_call_item")
        }
        self.past = {d.call_id for d in carried.decisions}
        self.untrusted = list(carried.rules)
        self.notes.append(
            f"{self.chain.workflow_id}: the runs before {run.run_id or 'this one'} could not "
            "be read: what they decided (calls they planned, standing rules they made: "
            f"{len(carried.calls)} call(s), {len(carried.rules)} rule(s)) is not trusted"
        )
        for c in carried.calls:
            call = self._carried_call(c, carried)
            if call is not None:
                self.calls.append(call)

    def _carried_call(self, c: CallRecord, carried: CarriedState) -> Call | None:
        """A call of the turn a continuation carries: known, but never provable."""
        agent = carried.graph.agents.get(c.agent_id) if carried.graph else None
        if agent is None:
            return None
        call = Call(
            self,
            c.call_id,
            c.model_id,
            c.tool_name,
            c.original_arguments or c.arguments,
            agent,
            c.turn,
            tool=agent.tool(c.tool_name),
            held=c.arguments,
        )
        call.refused = (
            "it was planned in a run of the chain that verify could not read (its rules "
            "and the time it started waiting are only what the run carried)"
        )
        return call

    def resolved(self, f: Fact) -> None:
        """The `resolve_agent` marker: the pinned graph and directory (unless carried)."""
        assert isinstance(f.data, ResolvedRun)
        if self.graph is None:
            self.graph = f.data.graph
            self.directory, self.policy = f.data.directory, f.data.policy is not None
            self.own_ids = f.data.run_call_ids
            self.agent_id = self.agent_id or f.data.graph.root

    # ------------------------------------------------------------ turns

    def model_turn(self, run: Run, f: Fact) -> bool:
        """A model answer: a new turn, and its calls as the run named them.

        Returns whether the turn's calls can start their proofs now (the answer planned them,
        or none needs a plan); not when they wait for the `plan_tools` marker (`plan_tools`),
        or the turn made no calls.
        """
        response = f.data
        assert isinstance(response, ModelResponse)
        graph = self.graph
        if graph is None:
            self.notes.append(f"{run.workflow_id}: a model call before the graph")
            return False
        self._next_turn()
        self._follow_agent(f.extra, graph, run)
        agent = graph.agents.get(self.agent_id)
        if agent is None:
            self.notes.append(f"{run.workflow_id}: unknown agent {self.agent_id}")
            return False
        parsed = parse_model_output(response.output)
        if not parsed.calls:
            return False
        self._name_calls(parsed.calls, agent)
        return self._take_plans(response.plans)

    def _next_turn(self) -> None:
        """The previous turn is over: its calls are past calls; a handoff switches the agent."""
        for c in self.calls:
            self.past.add(c.call_id)
        self.model_ids.update(c.model_id for c in self.calls)
        self.calls = []
        self.awaiting_plans = None
        if self.handoff is not None:
            self.agent_id, self.handoff = self.handoff, None
        self.turn += 1

    def _follow_agent(self, asked: Any, graph: AgentGraph, run: Run) -> None:
        """Follow the agent the model was asked for, where verify expected another (noted)."""
        if (
            isinstance(asked, CallModelInput)
            and asked.agent_id in graph.agents
            and asked.agent_id != self.agent_id
        ):
            self.notes.append(
                f"{run.workflow_id}: model call of agent {asked.agent_id}, verify expected "
                f"{self.agent_id}"
            )
            self.agent_id = asked.agent_id

    def _name_calls(self, calls: list[FunctionCall], agent: AgentSpec) -> None:
        """The turn's calls, in the model's order, each named and screened as the run does."""
        used = self.past | self.model_ids
        handoff = None
        for n, fc in enumerate(calls, 1):
            call_id = self._call_id(fc, n, used)
            call = Call(
                self,
                call_id,
                fc.call_id,
                fc.name,
                fc.arguments,
                agent,
                self.turn,
                held=fc.arguments,
            )
            self.calls.append(call)
            to = self._screen(call, fc, agent)
            if handoff is None:
                handoff = to
        self.handoff = handoff

    def _call_id(self, fc: FunctionCall, n: int, used: set[str]) -> str:
        """The run's id for the turn's `n`-th call (`t<turn>.<n>`, made unique), or the model's."""
        if not self.own_ids:
            return fc.call_id
        call_id, again = f"t{self.turn}.{n}", 1
        while call_id in used:
            again += 1
            call_id = f"t{self.turn}.{n}.{again}"
        return call_id

    def _screen(self, call: Call, fc: FunctionCall, agent: AgentSpec) -> str | None:
        """Whether the run lets the call run at all: its tool, or why not (`refused`).

        Returns the agent it hands off to, when it is a handoff.
        """
        hand = agent.handoff(fc.name)
        if fc.call_id in self.model_ids or (not self.own_ids and fc.call_id in self.past):
            call.refused = "the model reused a call id"
        elif hand is not None:
            call.refused = "a handoff"
            return hand.agent_id
        elif agent.tool(fc.name) is None:
            call.refused = "no such tool"
        else:
            problem = check_arguments(fc, self.config.max_tool_argument_bytes)
            if problem is not None:
                call.refused = problem
            else:
                call.tool = agent.tool(fc.name)
        return None

    def _take_plans(self, given: list[CallPlan] | None) -> bool:
        """Plans for the calls that need one, from the model's answer; whether all have one.

        When the answer does not plan every such call, they wait for the `plan_tools` marker.
        """
        planned = [
            c
            for c in self.calls
            if c.tool is not None and (self.policy or c.tool.approval != "never")
        ]
        if planned and given is not None:
            by_id = {p.call_id: p for p in given}
            if len(by_id) == len(given) and all(c.model_id in by_id for c in planned):
                for c in planned:
                    c.plan = by_id[c.model_id]
                return True
        if planned:
            self.awaiting_plans = planned
            return False
        return True

    def plan_tools(self, f: Fact) -> bool:
        """The `plan_tools` marker for the calls waiting for plans; whether it planned them.

        (An edit's own plan, attached to its decision already, and an edit preview's plan no
        call of the turn.)
        """
        if f.extra in ("edit", "preview") or self.awaiting_plans is None:
            return False
        out = f.data
        assert isinstance(out, PlanToolsOutput)
        planned, self.awaiting_plans = self.awaiting_plans, None
        by_id = {p.call_id: p for p in out.plans}
        for n, c in enumerate(planned):
            plan = by_id.get(c.model_id) if len(by_id) == len(out.plans) else None
            if plan is None and n < len(out.plans):
                plan = out.plans[n]
            c.plan = plan
        return True
