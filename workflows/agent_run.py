"""`AgentRun`: one durable agent run.

The loop: ask the model for the next step (an activity), decide what happens to each tool call
(`workflows.turn`: run, refuse, decide by rule or policy, or wait for a person), run the allowed
calls (activities, side by side), and loop until the model gives a final output. A call that
needs a person waits on `workflow.wait_condition` until a decision arrives (update `approve` /
`reject` / `decide`, or the same-named signals) or its deadline passes.

The class holds the handlers and the loop; the state is one model (`CarriedState`, what
continue-as-new carries); the rest has its own module (`book`, `turn`, `decisions`, `steps`,
`hooks`, `nested`, `visibility`, `events`, `inputs`, `policy_apply`). No user code runs here.
"""

from __future__ import annotations

import asyncio
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from hitl.items import (
        BadInput,
        FunctionCall,
        call_output,
        message_text,
        normalize_input,
        parse_model_output,
    )
    from hitl.limits import (
        MAX_SIGNAL_BYTES,
        MAX_START_BYTES,
        MAX_WAITING_UPDATES,
    )
    from hitl.wire import (
        HANDLER_HELP,
        QUERY_MAIL,
        QUERY_REPORT,
        QUERY_SNAPSHOT,
        QUERY_STATUS,
        QUERY_TRANSCRIPT,
        SIGNAL_APPROVE,
        SIGNAL_CHILD_REPORT,
        SIGNAL_FROM_ROOT,
        SIGNAL_HELP,
        SIGNAL_REJECT,
        UPDATE_ANSWER,
        UPDATE_APPROVE,
        UPDATE_DECIDE,
        UPDATE_EXTEND,
        UPDATE_PREVIEW_EDIT,
        UPDATE_REJECT,
        UPDATE_RESOLVE,
        UPDATE_WAIT,
        WORKFLOW_TYPE,
        AgentSpec,
        CallPlan,
        CallRecord,
        ChildReport,
        DecisionRecord,
        EditPreview,
        Extension,
        FromRoot,
        InputAnswer,
        Phase,
        Resolution,
        RunErrorInfo,
        RunInput,
        RunOutput,
        RunSnapshot,
        RunStatus,
        TranscriptPage,
        TranscriptQuery,
        TurnInfo,
    )
    from hitl.workflows import (
        calls,
        compaction,
        elicitation,
        hooks,
        nested,
        policy_apply,
        previews,
        tracing,
        turn,
        uncertain,
        visibility,
    )
    from hitl.workflows import status as answers
    from hitl.workflows.book import ApprovalBook
    from hitl.workflows.decisions import Decisions
    from hitl.workflows.events import Events
    from hitl.workflows.failures import RunFailure
    from hitl.workflows.inputs import (
        Waiters,
        initial_state,
        query_text,
        read_one,
        read_wait,
        refusal,
        start_problem,
    )
    from hitl.workflows.notices import Notices
    from hitl.workflows.steps import Steps, output_text

DEFAULT_MAX_TURNS = 10
START_EXAMPLE = '{"agent": "<registered agent name>", "input": "..."}'
COMPACT_PATCH = "hitl-compact-while-parked"
"""Runs recorded before continue-as-new could happen while parked replay without it."""


