"""Reading runs' histories for `hitl verify`: what ran, what was decided, by which rules.

A run's history is the only source: the start input (`RunInput`: run configuration, carried
state, parent link), the `resolve_agent` marker (the pinned graph and approver directory), the
model's answers (`call_model`) and plans (`plan_tools`), what ran (`execute_tool` activities and
local-activity markers, agent tools' child starts), and every update and signal a person sent.
This module reads a root run, its continue-as-new chain and its nested runs (agent tools, child
workflows `<parent>--<call id>`, whose calls are decided on the root under qualified ids),
replays the run's naming of calls (`t<turn>.<n>`) and feeds each call's candidate decisions,
in history order, to its `hitl.cli.proof.CallProof`. What the run says it decided (its
`DecisionRecord`s, the decisions in `ExecuteToolInput`, its carried decisions) is not read.

`load_tree` does the I/O (through a `fetch` function, so recorded histories can be verified
offline); `prove_tree` is pure.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter

from hitl.cli.proof import CallProof, CallRules, Candidate, CandidateKind, Counted, Verdict
from hitl.items import check_arguments, parse_model_output
from hitl.wire import (
    ACT_CALL_MODEL,
    ACT_EXECUTE_TOOL,
    ACT_PLAN_TOOLS,
    ACT_RESOLVE_AGENT,
    SIGNAL_APPROVE,
    SIGNAL_REJECT,
    UPDATE_ANSWER,
    UPDATE_APPROVE,
    UPDATE_DECIDE,
    UPDATE_EXTEND,
    UPDATE_REJECT,
    UPDATE_RESOLVE,
    AgentGraph,
    AgentSpec,
    AnswerInput,
    ApproverDirectory,
    CallModelInput,
    CallPlan,
    CarriedState,
    DecideInput,
    DecisionInput,
    ExecuteToolInput,
    ExtendInput,
    ModelResponse,
    PlanToolsOutput,
    ResolvedRun,
    ResolveInput,
    RunConfigSpec,
    RunInput,
    StandingRule,
    ToolSpec,
    canonical_arguments,
    child_workflow_id,
)

SEP = "/"
"""Separates the levels of a qualified call id (`<agent tool call id>/<nested call id>`)."""

Fetch = Callable[[str, str | None], Awaitable[tuple[str, WorkflowHistory]]]
"""`(workflow id, run id or None for the latest) -> (run id, history)`."""

_E = EventType


# ----------------------------------------------------------------------------- facts


@dataclass
class Fact:
    """One thing a run's history says, with where and when."""

    kind: Literal[
        "resolved", "model", "plans", "execute", "child", "decision", "rerun", "nested_decision"
    ]
    event_id: int
    time: datetime
    """The event's time (orders facts across runs)."""
    clock: datetime
    """The run's clock when it acted on it (the start of that workflow task)."""
    data: Any = None
    extra: Any = None
    refused: bool = False
    via: Literal["update", "signal", "decide"] = "update"
    plan: CallPlan | None = None
    accepted: int = 0
    """For an update: the event id of its acceptance."""
    unreadable: bool = False
    """Its payload could not be decoded (encrypted without the key, or not ours)."""


@dataclass
class Run:
    """One run (one execution) of a workflow id, read."""

    workflow_id: str
    run_id: str
    start: RunInput | None
    facts: list[Fact]
    previous_run: str | None
    next_run: str | None
    children: list[tuple[str, str | None]]
    """Nested runs it started: (workflow id, first run id)."""
    events: int
    notes: list[str] = field(default_factory=list)


def _time(e: HistoryEvent) -> datetime:
    return e.event_time.ToDatetime().replace(tzinfo=UTC)


def _clock(nanoseconds: int) -> datetime:
    """A time as `workflow.now()` gives it (the SDK's own conversion, rounding included)."""
    return datetime.fromtimestamp(nanoseconds / 1e9, UTC)


class _Decoder:
    """Decodes payloads with the client's data converter (codec, external storage)."""

    def __init__(self, converter: DataConverter) -> None:
        self.converter = converter
        self.failures = 0

    async def value(self, payload: Payload) -> Any:
        """The JSON value of a payload, or `None` when it cannot be read."""
        try:
            [value] = await self.converter.decode([payload])
        except Exception:
            value = _raw_json(payload)
            if value is None:
                self.failures += 1
        return value

    async def model(self, payload: Payload | None, model: type[BaseModel]) -> Any:
        """A payload as `model`, or `None` when it is not one."""
        if payload is None:
            return None
        value = await self.value(payload)
        if value is None:
            return None
        try:
            return model.model_validate(value)
        except (ValidationError, RecursionError):
            return None


