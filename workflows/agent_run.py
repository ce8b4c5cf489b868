"""`AgentRun`: one durable agent run.

The loop: ask the model for the next step (an activity), decide what happens to each tool call
(`workflows.turn`: run, refuse, decide by rule or policy, or wait for a person), run the allowed
calls (activities, side by side), and loop until the model gives a final output. A call that
needs a person waits on `workflow.wait_condition` until a decision arrives (update `approve` /
`reject` / `decide`, or the same-named signals) or its deadline passes.

This class holds the handlers and the loop; the rest lives in its own module: the state of a
run is one model (`CarriedState`, also what continue-as-new carries), the approval book
(`workflows.book`), the turn's decisions (`workflows.turn`), activities (`workflows.steps`),
nested runs (`workflows.nested`), what operators see (`workflows.visibility`), events
(`workflows.events`) and the reading of hostile payloads (`workflows.inputs`). No user code runs
here: predicates, instructions, tools and formatters all run in activities.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any, Literal, NoReturn

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from hitl.limits import (
        MAX_CONTEXT_BYTES,
        MAX_DECIDE_BYTES,
        MAX_DECISION_BYTES,
        MAX_DECISIONS_PER_UPDATE,
        MAX_NAME_CHARS,
        MAX_REFUSED_KEPT,
        MAX_RESULT_BYTES,
        MAX_SIGNAL_BYTES,
        MAX_START_BYTES,
        MAX_WAITING_UPDATES,
        run_config_problems,
    )
    from hitl.wire import (
        WORKFLOW_TYPE,
        AgentSpec,
        CallRecord,
        CarriedState,
        ChildReport,
        DecideInput,
        DecisionInput,
        DecisionKind,
        DecisionRecord,
        DecisionVia,
        FromRoot,
        HandleRunErrorInput,
        HandoffFilterInput,
        PendingApproval,
        Phase,
        RefusedDecision,
        RunContextData,
        RunErrorInfo,
        RunEvent,
        RunInput,
        RunItem,
        RunOutput,
        RunSnapshot,
        RunStatus,
        SettledStatus,
        TranscriptPage,
        TranscriptQuery,
        TurnInfo,
        WaitInput,
    )
    from workflows import nested, turn, visibility
    from workflows.book import ApprovalBook
    from workflows.events import Events
    from workflows.inputs import Waiters, preview, read_one, refusal, trust_problem
    from workflows.items import (
        BadInput,
        FunctionCall,
        assistant_message,
        function_output,
        message_text,
        model_input,
        normalize_input,
        parse_model_output,
    )
    from workflows.steps import RunFailure, Steps, output_text
    from workflows.tracing import RunTracer

DEFAULT_MAX_TURNS = 10
STREAM_EVENTS_KEPT = 2000
"""Events a run carries across continue-as-new (older ones are dropped from its stream)."""
START_EXAMPLE = '{"agent": "<registered agent name>", "input": "..."}'
DECISION_EXAMPLE = '{"call_id": "<call id>", "approver": "you@example.com"}'
DECIDE_EXAMPLE = '{"decisions": [{"kind": "approve", "call_id": "<call id>"}]}'
SETTLED_PENDING_KEPT = 50
SETTLED_OUTPUT_BYTES = 16 * 1024
"""A final output larger than this is left out of update results (read the run's result)."""
COMPACT_PATCH = "hitl-compact-while-parked"
"""Runs recorded before continue-as-new could happen while parked replay without it."""


def _preview(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more]"


@workflow.defn(name=WORKFLOW_TYPE)
class AgentRun:
    """The durable agent loop (see the module docstring)."""

    @workflow.init
    def __init__(self, *args: Any) -> None:
        # Any start input is read here, however many payloads and whatever they hold: a
        # malformed or untrusted one fails the run with a typed `UserError` instead of failing
        # every workflow task forever, and internal fields count only when the server vouches
        # for them (see `trust_problem`).
        self._bad_input: str | None = None
        try:
            inp = read_one(
                args,
                RunInput,
                what="the AgentRun input",
                example=START_EXAMPLE,
                max_bytes=MAX_START_BYTES,
                error_type="UserError",
            )
            problem = _start_problem(inp)
            if problem is not None:
                raise refusal("UserError", problem)
        except ApplicationError as err:
            self._bad_input = err.message
            inp = RunInput(agent="")
        self.inp = inp
        self.s = self._initial_state(inp)
        self.book = ApprovalBook(self.s)
        self.steps = Steps(inp, self.s)
        self._waiters = Waiters(MAX_WAITING_UPDATES)
        self.events = Events(
            WorkflowStream(prior_state=inp.carried.stream if inp.carried else None),
            self._waiters,
        )
        self.events.announced = {f"decided:{d.call_id}" for d in self.s.decisions} | {
            c.call_id for c in self.s.calls
        }
        self._child = nested.ChildSide(self) if inp.parent is not None else None
        self._output: RunOutput | None = None
        self._error: RunErrorInfo | None = None
        self._continuing = False
        self._cancelled = False
        self._no_compaction = False
        self._paused = False
        self.trace = RunTracer(False, {})
        # What operators last saw; a fresh run someone started with our search attributes set
        # publishes its own at once.
        self._published: visibility.Visible | None = (
            None if visibility.spoofed() else visibility.STARTED
        )

    @staticmethod
    def _initial_state(inp: RunInput) -> CarriedState:
        if inp.carried is not None:
            inp.carried.turns_here = 0
            return inp.carried
        state = CarriedState(
            context=RunContextData(
                value=inp.context,
                type=inp.run_config.context_type,
                deserializer=inp.run_config.context_deserializer,
            )
            if inp.context is not None
            else None
        )
        if inp.graph is not None:
            # A nested run: the root's pinned graph and standing rules, no search attributes
            # (its approvals are listed and decided on the root run).
            state.graph = inp.graph
            state.current_agent = inp.start_agent or inp.graph.root
            state.rules = list(inp.rules)
            state.always_rules = dict(inp.always_rules)
            state.tracing = bool(inp.parent and inp.parent.tracing)
        return state

    # ================================================================= main loop

    @workflow.run
    async def run(self, *args: Any) -> RunOutput:
        if self._bad_input is not None:
            raise ApplicationError(
                f"{self._bad_input} (expected {START_EXAMPLE})",
                type="UserError",
                non_retryable=True,
            )
        try:
            await self._start()
            background = [asyncio.create_task(self._keep_published())]
            if self._child is not None:
                background += [
                    asyncio.create_task(self._child.keep_parent_informed()),
                    asyncio.create_task(self._child.read_mail()),
                ]
            self._output = await self._loop()
            for task in background:
                task.cancel()
        except BaseException as exc:
            if not isinstance(exc, RunFailure):
                if is_cancelled_exception(exc) and workflow.patched("hitl-cancelled-status"):
                    # Cancelled while parked or running: the inbox must not keep listing it.
                    # (Patched: runs cancelled before this change replay without the upsert.)
                    self._cancelled = True
                    self._publish()
                raise
            self._error = exc.info
            self.trace.end_run(error=exc.info.type)
            self._publish()
            self._emit("run_failed", text=exc.info.message, data={"type": exc.info.type})
            await self._finish_handlers()
            raise ApplicationError(
                exc.info.message, exc.info.details, type=exc.info.type, non_retryable=True
            ) from None
        self.trace.end_run()
        self._publish()
        self._emit("final_output", text=output_text(self._output.final_output))
        if self.inp.session:
            await self.steps.save_session()
        await self._finish_handlers()
        return self._output

    async def _start(self) -> None:
        """Pin the graph (a top-level run), take the input, check input guardrails."""
        inp = self.inp
        if self.s.graph is None:
            resolved = await self.steps.resolve()
            self.s.graph, self.s.search_attributes = resolved.graph, resolved.search_attributes
            self.s.current_agent = resolved.graph.root
            self.s.tracing = resolved.tracing
        self._start_tracing()
        if inp.carried is None:
            try:
                own = normalize_input(inp.input)
            except BadInput as exc:
                raise RunFailure("UserError", str(exc)) from None
            history = await self.steps.load_session() if inp.session else []
            self.s.session_base = len(history)
            self.s.own_input = own
            self.s.input_items = [*history, *own]
            await self._guardrails("input", self._agent(), subject=inp.input)
        for rec in self.book.awaiting():  # a parked turn carried over: its waits go on
            self._trace_wait(rec)

    async def _finish_handlers(self) -> None:
        # Stream subscribers long-poll with updates; release them so the run can close.
        self.events.stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)

    async def _loop(self) -> RunOutput:
        max_turns = self.inp.max_turns or self.inp.run_config.max_turns or DEFAULT_MAX_TURNS
        if self.s.open_turn is not None:
            # This run continued as new while its turn waited for people: finish that turn.
            await self._finish_turn(self._agent(), self.s.calls)
        while True:
            if self._should_continue_as_new() and self.s.turns_here > 0:
                await self._continue_as_new()
            if self.s.turn >= max_turns:
                return await self._max_turns_exceeded(max_turns)
            agent = self._agent()
            attrs = {"hitl.agent": agent.name, "hitl.model": agent.model.name}
            streaming = self.inp.run_config.stream_text_deltas
            self.events.streaming += streaming
            try:
                with self.trace.span("hitl.model_call", **attrs, **{"hitl.turn": self.s.turn}):
                    response = await self.steps.call_model(agent)
            finally:
                self.events.streaming -= streaming
            self.s.turn += 1
            self.s.turns_here += 1
            self.s.usage = self.s.usage.add(response.usage)
            parsed = parse_model_output(response.output)
            for msg in parsed.messages:
                self._add_item("message_output_item", msg, agent)
            for other in parsed.others:
                if other.get("type") == "reasoning":
                    self._add_item("reasoning_item", other, agent)
            if not parsed.calls:
                if response.has_final_output or parsed.messages:
                    final = (
                        response.final_output
                        if response.has_final_output
                        else message_text(parsed.messages[-1])
                    )
                    await self._guardrails("output", agent, final_output=final)
                    return self._finish(final, agent)
                self._count_bad_turn("the model returned neither a message nor a tool call")
                continue
            await self._run_turn(agent, parsed.calls)

    def _finish(self, final: Any, agent: AgentSpec) -> RunOutput:
        out = RunOutput(
            final_output=final,
            last_agent=agent.id,
            last_agent_name=agent.name,
            input_items=self.s.input_items,
            new_items=self.s.new_items,
            usage=self.s.usage,
            decisions=self.book.all_decisions(),
            turns=self.s.turn,
            run_id=workflow.info().run_id,
        )
        if _size(out) > MAX_RESULT_BYTES:
            # Completing with a payload over Temporal's limit would fail every workflow task.
            out.input_items, out.new_items, out.transcript_omitted = [], [], True
        return out

    def _count_bad_turn(self, why: str) -> None:
        self.s.bad_turns += 1
        limit = self.inp.run_config.max_consecutive_bad_turns
        if self.s.bad_turns >= limit:
            raise RunFailure(
                "ModelBehaviorError",
                f"the model produced {self.s.bad_turns} unusable turns in a row (last: {why})",
            )

    # ================================================================= a turn of tool calls

    async def _run_turn(self, agent: AgentSpec, calls: list[FunctionCall]) -> None:
        cfg = self.inp.run_config
        assert self.s.graph is not None
        start = len(self.s.new_items)
        opened = turn.open_turn(
            agent, calls, self.book, self.s.graph.agents, self.s.turn, cfg.max_tool_argument_bytes
        )
        for call in calls:
            kind = "handoff_call_item" if agent.handoff(call.name) else "tool_call_item"
            self._add_item(kind, call.raw, agent)
        self.book.begin_turn(opened.records)
        self.s.open_turn = TurnInfo(
            start=start, handoff_target=opened.handoff_target, handoff_call=opened.handoff_call
        )
        planned = turn.to_plan(agent, opened.records)
        plans = {}
        if planned:
            out = await self.steps.plan(
                agent, planned, turn.skip_policy(agent, self.book, cfg, planned)
            )
            for plan in out.plans:
                if plan.tripwire is not None:
                    t = plan.tripwire
                    raise RunFailure(t.type, t.message, t.details)
            turn.apply_plans(opened, planned, out.plans)
            plans = {p.call_id: p for p in out.plans}
        for rec in turn.settle(agent, opened, plans, self.book, cfg, workflow.now()):
            self.announce_request(rec.call_id, rec.tool_name, rec.request)
            self._trace_wait(rec)
        self._announce_decisions()
        why = turn.bad_turn(opened)
        if why is not None:
            self._count_bad_turn(why)
        else:
            self.s.bad_turns = 0
        await self._finish_turn(agent, opened.records)

    async def _finish_turn(self, agent: AgentSpec, records: list[CallRecord]) -> None:
        """Take every call to an output (waiting for people as needed), then close the turn."""
        drives = asyncio.gather(*(self._drive(agent, r) for r in records if r.output is None))
        while not drives.done():
            await workflow.wait_condition(lambda: drives.done() or self._should_compact())
            if not drives.done() and self._should_compact():
                if workflow.patched(COMPACT_PATCH):
                    await self._continue_as_new()
                self._no_compaction = True
        await drives
        for rec in records:
            handoff = rec.call_id == (self.s.open_turn.handoff_call if self.s.open_turn else None)
            kind = "handoff_output_item" if handoff else "tool_call_output_item"
            self._add_item(kind, function_output(rec.call_id, rec.output or ""), agent)
        self.book.end_turn()
        info, self.s.open_turn = self.s.open_turn, None
        if info is not None and info.handoff_target is not None:
            previous = agent.name
            await self._filter_handoff(
                agent, info.handoff_call or "", info.handoff_target, info.start
            )
            self.s.current_agent = info.handoff_target
            self._emit("handoff", data={"from": previous, "to": self._agent_name()})
            self.trace.event(
                "hitl.handoff", **{"hitl.from": previous, "hitl.to": self._agent_name()}
            )

    async def _drive(self, agent: AgentSpec, rec: CallRecord) -> None:
        """Take one call from its current state to an output."""
        tool = turn.tool_of(agent, rec)
        if rec.state == "awaiting_approval":
            left = (rec.deadline - workflow.now()).total_seconds() if rec.deadline else None
            try:
                if left is not None and left <= 0:
                    raise TimeoutError
                # A run about to continue as new starts nothing more: its successor will.
                await workflow.wait_condition(
                    lambda: rec.decision is not None and not self._continuing,
                    timeout=timedelta(seconds=left) if left is not None else None,
                )
            except TimeoutError:
                await self._hold_if_continuing()
                if rec.decision is None:
                    self.book.expire(
                        rec,
                        workflow.now(),
                        f"Approval for {rec.tool_name} expired after "
                        f"{tool.approval_timeout_seconds or 0:g}s without a decision.",
                    )
                    self._announce_decisions()
        decision = rec.decision
        if decision is not None:
            self.trace.close(
                rec.call_id,
                **{
                    "hitl.decision": decision.kind,
                    "hitl.decision.source": decision.source,
                    "hitl.decision.approver": decision.approver,
                },
            )
        if decision is not None and decision.kind == "reject":
            rec.output = decision.message or await self.steps.rejection_text(agent, rec, tool)
            rec.state = "rejected"
            return
        rec.state = "running"
        self._emit("tool_started", call_id=rec.call_id, tool=rec.tool_name)
        if tool.kind == "agent":
            out = await nested.run_child(self, agent, rec, tool)
        else:
            attrs = {
                "hitl.tool": rec.tool_name,
                "hitl.call_id": rec.call_id,
                "hitl.agent": agent.name,
                "hitl.tool.arguments": self._sensitive(rec.arguments),
            }
            with self.trace.span("hitl.tool_call", **attrs) as span:
                out = await self.steps.execute_tool(agent, rec, tool)
                if span is not None:
                    span.set_attribute("hitl.tool.is_error", out.is_error)
                    output = self._sensitive(out.output)
                    if output is not None:
                        span.set_attribute("hitl.tool.output", output)
        rec.output, rec.is_error, rec.state = out.output, out.is_error, "done"

    async def _hold_if_continuing(self) -> None:
        if self._continuing:
            await workflow.wait_condition(lambda: False)

    # ================================================================= hooks

    async def _guardrails(
        self,
        kind: Literal["input", "output"],
        agent: AgentSpec,
        *,
        subject: Any = "",
        final_output: Any = None,
    ) -> None:
        """Run input or output guardrails (in an activity); a tripwire fails the run."""
        cfg = self.inp.run_config
        own = agent.input_guardrails if kind == "input" else agent.output_guardrails
        run_level = cfg.input_guardrails if kind == "input" else cfg.output_guardrails
        if self.inp.parent is not None:
            run_level = []  # run-level guardrails apply to the root run only
        if not own and not run_level:
            return
        with self.trace.span(f"hitl.guardrails.{kind}", **{"hitl.agent": agent.name}):
            out = await self.steps.guardrails(kind, agent, run_level, subject, final_output)
        for verdict in out.verdicts:
            if verdict.tripwire_triggered:
                raise RunFailure(
                    "InputGuardrailTripwireTriggered"
                    if kind == "input"
                    else "OutputGuardrailTripwireTriggered",
                    f"{kind} guardrail {verdict.name!r} tripped",
                    {"guardrail": verdict.name, "output_info": verdict.output_info},
                )

    async def _filter_handoff(
        self, agent: AgentSpec, call_id: str, target: str, turn_start: int
    ) -> None:
        """Apply the handoff's input filter or nested history (an activity), if any."""
        cfg = self.inp.run_config
        spec = next((h for h in agent.handoffs if h.agent_id == target), None)
        call = next(
            (i for i in self.s.new_items[turn_start:] if i.raw_item.get("call_id") == call_id),
            None,
        )
        tool = call.raw_item.get("name") if call else (spec.tool_name if spec else "")
        spec = agent.handoff(str(tool)) or spec
        nest = cfg.nest_handoff_history
        if spec is not None and spec.nest_handoff_history is not None:
            nest = spec.nest_handoff_history
        has_filter = bool(spec and spec.input_filter) or bool(cfg.handoff_input_filter)
        if not has_filter and not nest:
            return
        out = await self.steps.filter_handoff(
            HandoffFilterInput(
                root_agent=self.inp.agent,
                from_agent_id=agent.id,
                handoff_tool=str(tool),
                to_agent_id=target,
                input_history=self.s.input_items,
                pre_handoff_items=self.s.new_items[:turn_start],
                new_items=self.s.new_items[turn_start:],
                run_filter=cfg.handoff_input_filter,
                nest=nest,
                mapper=cfg.handoff_history_mapper,
                context=self.s.context,
            )
        )
        self.s.input_items = out.input_history
        self.s.new_items = [*out.pre_handoff_items, *out.new_items]

    async def _max_turns_exceeded(self, max_turns: int) -> RunOutput:
        message = f"Max turns ({max_turns}) exceeded"
        handler = self.inp.run_config.error_handlers.get("max_turns")
        agent = self._agent()
        if handler:
            out = await self.steps.handle_run_error(
                HandleRunErrorInput(
                    handler=handler,
                    message=message,
                    max_turns=max_turns,
                    context=self.s.context,
                    input_items=self.s.input_items,
                    new_items=self.s.new_items,
                )
            )
            if out.handled:
                if out.include_in_history:
                    final = out.final_output
                    text = final if isinstance(final, str) else json.dumps(final, default=str)
                    self._add_item(
                        "message_output_item",
                        assistant_message(text, f"msg_max_turns_{self.s.turn}"),
                        agent,
                    )
                return self._finish(out.final_output, agent)
        raise RunFailure("MaxTurnsExceeded", message, {"max_turns": max_turns})

    # ================================================================= continue-as-new

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        limit = self.inp.run_config.continue_as_new_after_events
        if limit is not None and info.get_current_history_length() >= limit:
            return True
        return info.is_continue_as_new_suggested()

    def _should_compact(self) -> bool:
        """Parked, with a long history (or many updates), and nothing in flight to lose."""
        return (
            not self._no_compaction
            and not self._continuing
            and self.phase() == "awaiting_approval"
            and not self.book.children
            and self._should_continue_as_new()
        )

    async def _continue_as_new(self) -> NoReturn:
        self._continuing = True
        stream = self.events.stream
        stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        state = stream.get_state()
        if len(state.log) > STREAM_EVENTS_KEPT:
            stream.truncate(state.base_offset + len(state.log) - STREAM_EVENTS_KEPT)
            state = stream.get_state()
        self.s.stream = state
        self.s.continued_runs += 1
        size = _size(self.s)
        if size > MAX_RESULT_BYTES:
            self._continuing = False
            raise RunFailure(
                "RunTooLarge",
                f"the run's state is {size} bytes, too large to carry on (the limit is "
                f"{MAX_RESULT_BYTES}); keep transcripts smaller (max_tool_output_bytes, "
                "call_model_input_filter) or start a new run",
            )
        workflow.continue_as_new(
            RunInput(
                agent=self.inp.agent,
                context=self.s.context.value if self.s.context else None,
                max_turns=self.inp.max_turns,
                run_config=self.inp.run_config,
                carried=self.s,
                session=self.inp.session,
                parent=self.inp.parent,
            )
        )

    # ================================================================= decisions

    def _decision(self, args: tuple[Any, ...], kind: str) -> DecisionInput:
        return read_one(
            args,
            DecisionInput,
            what=f"{'an' if kind == 'approve' else 'a'} {kind} decision",
            example=DECISION_EXAMPLE,
            max_bytes=MAX_DECISION_BYTES,
        )

    def _open_for_decisions(self, call_id: str) -> None:
        link = self.inp.parent
        if link is not None:
            # No approval path bypasses the root: it sees, validates and records every decision.
            qualified = "/".join([*link.call_path, call_id])
            raise refusal(
                "NotRoot",
                f"this is a nested run; decide on the root run {link.root_workflow_id} "
                f"(call id '{qualified}')",
            )
        if self._output is not None or self._error is not None:
            raise refusal("RunFinished", "the run has finished; it takes no more decisions")

    def _admit(self, kind: DecisionKind, d: DecisionInput) -> None:
        """Validate a decision (read-only).

        One that arrives after its call's deadline is let through once, so the handler can
        record it as refused (the caller still gets `DeadlinePassed`; the record shows it).
        """
        self._open_for_decisions(d.call_id)
        try:
            self.book.check(kind, d, workflow.now())
        except ApplicationError as err:
            if err.type != "DeadlinePassed" or self._late_recorded(d.call_id):
                raise

    def _decide(self, kind: DecisionKind, d: DecisionInput, via: DecisionVia) -> DecisionRecord:
        """Record one decision, synchronously (never awaits)."""
        self._open_for_decisions(d.call_id)
        try:
            rec = self.book.record(kind, d, now=workflow.now(), via=via)
        except ApplicationError as err:
            if err.type == "DeadlinePassed" and via == "update":
                self._refuse_late(kind, d, err)
            raise
        self._announce_decisions()
        self._note_pause()
        return rec

    def _late_recorded(self, call_id: str) -> bool:
        return any(
            r.call_id == call_id and r.error_type == "DeadlinePassed" for r in self.s.refused
        )

    def _refuse_late(self, kind: str, d: DecisionInput, err: ApplicationError) -> None:
        who = f" from {d.approver}" if d.approver else ""
        self._record_refused(
            kind,
            f"{kind}{who} for call {d.call_id}"[:200],
            "DeadlinePassed",
            err.message,
            via="update",
            call_id=d.call_id,
        )

    @workflow.update(name="approve")
    def approve(self, *args: Any) -> DecisionRecord:
        """Approve one pending call: `{"call_id": "...", "approver": "you", "always": false}`."""
        return self._decide("approve", self._decision(args, "approve"), "update")

    @approve.validator
    def _validate_approve(self, *args: Any) -> None:
        self._admit("approve", self._decision(args, "approve"))

    @workflow.update(name="reject")
    def reject(self, *args: Any) -> DecisionRecord:
        """Reject one pending call: `{"call_id": "...", "message": "why (shown to the model)"}`."""
        return self._decide("reject", self._decision(args, "reject"), "update")

    @reject.validator
    def _validate_reject(self, *args: Any) -> None:
        self._admit("reject", self._decision(args, "reject"))

    def _decide_input(self, args: tuple[Any, ...]) -> DecideInput:
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
            if kinds.setdefault(d.call_id, d.kind) != d.kind:
                raise refusal(
                    "InvalidDecision", f"call '{d.call_id}' is both approved and rejected"
                )
        if req.context is not None:
            self._check_new_context(req.context)
        return req

    def _check_new_context(self, ctx: RunContextData) -> None:
        size = len(json.dumps(ctx.value))
        if size > MAX_CONTEXT_BYTES:
            raise refusal(
                "InvalidDecision",
                f"the new context is {size} bytes; the limit is {MAX_CONTEXT_BYTES}",
            )
        current = self.s.context
        for field in ("type", "deserializer"):
            given = getattr(ctx, field)
            pinned = getattr(current, field) if current else None
            if given is not None and given != pinned:
                raise refusal(
                    "InvalidDecision",
                    f"a new context keeps the run's context {field} ({pinned or 'none'}), "
                    f"not {given[:100]!r}",
                )

    @workflow.update(name="decide")
    async def decide(self, *args: Any) -> RunStatus:
        """Apply several decisions at once; with `wait`, return once the run settles again."""
        req = self._decide_input(args)
        now = workflow.now()
        late = []
        for d in req.decisions:  # all or nothing: nothing is applied if one is refused
            self._open_for_decisions(d.call_id)
            try:
                self.book.check(d.kind, d, now)
            except ApplicationError as err:
                if err.type != "DeadlinePassed":
                    raise
                late.append((d, err))
        if late:
            for d, refused in late:
                self._refuse_late(d.kind, d, refused)
            raise late[0][1]
        made = [self._decide(d.kind, d, "update") for d in req.decisions]
        if req.context is not None:
            ctx = req.context
            if self.s.context is not None:
                # The run's context type and deserializer still rebuild the new value.
                ctx = ctx.model_copy(
                    update={
                        "deserializer": self.s.context.deserializer,
                        "type": ctx.type or self.s.context.type,
                    }
                )
            self.s.context = ctx
        if req.wait:
            self._waiters.enter()
            try:
                await workflow.wait_condition(self._settled)
            finally:
                self._waiters.leave()
        return self._settled_status(made)

    @decide.validator
    def _validate_decide(self, *args: Any) -> None:
        req = self._decide_input(args)
        if req.wait:
            self._waiters.check()
        for d in req.decisions:
            self._admit(d.kind, d)

    @workflow.update(name="wait")
    async def wait(self, *args: Any) -> RunStatus:
        """Return once the run waits for a person, finishes, or continues as new."""
        self._waiters.enter()
        try:
            await workflow.wait_condition(self._settled)
        finally:
            self._waiters.leave()
        return self._settled_status([])

    @wait.validator
    def _validate_wait(self, *args: Any) -> None:
        # Its content is ignored, but an accepted update is echoed in history: keep it small.
        read_one(
            args,
            WaitInput,
            what="a wait",
            example="{}",
            max_bytes=MAX_SIGNAL_BYTES,
            error_type="InvalidMessage",
            optional=True,
        )
        self._waiters.check()

    @workflow.signal(name="approve")
    def approve_signal(self, *args: Any) -> None:
        """Approve by signal (Temporal UI / `temporal workflow signal`); refusals show in status."""
        self._signal_decision("approve", args)

    @workflow.signal(name="reject")
    def reject_signal(self, *args: Any) -> None:
        """Reject by signal; refusals show in status."""
        self._signal_decision("reject", args)

    def _signal_decision(self, kind: DecisionKind, args: tuple[Any, ...]) -> None:
        # A signal cannot return an error: whatever was wrong is recorded instead.
        try:
            self._decide(kind, self._decision(args, kind), "signal")
        except ApplicationError as err:
            self._record_refused(kind, preview(args), err.type or "InvalidDecision", err.message)

    def _record_refused(
        self,
        name: str,
        payload: str,
        error_type: str,
        message: str,
        *,
        via: Literal["signal", "update"] = "signal",
        call_id: str | None = None,
    ) -> None:
        workflow.logger.warning("refused %s %s: %s", name, via, message)
        self.s.refused.append(
            RefusedDecision(
                received_at=workflow.now(),
                name=name[:100],
                payload=payload,
                error_type=error_type,
                message=message[:500],
                via=via,
                call_id=call_id,
            )
        )
        del self.s.refused[:-MAX_REFUSED_KEPT]

    # ================================================================= nested runs

    @workflow.signal(name=nested.SIGNAL_CHILD_REPORT)
    def _on_child_report(self, *args: Any) -> None:
        try:
            hint = read_one(
                args,
                nested.ReportHint,
                what="a report hint",
                example="(internal)",
                max_bytes=MAX_SIGNAL_BYTES,
            )
        except ApplicationError:
            return  # only a hint: a garbled one is not worth a record
        nested.on_child_report(self, hint.call_id)

    @workflow.signal(name=nested.SIGNAL_FROM_ROOT)
    def _on_from_root(self, *args: Any) -> None:
        if self._child is None:
            self._record_refused(
                nested.SIGNAL_FROM_ROOT,
                preview(args),
                "NotRoot",
                "this is not a nested run; decisions are made with the approve/reject updates",
            )
            return
        self._child.mail_stale = True  # read it from the parent itself

    @workflow.query(name=nested.QUERY_REPORT)
    def _report(self, *args: Any) -> ChildReport:
        return nested.report(self)

    @workflow.query(name=nested.QUERY_MAIL)
    def _mail(self, *args: Any) -> FromRoot:
        call_id = _query_text(args)
        return nested.mail_for(self, call_id) if call_id else FromRoot(seq=0)

    def path(self) -> list[str]:
        """Agents and agent tools from the root to this run (empty for the root)."""
        return self.inp.parent.path if self.inp.parent else []

    # ================================================================= queries

    @workflow.query(name="status")
    def status(self, *args: Any) -> RunStatus:
        """Phase, current agent and pending approvals."""
        return self._status()

    @workflow.query(name="snapshot")
    def snapshot(self, *args: Any) -> RunSnapshot:
        """Status plus every item produced so far."""
        return RunSnapshot(
            status=self._status(), input_items=self.s.input_items, new_items=self.s.new_items
        )

    @workflow.query(name="transcript")
    def transcript(self, *args: Any) -> TranscriptPage:
        """The model input items (what the model activity reads)."""
        q = read_one(
            args,
            TranscriptQuery,
            what="a transcript query",
            example='{"start": 0}',
            max_bytes=MAX_SIGNAL_BYTES,
            error_type="InvalidMessage",
            optional=True,
        )
        items = model_input(self.s.input_items, self.s.new_items)
        return TranscriptPage(items=items[q.start : q.end], total=len(items))

    # ================================================================= what operators see

    def _visible(self) -> visibility.Visible:
        if self._cancelled:
            return visibility.Visible("cancelled")
        pending = self.book.pending()
        phase = self.phase()
        status = "awaiting_approval" if pending and phase == "running" else phase
        return visibility.Visible.of(status, pending)

    async def _keep_published(self) -> None:
        """Keep search attributes and the UI's current details in step with the run."""
        while True:
            await workflow.wait_condition(lambda: self._visible() != self._published)
            self._publish()

    def _publish(self) -> None:
        visible = self._visible()
        if visible == self._published:
            return
        self._published = visible
        self._note_pause()
        link = self.inp.parent
        visibility.publish(
            visible,
            self.inp.agent,
            visibility.details(
                status=visible.status,
                turn=self.s.turn,
                agent=self.inp.agent,
                current_agent=self.s.current_agent,
                error=self._error,
                pending=self.book.pending(self.path()),
                root_workflow_id=link.root_workflow_id if link else None,
            ),
            self.s.search_attributes,
        )

    # ================================================================= events and tracing

    def _emit(self, kind: Any, **fields: Any) -> None:
        """Publish a `RunEvent` on the run's stream (no history event; rebuilt on replay)."""
        self.events.emit(RunEvent(type=kind, turn=self.s.turn, agent=self._agent_name(), **fields))

    def _note_pause(self) -> None:
        """Emit `paused` / `resumed` when the run starts or stops waiting for people only."""
        paused = self.phase() == "awaiting_approval"
        if paused and not self._paused:
            self._emit("paused", data={"pending": [p.call_id for p in self.book.pending()]})
        elif self._paused and not paused and self._output is None and self._error is None:
            self._emit("resumed")
        self._paused = paused

    def announce_request(self, call_id: str, tool: str, request: Any) -> None:
        """An `approval_requested` event, once per call."""
        if call_id in self.events.announced:
            return
        self.events.announced.add(call_id)
        self._emit(
            "approval_requested",
            call_id=call_id,
            tool=tool,
            text=request.title if request is not None else None,
            data={"message": request.message} if request is not None else {},
        )

    def _announce_decisions(self) -> None:
        for rec in self.book.all_decisions():
            key = f"decided:{rec.call_id}"
            if key in self.events.announced:
                continue
            self.events.announced.add(key)
            self._emit(
                "approval_decided",
                call_id=rec.call_id,
                tool=rec.tool_name,
                text=rec.kind,
                data={"source": rec.source, "approver": rec.approver, "message": rec.message},
            )
            self.trace.event(
                "hitl.approval_decision",
                **{
                    "hitl.agent": self.book.owner(rec.call_id),
                    "hitl.call_id": rec.call_id,
                    "hitl.tool": rec.tool_name,
                    "hitl.decision": rec.kind,
                    "hitl.decision.source": rec.source,
                    "hitl.decision.approver": rec.approver,
                },
            )

    def _start_tracing(self) -> None:
        cfg = self.inp.run_config
        attrs: dict[str, Any] = {
            "hitl.workflow_id": workflow.info().workflow_id,
            "hitl.agent": self.inp.agent,
            "hitl.workflow_name": cfg.workflow_name or self.inp.agent,
            "hitl.group_id": cfg.group_id,
        }
        for key, value in cfg.trace_metadata.items():
            attrs[f"hitl.metadata.{key}"] = (
                value if isinstance(value, str | int | float | bool) else json.dumps(value)
            )
        self.trace = RunTracer(self.s.tracing, attrs)
        self.trace.start_run(f"hitl.run {cfg.workflow_name or self.inp.agent}")

    def _trace_wait(self, rec: CallRecord) -> None:
        self.trace.open(
            rec.call_id,
            "hitl.approval_wait",
            **{
                "hitl.tool": rec.tool_name,
                "hitl.call_id": rec.call_id,
                "hitl.agent": rec.agent_name,  # the tool's owner (the run's is root)
            },
        )

    def _sensitive(self, text: str | None) -> str | None:
        """Arguments and outputs go on spans only when the run asks for it."""
        if not self.inp.run_config.trace_include_sensitive_data:
            return None
        return _preview(text or "", 4000)

    # ================================================================= helpers

    def phase(self) -> Phase:
        """Where the run is (see `Phase`)."""
        if self._output is not None:
            return "completed"
        if self._error is not None:
            return "failed"
        if self.s.graph is None:
            return "starting"
        if self.steps.busy == 0 and self.book.has_pending() and not self.book.active():
            return "awaiting_approval"
        return "running"

    def _settled(self) -> bool:
        return self._continuing or self.phase() in ("awaiting_approval", "completed", "failed")

    def _settled_status(self, decisions: list[DecisionRecord]) -> SettledStatus:
        """The status an update returns (kept small: it is stored with the update)."""
        status = self._status(SettledStatus, full=False)
        status.decisions = decisions
        status.pending = [_brief(p) for p in self.book.pending(self.path())[:SETTLED_PENDING_KEPT]]
        final = self._output.final_output if self._output else None
        if final is not None and len(json.dumps(final, default=str)) <= SETTLED_OUTPUT_BYTES:
            status.final_output = final
        return status  # type: ignore[return-value]

    def _status(self, kind: type[RunStatus] = RunStatus, *, full: bool = True) -> RunStatus:
        info = workflow.info()
        graph = self.s.graph
        current = graph.agents.get(self.s.current_agent) if graph else None
        return kind(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            phase=self.phase(),
            agent=self.inp.agent,
            current_agent=current.id if current else None,
            current_agent_name=current.name if current else None,
            turn=self.s.turn,
            pending=self.book.pending(self.path(), info.workflow_id) if full else [],
            decisions=self.book.all_decisions() if full else [],
            refused=self.s.refused if full else [],
            usage=self.s.usage,
            items=len(self.s.input_items) + len(self.s.new_items),
            final_output=self._output.final_output if self._output and full else None,
            error=self._error,
            continued_as_new=self._continuing,
        )

    def _agent(self) -> AgentSpec:
        assert self.s.graph is not None
        return self.s.graph.agents[self.s.current_agent]

    def _agent_name(self) -> str | None:
        graph = self.s.graph
        if graph is None or self.s.current_agent not in graph.agents:
            return None
        return graph.agents[self.s.current_agent].name

    def _add_item(self, kind: Any, raw: dict[str, Any], agent: AgentSpec) -> None:
        self.s.new_items.append(
            RunItem(type=kind, agent_id=agent.id, agent_name=agent.name, raw_item=raw)
        )
        if kind == "message_output_item":
            self._emit("message", text=message_text(raw))
        elif kind in ("tool_call_item", "handoff_call_item"):
            self._emit(
                "tool_called",
                call_id=raw.get("call_id"),
                tool=raw.get("name"),
                data={"arguments": _preview(str(raw.get("arguments", "")))},
            )
        elif kind in ("tool_call_output_item", "handoff_output_item"):
            self._emit(
                "tool_finished",
                call_id=raw.get("call_id"),
                text=_preview(str(raw.get("output", ""))),
            )


