"""Reading one run's history into facts for `hitl verify`: what ran, what was decided, when.

A run's history is the only source: the start input (`RunInput`: run configuration, carried
state, parent link), the `resolve_agent` marker (the pinned graph and approver directory), the
model's answers (`call_model`) and plans (`plan_tools`), what ran (`execute_tool` activities and
local-activity markers, agent tools' child starts), and every update and signal a person sent.
`read_run` turns one run's events into `Fact`s, each stamped with the run's clock when the run
acted on it; `hitl.cli.history` reads whole chains and trees of runs with it. What the run says
it decided (its `DecisionRecord`s, the decisions in `ExecuteToolInput`, its carried decisions)
is not read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter

from hitl.wire import (
    ACT_CALL_MODEL,
    ACT_EXECUTE_TOOL,
    ACT_PLAN_TOOLS,
    ACT_RESOLVE_AGENT,
    SIGNAL_APPROVE,
    SIGNAL_REJECT,
    UPDATE_ANSWER,
    UPDATE_APPLY_POLICY,
    UPDATE_APPROVE,
    UPDATE_DECIDE,
    UPDATE_EXTEND,
    UPDATE_PREVIEW_EDIT,
    UPDATE_REJECT,
    UPDATE_RESOLVE,
    AnswerInput,
    ApplyPolicy,
    CallModelInput,
    CallPlan,
    DecideInput,
    DecisionInput,
    ExecuteToolInput,
    ExtendInput,
    ModelResponse,
    PlanToolsOutput,
    PolicyChange,
    ResolvedRun,
    ResolveInput,
    RunInput,
)

_E = EventType


# ----------------------------------------------------------------------------- facts


@dataclass
class Fact:
    """One thing a run's history says, with where and when."""

    kind: Literal[
        "resolved",
        "model",
        "plans",
        "execute",
        "child",
        "decision",
        "rerun",
        "nested_decision",
        "preview",
        "apply",
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

    @property
    def where(self) -> str:
        """Where history holds it, as verify's reasons name it: `event 14`."""
        return f"event {self.event_id}"


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


# ----------------------------------------------------------------------------- payloads


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


def _raw_json(payload: Payload) -> Any:
    if payload.metadata.get("encoding") != b"json/plain":
        return None
    try:
        return json.loads(payload.data)
    except (ValueError, RecursionError):
        return None


def _first(payloads: Iterable[Payload]) -> Payload | None:
    return next(iter(payloads), None)


# ----------------------------------------------------------------------------- the run's clock


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


@dataclass
class _RunClock:
    """The run's clock (`workflow.now()`) at each event of its history.

    A workflow task starts at the time of its WorkflowTaskStarted event, and a local activity
    that completes in it moves the clock to its completion time (recorded in its marker).
    Events of a task are written in the order things happened in it: updates taken at its
    start first, then each marker, then what followed it.
    """

    events: list[HistoryEvent]
    last_started: list[datetime | None]
    """At each event: the clock of the workflow task that wrote it (`None`: before the first)."""
    next_started: list[datetime | None]
    """At each event: the start of the next workflow task (`None`: there was none)."""

    @classmethod
    async def read(cls, events: list[HistoryEvent], dec: _Decoder) -> _RunClock:
        """Both clocks, for every event."""
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
        return cls(events, last_started, next_started)

    def at(self, i: int) -> datetime:
        """The clock when the run acted on event `i` (its task's, else the next's, else its own)."""
        return self.last_started[i] or self.next_started[i] or _time(self.events[i])

    def after(self, i: int) -> datetime | None:
        """The clock when the run could first see event `i` (`None`: it never did)."""
        return self.next_started[i]


# ----------------------------------------------------------------------------- reading a run


async def read_run(
    workflow_id: str, run_id: str, history: WorkflowHistory, converter: DataConverter
) -> Run:
    """The facts of one run's history, in event order."""
    dec = _Decoder(converter)
    events = list(history.events)
    reader = _RunReader(workflow_id, run_id, events, dec, await _RunClock.read(events, dec))
    for i, e in enumerate(events):
        await reader.read(i, e)
    run = reader.run
    _attach_edit_plans(run)
    run.facts.sort(key=lambda f: f.event_id)
    if dec.failures:
        run.notes.append(
            f"run {run_id or workflow_id}: {dec.failures} payload(s) could not be decoded "
            "(encrypted: give verify the key, HITL_ENCRYPTION_KEY; or a blob store it cannot "
            "reach, HITL_STORAGE)"
        )
    return run


def _update_outcomes(events: list[HistoryEvent]) -> dict[str, tuple[bool, int]]:
    """Each completed update's outcome: (it succeeded, the index of its completion event)."""
    outcomes: dict[str, tuple[bool, int]] = {}
    for i, e in enumerate(events):
        if e.event_type == _E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            completed = e.workflow_execution_update_completed_event_attributes
            outcomes[completed.meta.update_id] = (completed.outcome.HasField("success"), i)
    return outcomes


def _child_run_ids(events: list[HistoryEvent]) -> dict[int, str]:
    """The first run id of each nested run started, by the event id that initiated it."""
    started: dict[int, str] = {}
    for e in events:
        if e.event_type == _E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
            child = e.child_workflow_execution_started_event_attributes
            started[child.initiated_event_id] = child.workflow_execution.run_id
    return started


class _RunReader:
    """Reads one run's events in order, one handler per kind of event that says something."""

    def __init__(
        self,
        workflow_id: str,
        run_id: str,
        events: list[HistoryEvent],
        dec: _Decoder,
        clock: _RunClock,
    ) -> None:
        self.events = events
        self.dec = dec
        self.clock = clock
        self.run = Run(workflow_id, run_id, None, [], None, None, [], len(events))
        self.outcomes = _update_outcomes(events)
        self.child_run_ids = _child_run_ids(events)
        self.scheduled: dict[int, str] = {}
        """Activity type by the event id that scheduled it."""
        self.model_inputs: dict[int, CallModelInput | None] = {}
        """What each scheduled `call_model` activity asked (by the event id that scheduled it)."""

    async def read(self, i: int, e: HistoryEvent) -> None:
        """Event `i`: what it says, if it says anything verify reads."""
        kind = e.event_type
        if kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            await self._started(e)
        elif kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            cont = e.workflow_execution_continued_as_new_event_attributes
            self.run.next_run = cont.new_execution_run_id
        elif kind == _E.EVENT_TYPE_MARKER_RECORDED:
            await self._marker(i, e)
        elif kind == _E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            await self._scheduled(i, e)
        elif kind == _E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            await self._activity_completed(i, e)
        elif kind == _E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            await self._child_initiated(i, e)
        elif kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            await self._update_accepted(i, e)
        elif kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            await self._signaled(i, e)

    async def _started(self, e: HistoryEvent) -> None:
        """The start input (the run's rules, or the state a continuation carries)."""
        began = e.workflow_execution_started_event_attributes
        self.run.start = await self.dec.model(_first(began.input.payloads), RunInput)
        self.run.previous_run = began.continued_execution_run_id or None

    async def _marker(self, i: int, e: HistoryEvent) -> None:
        """A local activity that completed: the pinned graph, a model answer, plans, or a tool."""
        m = e.marker_recorded_event_attributes
        if m.marker_name != "core_local_activity" or m.HasField("failure"):
            return
        info = await self.dec.value(m.details["data"].payloads[0]) if "data" in m.details else None
        activity = info.get("activity_type") if isinstance(info, dict) else None
        result = _first(m.details["result"].payloads) if "result" in m.details else None
        t, clock = _time(e), self.clock.at(i)
        if activity == ACT_RESOLVE_AGENT:
            resolved = await self.dec.model(result, ResolvedRun)
            if resolved is not None:
                self.run.facts.append(Fact("resolved", e.event_id, t, clock, resolved))
        elif activity == ACT_CALL_MODEL:
            response = await self.dec.model(result, ModelResponse)
            if response is not None:
                self.run.facts.append(Fact("model", e.event_id, t, clock, response))
        elif activity == ACT_PLAN_TOOLS:
            plans = await self.dec.model(result, PlanToolsOutput)
            if plans is not None:
                self.run.facts.append(Fact("plans", e.event_id, t, clock, plans))
        elif activity == ACT_EXECUTE_TOOL:
            # A local tool ran: its marker names no arguments, only (in its summary) the tool.
            summary = e.user_metadata.summary if e.HasField("user_metadata") else None
            tool = await self.dec.value(summary) if summary is not None else None
            self.run.facts.append(
                Fact("execute", e.event_id, t, clock, None, str(tool) if tool else None)
            )

    async def _scheduled(self, i: int, e: HistoryEvent) -> None:
        """An activity scheduled: a tool that runs (with its input), or a model call's question."""
        task = e.activity_task_scheduled_event_attributes
        name = task.activity_type.name
        self.scheduled[e.event_id] = name
        if name == ACT_EXECUTE_TOOL:
            inp = await self.dec.model(_first(task.input.payloads), ExecuteToolInput)
            clock = self.clock.at(i)
            fact = Fact("execute", e.event_id, _time(e), clock, inp, unreadable=inp is None)
            self.run.facts.append(fact)
        elif name == ACT_CALL_MODEL:
            asked = await self.dec.model(_first(task.input.payloads), CallModelInput)
            self.model_inputs[e.event_id] = asked

    async def _activity_completed(self, i: int, e: HistoryEvent) -> None:
        """A model call's answer, as the run saw it at its next workflow task."""
        done = e.activity_task_completed_event_attributes
        if self.scheduled.get(done.scheduled_event_id) != ACT_CALL_MODEL:
            return
        response = await self.dec.model(_first(done.result.payloads), ModelResponse)
        after = self.clock.after(i)
        if response is not None and after is not None:
            asked = self.model_inputs.get(done.scheduled_event_id)
            self.run.facts.append(Fact("model", e.event_id, _time(e), after, response, asked))

    async def _child_initiated(self, i: int, e: HistoryEvent) -> None:
        """A nested run started for an agent tool's call (its input, and its first run id)."""
        init = e.start_child_workflow_execution_initiated_event_attributes
        child_input = await self.dec.model(_first(init.input.payloads), RunInput)
        self.run.facts.append(
            Fact("child", e.event_id, _time(e), self.clock.at(i), init.workflow_id, child_input)
        )
        self.run.children.append((init.workflow_id, self.child_run_ids.get(e.event_id)))

    async def _update_accepted(self, i: int, e: HistoryEvent) -> None:
        """The decisions an accepted update carries (refused when it failed: it decided nothing)."""
        request = e.workflow_execution_update_accepted_event_attributes.accepted_request
        success, done = self.outcomes.get(request.meta.update_id, (True, -1))
        if request.input.name == UPDATE_PREVIEW_EDIT:
            # It decides nothing; the edit plan it records is not an edit's (`_attach_edit_plans`).
            end = self.events[done].event_id if done >= 0 else self.events[-1].event_id + 1
            self.run.facts.append(
                Fact("preview", end, _time(e), self.clock.at(i), accepted=e.event_id)
            )
            return
        payload = _first(request.input.args.payloads)
        if len(request.input.args.payloads) != 1 or payload is None:
            return
        if request.input.name == UPDATE_APPLY_POLICY:
            if success and done >= 0:
                await self._applied(payload, i, done)
            return
        made = await _decision_facts(
            self.dec, request.input.name, payload, e, _time(e), self.clock.at(i), not success
        )
        for f in made:
            f.accepted = e.event_id
            if f.extra == "edit":
                self._taken_at_completion(f, done)
        self.run.facts += made

    async def _applied(self, payload: Payload, accepted: int, done: int) -> None:
        """An admin's `apply_policy`: what it asked, and what it did to each pending call.

        Its signature is checked at the run's clock when it was accepted.
        """
        e = self.events[done]
        asked = await self.dec.model(payload, ApplyPolicy)
        result = e.workflow_execution_update_completed_event_attributes.outcome.success
        change = await self.dec.model(_first(result.payloads), PolicyChange)
        if asked is None or change is None:
            self.run.notes.append(f"{self.run.workflow_id}: an apply_policy cannot be read")
            return
        fact = Fact("apply", e.event_id, _time(e), self.clock.at(accepted), asked, change)
        self.run.facts.append(fact)

    def _taken_at_completion(self, edit: Fact, done: int) -> None:
        """An edit is taken when its handler resumes after planning it: at its completion.

        `done`: the index of the update's completion event (negative: it never completed).
        """
        if done < 0:
            edit.refused = True  # never completed: not taken
            return
        edit.clock, edit.time = self.clock.at(done), _time(self.events[done])
        edit.event_id = self.events[done].event_id

    async def _signaled(self, i: int, e: HistoryEvent) -> None:
        """An `approve` or `reject` signal, as the run saw it at its next workflow task."""
        sig = e.workflow_execution_signaled_event_attributes
        if sig.signal_name not in (SIGNAL_APPROVE, SIGNAL_REJECT):
            return
        after = self.clock.after(i)
        payload = _first(sig.input.payloads)
        if after is None or payload is None or len(sig.input.payloads) != 1:
            return  # never delivered to a workflow task (the run closed first)
        d = await self.dec.model(payload, DecisionInput)
        if d is not None:
            kind = "approve" if sig.signal_name == SIGNAL_APPROVE else "reject"
            self.run.facts.append(
                Fact("decision", e.event_id, _time(e), after, d, kind, refused=False, via="signal")
            )


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
    previews = [(f.accepted, f.event_id) for f in run.facts if f.kind == "preview"]
    plans = []
    for f in run.facts:
        if f.kind != "plans":
            continue
        if any(a < f.event_id < b for a, b in previews):
            f.extra = "preview"  # an edit preview's plan: neither an edit's nor a turn's
        else:
            plans.append(f)
    for edit in run.facts:
        if edit.kind != "decision" or edit.extra != "edit" or edit.refused:
            continue
        for p in plans:
            if edit.accepted < p.event_id < edit.event_id and p.extra != "edit":
                assert isinstance(p.data, PlanToolsOutput)
                if len(p.data.plans) == 1:
                    edit.plan, p.extra = p.data.plans[0], "edit"
                    break