async def _completed(dec: _Decoder, e: HistoryEvent) -> datetime | None:
    """When a local activity completed (its marker's `complete_time`)."""
    m = e.marker_recorded_event_attributes
    if m.marker_name != "core_local_activity" or "data" not in m.details:
        return None
    info = await dec.value(m.details["data"].payloads[0])
    done = info.get("complete_time") if isinstance(info, dict) else None
    if not isinstance(done, dict):
        return None
    try:
        return _clock(int(done.get("seconds", 0)) * 10**9 + int(done.get("nanos", 0)))
    except (TypeError, ValueError, OverflowError):
        return None


def _raw_json(payload: Payload) -> Any:
    if payload.metadata.get("encoding") != b"json/plain":
        return None
    try:
        return json.loads(payload.data)
    except (ValueError, RecursionError):
        return None


def _first(payloads: Iterable[Payload]) -> Payload | None:
    return next(iter(payloads), None)


async def read_run(
    workflow_id: str, run_id: str, history: WorkflowHistory, converter: DataConverter
) -> Run:
    """The facts of one run's history, in event order."""
    dec = _Decoder(converter)
    events = list(history.events)
    # The run's clock (`workflow.now()`): a workflow task starts at the time of its
    # WorkflowTaskStarted event, and a local activity that completes in it moves the clock to
    # its completion time (recorded in its marker). Events of a task are written in the order
    # things happened in it: updates taken at its start first, then each marker, then what
    # followed it.
    last_started: list[datetime | None] = []
    current: datetime | None = None
    for e in events:
        if e.event_type == _E.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            current = _clock(e.event_time.ToNanoseconds())
        elif e.event_type == _E.EVENT_TYPE_MARKER_RECORDED:
            finished = await _completed(dec, e)
            if finished is not None and (current is None or finished > current):
                current = finished
        last_started.append(current)
    next_started: list[datetime | None] = [None] * len(events)
    upcoming: datetime | None = None
    for i in range(len(events) - 1, -1, -1):
        next_started[i] = upcoming
        if events[i].event_type == _E.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            upcoming = _clock(events[i].event_time.ToNanoseconds())
    outcomes: dict[str, tuple[bool, int]] = {}
    for i, e in enumerate(events):
        if e.event_type == _E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            completed = e.workflow_execution_update_completed_event_attributes
            outcomes[completed.meta.update_id] = (completed.outcome.HasField("success"), i)
    scheduled: dict[int, str] = {}
    model_inputs: dict[int, CallModelInput | None] = {}
    run = Run(workflow_id, run_id, None, [], None, None, [], len(events))
    child_started: dict[int, str] = {}
    for e in events:
        if e.event_type == _E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
            child = e.child_workflow_execution_started_event_attributes
            child_started[child.initiated_event_id] = child.workflow_execution.run_id

    def clock_at(i: int) -> datetime:
        return last_started[i] or next_started[i] or _time(events[i])

    def clock_after(i: int) -> datetime | None:
        return next_started[i]

    for i, e in enumerate(events):
        t, kind = _time(e), e.event_type
        if kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            began = e.workflow_execution_started_event_attributes
            run.start = await dec.model(_first(began.input.payloads), RunInput)
            run.previous_run = began.continued_execution_run_id or None
        elif kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            cont = e.workflow_execution_continued_as_new_event_attributes
            run.next_run = cont.new_execution_run_id
        elif kind == _E.EVENT_TYPE_MARKER_RECORDED:
            m = e.marker_recorded_event_attributes
            if m.marker_name != "core_local_activity" or m.HasField("failure"):
                continue
            info = await dec.value(m.details["data"].payloads[0]) if "data" in m.details else None
            activity = info.get("activity_type") if isinstance(info, dict) else None
            result = _first(m.details["result"].payloads) if "result" in m.details else None
            clock = clock_at(i)
            if activity == ACT_RESOLVE_AGENT:
                resolved = await dec.model(result, ResolvedRun)
                if resolved is not None:
                    run.facts.append(Fact("resolved", e.event_id, t, clock, resolved))
            elif activity == ACT_CALL_MODEL:
                response = await dec.model(result, ModelResponse)
                if response is not None:
                    run.facts.append(Fact("model", e.event_id, t, clock, response))
            elif activity == ACT_PLAN_TOOLS:
                plans = await dec.model(result, PlanToolsOutput)
                if plans is not None:
                    run.facts.append(Fact("plans", e.event_id, t, clock, plans))
            elif activity == ACT_EXECUTE_TOOL:
                summary = e.user_metadata.summary if e.HasField("user_metadata") else None
                tool = await dec.value(summary) if summary is not None else None
                run.facts.append(
                    Fact("execute", e.event_id, t, clock, None, str(tool) if tool else None)
                )
        elif kind == _E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            task = e.activity_task_scheduled_event_attributes
            name = task.activity_type.name
            scheduled[e.event_id] = name
            if name == ACT_EXECUTE_TOOL:
                inp = await dec.model(_first(task.input.payloads), ExecuteToolInput)
                fact = Fact("execute", e.event_id, t, clock_at(i), inp, unreadable=inp is None)
                run.facts.append(fact)
            elif name == ACT_CALL_MODEL:
                asked = await dec.model(_first(task.input.payloads), CallModelInput)
                model_inputs[e.event_id] = asked
        elif kind == _E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done_ = e.activity_task_completed_event_attributes
            if scheduled.get(done_.scheduled_event_id) == ACT_CALL_MODEL:
                response = await dec.model(_first(done_.result.payloads), ModelResponse)
                after = clock_after(i)
                if response is not None and after is not None:
                    run.facts.append(
                        Fact(
                            "model",
                            e.event_id,
                            t,
                            after,
                            response,
                            model_inputs.get(done_.scheduled_event_id),
                        )
                    )
        elif kind == _E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            init = e.start_child_workflow_execution_initiated_event_attributes
            child_input = await dec.model(_first(init.input.payloads), RunInput)
            run.facts.append(
                Fact("child", e.event_id, t, clock_at(i), init.workflow_id, child_input)
            )
            run.children.append((init.workflow_id, child_started.get(e.event_id)))
        elif kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            request = e.workflow_execution_update_accepted_event_attributes.accepted_request
            name = request.input.name
            update_id = request.meta.update_id
            success, done = outcomes.get(update_id, (True, -1))
            payload = _first(request.input.args.payloads)
            if len(request.input.args.payloads) != 1 or payload is None:
                continue
            made = await _decision_facts(dec, name, payload, e, t, clock_at(i), not success)
            for f in made:
                f.accepted = e.event_id
                if f.extra == "edit":
                    if done < 0:
                        f.refused = True  # never completed: not taken
                    else:
                        # Taken when its handler resumes after planning: at its completion.
                        f.clock, f.time = clock_at(done), _time(events[done])
                        f.event_id = events[done].event_id
            run.facts += made
        elif kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            sig = e.workflow_execution_signaled_event_attributes
            if sig.signal_name not in (SIGNAL_APPROVE, SIGNAL_REJECT):
                continue
            after = clock_after(i)
            payload = _first(sig.input.payloads)
            if after is None or payload is None or len(sig.input.payloads) != 1:
                continue  # never delivered to a workflow task (the run closed first)
            d = await dec.model(payload, DecisionInput)
            if d is not None:
                kind_ = "approve" if sig.signal_name == SIGNAL_APPROVE else "reject"
                run.facts.append(
                    Fact("decision", e.event_id, t, after, d, kind_, refused=False, via="signal")
                )
    _attach_edit_plans(run)
    run.facts.sort(key=lambda f: f.event_id)
    if dec.failures:
        run.notes.append(
            f"run {run_id or workflow_id}: {dec.failures} payload(s) could not be decoded "
            "(encrypted: give verify the key, HITL_ENCRYPTION_KEY; or a blob store it cannot "
            "reach, HITL_STORAGE)"
        )
    return run