def _query_text(args: tuple[Any, ...]) -> str:
    """A query's single string argument (anything else: empty)."""
    if len(args) != 1:
        return ""
    value = args[0]
    if isinstance(value, str):
        return value
    raw = getattr(value, "payload", None)
    if raw is None or raw.metadata.get("encoding") != b"json/plain" or len(raw.data) > 2048:
        return ""
    try:
        text = json.loads(raw.data)
    except ValueError:
        return ""
    return text if isinstance(text, str) else ""


def _brief(p: PendingApproval) -> PendingApproval:
    """A pending call with its long texts cut (for results stored in history)."""
    request = p.request
    if request is not None:
        request = request.model_copy(
            update={
                "message": _preview(request.message, 1000),
                "preview": _preview(request.preview, 1000) if request.preview else None,
            }
        )
    return p.model_copy(update={"arguments": _preview(p.arguments, 1000), "request": request})


def _size(value: Any) -> int:
    """Encoded size of a payload (before the codec, which adds a few bytes)."""
    return len(workflow.payload_converter().to_payload(value).data)


def _start_problem(inp: RunInput) -> str | None:
    """Why a start input cannot run (trust, bounds), or `None`."""
    problem = trust_problem(inp, workflow.info())
    if problem is not None:
        return problem
    if inp.carried is None and not inp.agent:
        return "agent must name a registered agent"
    if len(inp.agent) > MAX_NAME_CHARS:
        return f"agent is {len(inp.agent)} characters; the limit is {MAX_NAME_CHARS}"
    problems = run_config_problems(inp.run_config, inp.max_turns)
    if problems:
        return "; ".join(problems)
    if inp.carried is None and inp.context is not None:
        size = len(json.dumps(inp.context))
        if size > MAX_CONTEXT_BYTES:
            return f"context is {size} bytes; the limit is {MAX_CONTEXT_BYTES}"
    return None