@workflow.defn(name=WORKFLOW_TYPE)
class AgentRun:
    """The durable agent loop (see the module docstring)."""

    @workflow.init
    def __init__(self, *args: Any) -> None:
        # Any start input is read here, however many payloads and whatever they hold: a
        # malformed or untrusted one fails the run with a typed `UserError` instead of failing
        # every workflow task forever, and internal fields count only when the server vouches
        # for them (see `inputs.trust_problem`).
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
            problem = start_problem(inp)
            if problem is not None:
                raise refusal("UserError", problem)
        except ApplicationError as err:
            self._bad_input = err.message
            inp = RunInput(agent="")
        self.inp = inp
        self.state = initial_state(inp)
        self.book = ApprovalBook(self.state, signed_run=inp.run_config.signed_decisions)
        self.steps = Steps(inp, self.state)
        self.decisions = Decisions(self)
        self.notices = Notices(self)
        self._waiters = Waiters(MAX_WAITING_UPDATES)
        self.events = Events(
            self,
            WorkflowStream(prior_state=inp.carried.stream if inp.carried else None),
            self._waiters,
        )
        self._child = nested.ChildSide(self) if inp.parent is not None else None
        self.output: RunOutput | None = None
        self.error: RunErrorInfo | None = None
        self.continuing = False
        self._no_compaction = False
        self.trace = tracing.RunTracer(False, {})
        self.published = visibility.Publisher(self)
        policy_apply.install(self)  # the `apply_policy` update (an admin's new version)

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
            self.output = await self._loop()
            for task in background:
                task.cancel()
        except BaseException as exc:
            if not isinstance(exc, RunFailure):
                if is_cancelled_exception(exc) and workflow.patched("hitl-cancelled-status"):
                    # Cancelled while parked or running: the inbox must not keep listing it.
                    # (Patched: runs cancelled before this change replay without the upsert.)
                    self.published.cancelled = True
                    self.published.publish()
                raise
            self.error = exc.info
            self.trace.end_run(error=exc.info.type)
            self.published.publish()
            self.events.emit("run_failed", text=exc.info.message, data={"type": exc.info.type})
            await self._finish_handlers()
            raise ApplicationError(
                exc.info.message, exc.info.details, type=exc.info.type, non_retryable=True
            ) from None
        self.trace.end_run()
        self.published.publish()
        self.events.emit("final_output", text=output_text(self.output.final_output))
        if self.inp.session:
            await self.steps.save_session()
        await self._finish_handlers()
        return self.output

    async def _start(self) -> None:
        """Pin the graph (a top-level run), take the input, check input guardrails."""
        inp, s = self.inp, self.state
        patched = False
        if inp.carried is None and workflow.unsafe.is_replaying():
            # Runs started by the code before the resolution said so carry the patch marker;
            # replaying reads it (and writes nothing). New runs never write it.
            patched = workflow.patched(visibility.INBOX_PATCH)
        if s.graph is None:
            resolved = await self.steps.resolve()
            s.graph, s.search_attributes = resolved.graph, resolved.search_attributes
            s.directory, s.notify = resolved.directory, resolved.notify
            s.policy = resolved.policy
            s.run_call_ids, s.attributes = resolved.run_call_ids, resolved.attributes
            s.outcomes_attribute = resolved.search_attributes and resolved.outcomes_attribute
            s.current_agent, s.tracing = resolved.graph.root, resolved.tracing
            if inp.carried is None:
                s.inbox_memo = inp.parent is None and (resolved.inbox_memo or patched)
                s.inbox_rounds = s.inbox_memo and resolved.inbox_rounds
        self.trace = tracing.start(self)
        if inp.carried is None:
            try:
                own = normalize_input(inp.input)
            except BadInput as exc:
                raise RunFailure("UserError", str(exc)) from None
            history = await self.steps.load_session() if inp.session else []
            s.own_input, s.input_items = own, [*history, *own]
            await hooks.guardrails(self, "input", self.agent(), subject=inp.input)
        for rec in self.book.awaiting():  # a parked turn carried over: its waits go on
            self.trace.open_wait(rec)

    async def _finish_handlers(self) -> None:
        # Stream subscribers long-poll with updates; release them so the run can close.
        self.events.stream.detach_pollers()
        await self.notices.drain()
        await workflow.wait_condition(workflow.all_handlers_finished)

    async def _loop(self) -> RunOutput:
        s = self.state
        max_turns = self.inp.max_turns or self.inp.run_config.max_turns or DEFAULT_MAX_TURNS
        if s.open_turn is not None:
            # This run continued as new while its turn waited for people: finish that turn.
            await self._finish_turn(self.agent(), s.calls)
        while True:
            if compaction.suggested(self.inp) and s.turns_here > 0:
                await self._continue_as_new()
            if s.turn >= max_turns:
                return await hooks.max_turns_exceeded(self, max_turns)
            agent = self.agent()
            streaming = self.inp.run_config.stream_text_deltas
            self.events.streaming += streaming
            try:
                attrs = {"hitl.agent": agent.name, "hitl.model": agent.model.name}
                with self.trace.span("hitl.model_call", **attrs, **{"hitl.turn": s.turn}):
                    plan = turn.plan_request(agent, self.book, self.inp.run_config, s.policy)
                    response = await self.steps.call_model(agent, plan)
            finally:
                self.events.streaming -= streaming
            s.turn += 1
            s.turns_here += 1
            s.usage = s.usage.add(response.usage)
            parsed = parse_model_output(response.output)
            for msg in parsed.messages:
                self.events.add_item("message_output_item", msg, agent)
            self.events.add_others(parsed.others, agent)
            if parsed.calls:
                await self._run_turn(agent, parsed.calls, response.plans)
            elif response.has_final_output or parsed.messages:
                final = (
                    response.final_output
                    if response.has_final_output
                    else message_text(parsed.messages[-1])
                )
                await hooks.guardrails(self, "output", agent, final_output=final)
                return self.finish(final, agent)
            else:
                self._count_bad_turn("the model returned neither a message nor a tool call")

    def finish(self, final: Any, agent: AgentSpec) -> RunOutput:
        """The run's result (`status.result`)."""
        return answers.result(self, final, agent)

    def _count_bad_turn(self, why: str) -> None:
        self.state.bad_turns += 1
        limit = self.inp.run_config.max_consecutive_bad_turns
        if self.state.bad_turns >= limit:
            raise RunFailure(
                "ModelBehaviorError",
                f"the model produced {self.state.bad_turns} unusable turns in a row (last: {why})",
            )

    # ================================================================= a turn of tool calls

    async def _run_turn(
        self, agent: AgentSpec, calls: list[FunctionCall], given: list[CallPlan] | None = None
    ) -> None:
        cfg, s = self.inp.run_config, self.state
        assert s.graph is not None
        start = len(s.new_items)
        opened = turn.open_turn(
            agent,
            calls,
            self.book,
            s.graph.agents,
            s.turn,
            cfg.max_tool_argument_bytes,
            own_ids=s.run_call_ids,
        )
        for call, rec in zip(calls, opened.records, strict=True):
            kind = "handoff_call_item" if agent.handoff(call.name) else "tool_call_item"
            self.events.add_item(kind, call.raw, agent, call_id=rec.call_id)
        self.book.begin_turn(opened.records)
        s.open_turn = TurnInfo(
            start=start, handoff_target=opened.handoff_target, handoff_call=opened.handoff_call
        )
        planned = turn.to_plan(agent, opened.records, s.policy)
        plans = {}
        if planned:
            # Planned with the model call when it could (no activity, no marker); else here.
            ready = turn.given_plans(planned, given)
            if ready is None:
                skip = turn.skip_policy(agent, self.book, cfg, planned)
                ready = (await self.steps.plan(agent, planned, skip)).plans
            for plan in ready:
                if plan.tripwire is not None:
                    t = plan.tripwire
                    raise RunFailure(t.type, t.message, t.details)
            plans = turn.apply_plans(opened, planned, ready, s.verdicts)
        for rec in turn.settle(agent, opened, plans, self.book, cfg, workflow.now(), s.directory):
            self.events.announce_request(rec.call_id, rec.tool_name, rec.request, rec)
            self.trace.open_wait(rec)
        self.events.announce_decisions()
        why = turn.bad_turn(opened)
        if why is not None:
            self._count_bad_turn(why)
        else:
            s.bad_turns = 0
        await self._finish_turn(agent, opened.records)

    async def _finish_turn(self, agent: AgentSpec, records: list[CallRecord]) -> None:
        """Take every call to an output (waiting for people as needed), then close the turn."""
        drives = asyncio.gather(*(calls.drive(self, agent, r) for r in records if r.output is None))
        while not drives.done():
            await workflow.wait_condition(lambda: drives.done() or self._should_compact())
            if not drives.done() and self._should_compact():
                if workflow.patched(COMPACT_PATCH):
                    await self._continue_as_new()
                self._no_compaction = True
        await drives
        info, self.state.open_turn = self.state.open_turn, None
        handoff_call = info.handoff_call if info else None
        for rec in records:
            kind = "handoff_output_item" if rec.call_id == handoff_call else "tool_call_output_item"
            output = call_output(rec.call_type, rec.model_id, rec.output or "")
            self.events.add_item(kind, output, agent, call_id=rec.call_id)
        self.book.end_turn()
        if info is not None and info.handoff_target is not None:
            previous = agent.name
            # (The transcript names the handoff's call by the model's id.)
            model_id = next((r.model_id for r in records if r.call_id == handoff_call), "")
            await hooks.filter_handoff(self, agent, model_id, info.handoff_target, info.start)
            self.state.current_agent = info.handoff_target
            self.events.emit("handoff", data={"from": previous, "to": self.agent_name()})
            self.trace.event(
                "hitl.handoff", **{"hitl.from": previous, "hitl.to": self.agent_name()}
            )

    # ================================================================= continue-as-new

    def _should_compact(self) -> bool:
        """Parked, with a long history (or many updates), and nothing in flight to lose."""
        return (
            not self._no_compaction
            and not self.continuing
            and self.phase() == "awaiting_approval"
            and not self.book.children
            and not (self._child is not None and self._child.careful and self._child.reading)
            and compaction.suggested(self.inp)
        )

    async def _continue_as_new(self) -> NoReturn:
        await compaction.carry_on(self, self.published.carried_memo())

    # ================================================================= decisions

    @workflow.update(name=UPDATE_APPROVE, description=HANDLER_HELP[UPDATE_APPROVE])
    async def approve(self, *args: Any) -> DecisionRecord:
        """Approve one pending call: `{"call_id": "...", "approver": "you", "always": false}`."""
        return await self.decisions.approve(args)

    @approve.validator
    def _validate_approve(self, *args: Any) -> None:
        self.decisions.validate("approve", args)

    @workflow.update(name=UPDATE_REJECT, description=HANDLER_HELP[UPDATE_REJECT])
    def reject(self, *args: Any) -> DecisionRecord:
        """Reject one pending call: `{"call_id": "...", "message": "why (shown to the model)"}`."""
        return self.decisions.decide("reject", self.decisions.read(args, "reject"), "update")

    @reject.validator
    def _validate_reject(self, *args: Any) -> None:
        self.decisions.validate("reject", args)

    @workflow.update(name=UPDATE_RESOLVE, description=HANDLER_HELP[UPDATE_RESOLVE])
    def resolve(self, *args: Any) -> Resolution:
        """Settle an uncertain call: `{"call_id": "...", "outcome": "happened", "output": ""}`."""
        return uncertain.resolve(self, args)

    @resolve.validator
    def _validate_resolve(self, *args: Any) -> None:
        with self.decisions.logged("resolve", args):
            uncertain.check(self, uncertain.read(args))

    @workflow.update(name=UPDATE_ANSWER, description=HANDLER_HELP[UPDATE_ANSWER])
    def answer(self, *args: Any) -> InputAnswer:
        """Answer a tool's question: `{"call_id": "...", "content": {"confirm": true}}`."""
        return elicitation.answer(self, args)

    @answer.validator
    def _validate_answer(self, *args: Any) -> None:
        with self.decisions.logged("answer", args):
            elicitation.check(self, elicitation.read(args))

    @workflow.update(name=UPDATE_PREVIEW_EDIT, description=HANDLER_HELP[UPDATE_PREVIEW_EDIT])
    async def preview_edit(self, *args: Any) -> EditPreview:
        """How a call would read with edited arguments: `{"call_id": "...", "arguments": {}}`."""
        return await previews.preview(self.decisions, args)

    @preview_edit.validator
    def _validate_preview_edit(self, *args: Any) -> None:
        previews.validate(self.decisions, args)

    @workflow.update(name=UPDATE_EXTEND, description=HANDLER_HELP[UPDATE_EXTEND])
    def extend(self, *args: Any) -> Extension:
        """Move a pending call's deadline later: `{"call_id": "...", "seconds": 86400}`."""
        return self.decisions.extend(args)

    @extend.validator
    def _validate_extend(self, *args: Any) -> None:
        self.decisions.validate_extend(args)

    @workflow.update(name=UPDATE_DECIDE, description=HANDLER_HELP[UPDATE_DECIDE])
    async def decide(self, *args: Any) -> RunStatus:
        """Apply several decisions at once; with `wait`, return once the run settles again."""
        req = self.decisions.read_batch(args)
        made = self.decisions.decide_batch(req)
        if req.wait:
            await self._wait_settled()
        return answers.settled_status(self, made, brief=req.brief, items=req.items, held=req.held)

    @decide.validator
    def _validate_decide(self, *args: Any) -> None:
        with self.decisions.logged("decide", args):
            req = self.decisions.read_batch(args)
            if req.wait:
                self._waiters.check()
            self.decisions.admit_batch(req)

    @workflow.update(name=UPDATE_WAIT, description=HANDLER_HELP[UPDATE_WAIT])
    async def wait(self, *args: Any) -> RunStatus:
        """Return once the run waits for a person, finishes, or continues as new."""
        req = read_wait(args)
        await self._wait_settled()
        return answers.settled_status(self, [], items=req.items, held=req.held)

    @wait.validator
    def _validate_wait(self, *args: Any) -> None:
        # An accepted update is echoed in history: keep it small.
        read_wait(args)
        self._waiters.check()

    async def _wait_settled(self) -> None:
        self._waiters.enter()
        try:
            await workflow.wait_condition(self._settled)
        finally:
            self._waiters.leave()

    @workflow.signal(name=SIGNAL_APPROVE, description=SIGNAL_HELP)
    def approve_signal(self, *args: Any) -> None:
        """Approve by signal (Temporal UI / `temporal workflow signal`); refusals show in status."""
        self.decisions.by_signal("approve", args)

    @workflow.signal(name=SIGNAL_REJECT, description=SIGNAL_HELP)
    def reject_signal(self, *args: Any) -> None:
        """Reject by signal; refusals show in status."""
        self.decisions.by_signal("reject", args)

    # ================================================================= nested runs

    @workflow.signal(name=SIGNAL_CHILD_REPORT)
    def _on_child_report(self, *args: Any) -> None:
        nested.on_child_report(self, args)

    @workflow.signal(name=SIGNAL_FROM_ROOT)
    def _on_from_root(self, *args: Any) -> None:
        if self._child is None:
            self.decisions.refuse(
                SIGNAL_FROM_ROOT,
                "",
                "NotRoot",
                "this is not a nested run; decisions are made with the approve/reject updates",
            )
            return
        self._child.mail_stale = True  # read it from the parent itself

    @workflow.query(name=QUERY_REPORT)
    def _report(self, *args: Any) -> ChildReport:
        return nested.report(self)

    @workflow.query(name=QUERY_MAIL)
    def _mail(self, *args: Any) -> FromRoot:
        call_id = query_text(args)
        return nested.mail_for(self, call_id) if call_id else FromRoot(seq=0)

    # ================================================================= queries

    @workflow.query(name=QUERY_STATUS, description=HANDLER_HELP[QUERY_STATUS])
    def status(self, *args: Any) -> RunStatus:
        """Phase, current agent and pending approvals."""
        return answers.status(self)

    @workflow.query(name=QUERY_SNAPSHOT, description=HANDLER_HELP[QUERY_SNAPSHOT])
    def snapshot(self, *args: Any) -> RunSnapshot:
        """Status plus every item produced so far."""
        return answers.snapshot(self)

    @workflow.query(name=QUERY_TRANSCRIPT, description=HANDLER_HELP[QUERY_TRANSCRIPT])
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
        items = [*self.state.input_items, *(i.raw_item for i in self.state.new_items)]
        return TranscriptPage(items=items[q.start : q.end], total=len(items))

    # ================================================================= what operators see

    async def _keep_published(self) -> None:
        """Keep search attributes, the inbox memo and the UI's details in step with the run."""
        while True:
            await workflow.wait_condition(self.published.changed)
            self.published.publish()

    def note_pause(self) -> None:
        """Tell event subscribers when the run starts or stops waiting for people only."""
        self.events.note_pause()

    # ================================================================= helpers

    def phase(self) -> Phase:
        """Where the run is (see `Phase`)."""
        if self.output is not None:
            return "completed"
        if self.error is not None:
            return "failed"
        if self.state.graph is None:
            return "starting"
        if self.steps.busy == 0 and self.book.has_pending() and not self.book.active():
            return "awaiting_approval"
        return "running"

    def finished(self) -> bool:
        """The run completed or failed (it takes no more decisions)."""
        return self.output is not None or self.error is not None

    def _settled(self) -> bool:
        return self.continuing or self.phase() in ("awaiting_approval", "completed", "failed")

    def path(self) -> list[str]:
        """Agents and agent tools from the root to this run (empty for the root)."""
        return self.inp.parent.path if self.inp.parent else []

    def agent(self) -> AgentSpec:
        """The agent whose turn it is."""
        assert self.state.graph is not None
        return self.state.graph.agents[self.state.current_agent]

    def agent_name(self) -> str | None:
        """Its name (`None` before the graph is pinned)."""
        graph = self.state.graph
        agent = graph.agents.get(self.state.current_agent) if graph else None
        return agent.name if agent else None

    def announce_request(self, call_id: str, tool: str, request: Any, call: Any = None) -> None:
        """An `approval_requested` event, once per call (for nested runs' calls)."""
        self.events.announce_request(call_id, tool, request, call)