async def _decision_facts(
    dec: _Decoder,
    name: str,
    payload: Payload,
    e: HistoryEvent,
    t: datetime,
    clock: datetime,
    refused: bool,
) -> list[Fact]:
    """The decision candidates one accepted update carries."""
    if name in (UPDATE_APPROVE, UPDATE_REJECT):
        d = await dec.model(payload, DecisionInput)
        if d is None:
            return []
        extra = "edit" if name == UPDATE_APPROVE and d.arguments is not None else name
        return [Fact("decision", e.event_id, t, clock, d, extra, refused=refused)]
    if name == UPDATE_DECIDE:
        req = await dec.model(payload, DecideInput)
        if req is None:
            return []
        return [
            Fact(
                "decision",
                e.event_id,
                t,
                clock,
                DecisionInput.model_validate(r.model_dump(exclude={"kind"})),
                r.kind,
                refused=refused,
                via="decide",
            )
            for r in req.decisions
        ]
    if name == UPDATE_EXTEND:
        x = await dec.model(payload, ExtendInput)
        return [] if x is None else [Fact("decision", e.event_id, t, clock, x, "extend", refused)]
    if name in (UPDATE_RESOLVE, UPDATE_ANSWER):
        model: type[BaseModel] = ResolveInput if name == UPDATE_RESOLVE else AnswerInput
        r = await dec.model(payload, model)
        return [] if r is None else [Fact("rerun", e.event_id, t, clock, r, name, refused)]
    return []


def _attach_edit_plans(run: Run) -> None:
    """Give each edit the `plan_tools` marker its handler recorded.

    (It lies between the update's acceptance and its completion.)
    """
    plans = [f for f in run.facts if f.kind == "plans"]
    for edit in run.facts:
        if edit.kind != "decision" or edit.extra != "edit" or edit.refused:
            continue
        for p in plans:
            if edit.accepted < p.event_id < edit.event_id and p.extra != "edit":
                assert isinstance(p.data, PlanToolsOutput)
                if len(p.data.plans) == 1:
                    edit.plan, p.extra = p.data.plans[0], "edit"
                    break


# ----------------------------------------------------------------------------- loading


@dataclass
class Chain:
    """A workflow id's runs, first to last (a root, or a nested run)."""

    workflow_id: str
    runs: list[Run]
    parent: Chain | None = None
    missing_start: bool = False
    """The chain's first run is not available (only later runs were read)."""


@dataclass
class Tree:
    """A root chain and every nested chain under it."""

    root: Chain
    chains: list[Chain]
    notes: list[str] = field(default_factory=list)


async def load_chain(
    fetch: Fetch,
    workflow_id: str,
    run_id: str | None,
    converter: DataConverter,
    *,
    back: bool = True,
) -> Chain:
    """Read a workflow id's continue-as-new chain through `run_id` (the latest: `None`).

    Back to its first run (`back`), and on to its last.
    """
    rid, hist = await fetch(workflow_id, run_id)
    runs = [await read_run(workflow_id, rid, hist, converter)]
    seen = {rid}
    while back and runs[0].previous_run and runs[0].previous_run not in seen:
        seen.add(runs[0].previous_run)
        try:
            prid, phist = await fetch(workflow_id, runs[0].previous_run)
        except LookupError:
            break
        runs.insert(0, await read_run(workflow_id, prid, phist, converter))
    while runs[-1].next_run and runs[-1].next_run not in seen:
        seen.add(runs[-1].next_run)
        try:
            nrid, nhist = await fetch(workflow_id, runs[-1].next_run)
        except LookupError:
            break
        runs.append(await read_run(workflow_id, nrid, nhist, converter))
    first = runs[0].start
    return Chain(workflow_id, runs, missing_start=first is not None and first.carried is not None)


async def load_tree(
    fetch: Fetch, workflow_id: str, converter: DataConverter, run_id: str | None = None
) -> Tree:
    """Read a root run's chain and, recursively, its nested runs' chains."""
    root = await load_chain(fetch, workflow_id, run_id, converter)
    tree = Tree(root=root, chains=[root])
    todo = [root]
    while todo:
        chain = todo.pop()
        for run in chain.runs:
            for child_id, child_run in run.children:
                try:
                    child = await load_chain(fetch, child_id, child_run, converter, back=False)
                except LookupError:
                    tree.notes.append(f"nested run {child_id} could not be read")
                    continue
                child.parent = chain
                tree.chains.append(child)
                todo.append(child)
    return tree


# ----------------------------------------------------------------------------- proving


@dataclass
class CallReport:
    """The verdict on one executed call."""

    workflow_id: str
    run_id: str
    call_id: str
    """As decided: the run's own id, qualified for calls of nested runs."""
    tool: str
    agent: str
    kind: Literal["activity", "local activity", "agent tool"]
    where: str
    verdict: Verdict


@dataclass
class Report:
    """`hitl verify`'s findings for one root run and everything under it."""

    workflow_id: str
    runs: int
    calls: list[CallReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pinned_keys_missing: list[str] = field(default_factory=list)
    """Keys of the pinned directory that the operator's directory file lacks."""

    @property
    def ok(self) -> bool:
        """Every executed call is proven."""
        return all(c.verdict.ok for c in self.calls)


@dataclass
class _Call:
    chain: _ChainSim
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
        return SEP.join([*self.chain.call_path, self.call_id])


@dataclass
class _ChainSim:
    chain: Chain
    call_path: list[str]
    nested: bool
    graph: AgentGraph | None = None
    directory: ApproverDirectory | None = None
    config: RunConfigSpec = field(default_factory=RunConfigSpec)
    agent_id: str = ""
    turn: int = 0
    own_ids: bool = False
    model_ids: set[str] = field(default_factory=set)
    past: set[str] = field(default_factory=set)
    calls: list[_Call] = field(default_factory=list)
    awaiting_plans: list[_Call] | None = None
    handoff: str | None = None
    started: bool = False
    untrusted: list[StandingRule] = field(default_factory=list)
    """Standing rules carried from runs that could not be read."""


class _Prover:
    """Walks a tree's facts in history order, one proof per call."""

    def __init__(self, tree: Tree, keys: ApproverDirectory | None) -> None:
        self.tree = tree
        self.keys = keys
        self.report = Report(tree.root.workflow_id, sum(len(c.runs) for c in tree.chains))
        self.report.notes += tree.notes
        self.rules: list[tuple[datetime, StandingRule]] = []
        self.sims: dict[str, _ChainSim] = {}
        self.by_child: dict[str, _Call] = {}
        """Agent-tool calls by the workflow id of the nested run they started."""
        self.root_sim: _ChainSim | None = None

    # ------------------------------------------------------------ setup

    def _sim(self, chain: Chain) -> _ChainSim:
        sim = self.sims.get(chain.workflow_id)
        if sim is None:
            parent_call = self.by_child.get(chain.workflow_id)
            path = [*parent_call.chain.call_path, parent_call.call_id] if parent_call else []
            sim = _ChainSim(chain, path, nested=chain.parent is not None)
            self.sims[chain.workflow_id] = sim
        return sim

    def _start(self, sim: _ChainSim, run: Run) -> None:
        inp = run.start
        if inp is None:
            self.report.notes.append(f"run {run.run_id or sim.chain.workflow_id}: no start input")
            return
        if sim.started:
            # A continuation: the state it carries is the previous run's (read already).
            carried = inp.carried
            if carried is not None and carried.turn != sim.turn:
                self.report.notes.append(
                    f"{sim.chain.workflow_id}: a continuation carries turn {carried.turn}, "
                    f"its history says {sim.turn}"
                )
            return
        sim.started = True
        sim.config = inp.run_config
        if inp.carried is not None:
            self._from_carried(sim, inp.carried, run)
        elif inp.graph is not None:
            sim.graph = inp.graph
            sim.agent_id = inp.start_agent or inp.graph.root
            sim.own_ids = bool(inp.parent and inp.parent.run_call_ids)
            for rule in inp.rules:
                if not any(r == rule for _, r in self.rules):
                    self.report.notes.append(
                        f"{sim.chain.workflow_id} started with a standing rule verify did not "
                        f"see made ({rule.kind} {rule.tool_name} by {rule.approver})"
                    )

    def _from_carried(self, sim: _ChainSim, carried: CarriedState, run: Run) -> None:
        """A chain whose first runs are not available: start from what the run carried."""
        sim.graph, sim.directory = carried.graph, carried.directory
        sim.agent_id, sim.turn = carried.current_agent, carried.turn
        sim.own_ids = carried.run_call_ids
        sim.model_ids = {
            str(i.raw_item.get("call_id"))
            for i in carried.new_items
            if i.type in ("tool_call_item", "handoff_call_item")
        }
        sim.past = {d.call_id for d in carried.decisions}
        sim.untrusted = list(carried.rules)
        self.report.notes.append(
            f"{sim.chain.workflow_id}: the runs before {run.run_id or 'this one'} could not "
            "be read: what they decided (calls they planned, standing rules they made: "
            f"{len(carried.calls)} call(s), {len(carried.rules)} rule(s)) is not trusted"
        )
        for c in carried.calls:
            agent = carried.graph.agents.get(c.agent_id) if carried.graph else None
            if agent is None:
                continue
            call = _Call(
                sim,
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
            sim.calls.append(call)

    # ------------------------------------------------------------ facts

    def run(self) -> Report:
        timeline: list[tuple[datetime, int, int, Chain, Run, Fact]] = []
        for n, chain in enumerate(self.tree.chains):
            for m, run in enumerate(chain.runs):
                self.report.notes += run.notes
                timeline += [(f.time, n, m, chain, run, f) for f in run.facts]
        # Facts of one run keep their order; runs interleave by time.
        timeline.sort(key=lambda x: (x[0], x[1], x[2], x[5].event_id))
        started: set[int] = set()
        root = self.tree.root
        self.root_sim = self._sim(root)
        for _, _, _, chain, run, fact in timeline:
            sim = self._sim(chain)
            if id(run) not in started:
                started.add(id(run))
                self._start(sim, run)
            self._fact(sim, run, fact)
        return self.report

    def _fact(self, sim: _ChainSim, run: Run, f: Fact) -> None:
        if f.kind == "resolved":
            assert isinstance(f.data, ResolvedRun)
            if sim.graph is None:
                sim.graph = f.data.graph
                sim.directory = f.data.directory
                sim.own_ids = f.data.run_call_ids
                sim.agent_id = sim.agent_id or f.data.graph.root
        elif f.kind == "model":
            self._model(sim, run, f)
        elif f.kind == "plans":
            self._plans(sim, f)
        elif f.kind == "execute":
            self._execute(sim, run, f)
        elif f.kind == "child":
            self._child(sim, run, f)
        elif f.kind == "rerun" and sim.nested:
            # Uncertain calls and tools' questions of a nested run are settled on that run.
            self._rerun(sim, run, f)
        elif f.kind in ("decision", "rerun"):
            if sim.nested:
                if not f.refused:
                    self.report.notes.append(
                        f"{run.workflow_id} (a nested run) took a decision itself "
                        f"(event {f.event_id}); decisions are made at the root"
                    )
                return
            self._decision(sim, f)

    # ------------------------------------------------------------ turns

    def _model(self, sim: _ChainSim, run: Run, f: Fact) -> None:
        response = f.data
        assert isinstance(response, ModelResponse)
        graph = sim.graph
        if graph is None:
            self.report.notes.append(f"{run.workflow_id}: a model call before the graph")
            return
        # The previous turn is over: its calls are past calls; a handoff switches the agent.
        for c in sim.calls:
            sim.past.add(c.call_id)
        sim.model_ids.update(c.model_id for c in sim.calls)
        sim.calls = []
        sim.awaiting_plans = None
        if sim.handoff is not None:
            sim.agent_id, sim.handoff = sim.handoff, None
        sim.turn += 1
        asked = f.extra
        if (
            isinstance(asked, CallModelInput)
            and asked.agent_id in graph.agents
            and asked.agent_id != sim.agent_id
        ):
            self.report.notes.append(
                f"{run.workflow_id}: model call of agent {asked.agent_id}, verify expected "
                f"{sim.agent_id}"
            )
            sim.agent_id = asked.agent_id
        agent = graph.agents.get(sim.agent_id)
        if agent is None:
            self.report.notes.append(f"{run.workflow_id}: unknown agent {sim.agent_id}")
            return
        parsed = parse_model_output(response.output)
        if not parsed.calls:
            return
        used = sim.past | sim.model_ids
        handoff = None
        for n, fc in enumerate(parsed.calls, 1):
            if sim.own_ids:
                call_id, again = f"t{sim.turn}.{n}", 1
                while call_id in used:
                    again += 1
                    call_id = f"t{sim.turn}.{n}.{again}"
            else:
                call_id = fc.call_id
            call = _Call(
                sim, call_id, fc.call_id, fc.name, fc.arguments, agent, sim.turn, held=fc.arguments
            )
            sim.calls.append(call)
            hand = agent.handoff(fc.name)
            if fc.call_id in sim.model_ids or (not sim.own_ids and fc.call_id in sim.past):
                call.refused = "the model reused a call id"
            elif hand is not None:
                call.refused = "a handoff"
                if handoff is None:
                    handoff = hand.agent_id
            elif agent.tool(fc.name) is None:
                call.refused = "no such tool"
            else:
                problem = check_arguments(fc, sim.config.max_tool_argument_bytes)
                if problem is not None:
                    call.refused = problem
                else:
                    call.tool = agent.tool(fc.name)
        sim.handoff = handoff
        planned = [c for c in sim.calls if c.tool is not None and c.tool.approval != "never"]
        given = response.plans
        if planned and given is not None:
            by_id = {p.call_id: p for p in given}
            if len(by_id) == len(given) and all(c.model_id in by_id for c in planned):
                for c in planned:
                    c.plan = by_id[c.model_id]
                self._settle(sim, f.clock)
                return
        if planned:
            sim.awaiting_plans = planned
            return
        self._settle(sim, f.clock)

    def _plans(self, sim: _ChainSim, f: Fact) -> None:
        if f.extra == "edit" or sim.awaiting_plans is None:
            return
        out = f.data
        assert isinstance(out, PlanToolsOutput)
        planned, sim.awaiting_plans = sim.awaiting_plans, None
        by_id = {p.call_id: p for p in out.plans}
        for n, c in enumerate(planned):
            plan = by_id.get(c.model_id) if len(by_id) == len(out.plans) else None
            if plan is None and n < len(out.plans):
                plan = out.plans[n]
            c.plan = plan
        self._settle(sim, f.clock)

    def _settle(self, sim: _ChainSim, clock: datetime) -> None:
        assert self.root_sim is not None
        root_wid = self.root_sim.chain.workflow_id
        directory = self.root_sim.directory
        keys = self.keys if self.keys is not None else directory
        standing = [r for at, r in self.rules if at <= clock]
        for c in sim.calls:
            if c.refused is not None or c.tool is None:
                continue
            if c.plan is not None and c.plan.refusal is not None:
                c.refused = "its plan refused it"
                continue
            rules = CallRules(
                tool=c.tool, agent_id=c.agent.id, config=sim.config, plan=c.plan, nested=sim.nested
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
                rule_directory=sim.directory if sim.nested else "same",
            )

    # ------------------------------------------------------------ decisions

    def _find(self, sim: _ChainSim, call_id: str) -> _Call | None:
        """The call a decision at `sim` (the root) names: own, or nested by qualified id."""
        own = next((c for c in sim.calls if c.call_id == call_id), None)
        if own is not None or SEP not in call_id:
            return own
        head, rest = call_id.split(SEP, 1)
        parent = next((c for c in sim.calls if c.call_id == head), None)
        if parent is None:
            return None
        child = next((s for wid, s in self.sims.items() if self.by_child.get(wid) is parent), None)
        return self._find(child, rest) if child is not None else None

    def _decision(self, sim: _ChainSim, f: Fact) -> None:
        d = f.data
        call = self._find(sim, getattr(d, "call_id", ""))
        if call is None or call.proof is None:
            return
        kind: CandidateKind
        if f.kind == "rerun":
            self._rerun(sim, None, f)
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
                where=_at(f),
            )
        )
        self._spread(call.proof, f.clock)

    def _rerun(self, sim: _ChainSim, run: Run | None, f: Fact) -> None:
        """A `resolve` or `answer`: it lets an approved call's tool run again."""
        d = f.data
        call = next((c for c in sim.calls if c.call_id == getattr(d, "call_id", "")), None)
        if call is None or call.proof is None:
            return
        kind: CandidateKind = "resolve" if isinstance(d, ResolveInput) else "answer"
        call.proof.feed(
            Candidate(
                at=f.clock,
                kind=kind,
                payload=d,
                refused=f.refused,
                where=_at(f),
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
            for s in self.sims.values():
                for c in s.calls:
                    if c.proof is not None and c.proof.state == "pending":
                        c.proof.feed(Candidate(at=at, kind="rule", payload=rule))
                        self._spread(c.proof, at)
        proof.new_rules = []

    # ------------------------------------------------------------ what ran

    def _execute(self, sim: _ChainSim, run: Run, f: Fact) -> None:
        inp = f.data
        if isinstance(inp, ExecuteToolInput):
            call = next((c for c in sim.calls if c.call_id == inp.call_id), None)
            if call is None:
                self._orphan(run, f, inp.tool_name, inp.call_id, "activity")
                return
            problem = None
            if inp.arguments != call.held:
                problem = (
                    "the arguments that ran are not the call's as history reconstructs them "
                    "(the model's call and the edits the run took)"
                )
            self._verdict(call, run, f, inp.arguments, "activity", problem)
            return
        if f.unreadable:
            verdict = Verdict(ok=False, reason="it ran, but its input cannot be read")
            self.report.calls.append(
                CallReport(run.workflow_id, run.run_id, "?", "?", "?", "activity", _at(f), verdict)
            )
            return
        # The marker's summary is `<tool> <call id>` (runs recorded before: the tool alone).
        tool, _, named = str(f.extra or "").partition(" ")
        candidates = [
            c for c in sim.calls if c.name == tool and c.tool is not None and c.tool.local_activity
        ]
        if named:
            candidates = [c for c in candidates if c.call_id == named] or candidates
        fresh = [c for c in candidates if c.executions == 0]
        ready = [c for c in fresh if c.proof is not None and c.proof.verdict(c.held).ok]
        if not candidates:
            self._orphan(run, f, str(tool), "?", "local activity")
            return
        pick = (ready or fresh or candidates)[0]
        self._verdict(pick, run, f, pick.held, "local activity", None)

    def _child(self, sim: _ChainSim, run: Run, f: Fact) -> None:
        child_id = f.data
        call = next(
            (c for c in sim.calls if child_workflow_id(run.workflow_id, c.call_id) == child_id),
            None,
        )
        if call is None:
            self.report.notes.append(f"{run.workflow_id} started {child_id} for no known call")
            return
        self.by_child[child_id] = call
        inp = f.extra
        problem = None
        if isinstance(inp, RunInput):
            expected = _agent_input(call.held)
            if inp.input != expected:
                problem = "the nested run's input is not the call's arguments"
        self._verdict(call, run, f, call.held, "agent tool", problem)

    def _orphan(self, run: Run, f: Fact, tool: str, call_id: str, kind: Any) -> None:
        verdict = Verdict(ok=False, reason="it ran for a call that history does not show")
        self.report.calls.append(
            CallReport(run.workflow_id, run.run_id, call_id, tool, "?", kind, _at(f), verdict)
        )

    def _verdict(
        self, call: _Call, run: Run, f: Fact, executed: str, kind: Any, problem: str | None
    ) -> None:
        again = call.executions > 0
        call.executions += 1
        if call.proof is None:
            why = call.refused or "it was never planned as a call that may run"
            verdict = Verdict(ok=False, reason=f"it ran, but {why}")
        else:
            call.proof.advance(f.clock)
            verdict = call.proof.verdict(executed, again=again)
            if problem is not None and verdict.ok:
                verdict.ok, verdict.reason = False, problem
            for rule in call.chain.untrusted:
                if not verdict.ok and rule.covers(call.agent.id, call.name):
                    verdict.notes.append(
                        f"a standing rule (always_{rule.kind} by {rule.approver}) carried from "
                        "a run verify could not read covers it: not trusted"
                    )
        self.report.calls.append(
            CallReport(
                run.workflow_id,
                run.run_id,
                call.qualified,
                call.name,
                call.agent.name,
                kind,
                _at(f),
                verdict,
            )
        )


def _agent_input(arguments: str) -> str:
    """What a nested run receives as its input for an agent-tool call's arguments."""
    try:
        value = json.loads(arguments or "{}")
        text = value.get("input", "")
    except (ValueError, AttributeError):
        text = arguments
    return str(text)


def _at(f: Fact) -> str:
    return f"event {f.event_id}"


def prove_tree(tree: Tree, keys: ApproverDirectory | None = None) -> Report:
    """Prove every executed call of a tree (pure: the histories are read already).

    `keys`: check signatures against this directory instead of the pinned one (its pinned
    keys missing from it are reported).
    """
    prover = _Prover(tree, keys)
    report = prover.run()
    if keys is not None and prover.root_sim is not None and prover.root_sim.directory:
        ours = {k for e in keys.approvers.values() for k in e.keys}
        for name, entry in prover.root_sim.directory.approvers.items():
            for key_id in entry.keys:
                if key_id not in ours:
                    report.pinned_keys_missing.append(f"{name}: {key_id}")
    return report


def counted_text(c: Counted) -> str:
    """`ann (signed key 1a2b3c4d...)`, `bob`."""
    who = c.approver or "someone unnamed"
    if c.verified:
        return f"{who} (signed key {(c.key_id or '')[:8]}...)"
    return who
