"""`AgentRun`: one durable agent run.

A small deterministic state machine: ask the model for the next step (activity), decide which
tool calls run, which wait for a person and which are refused, run the allowed ones
(activities), and loop until the model gives a final output. A call that needs approval is
parked in the approval book and the run waits on `workflow.wait_condition` until a decision
arrives (update `approve` / `reject` / `decide`, or the same-named signals). No user code runs
here: predicates, instructions, tools and formatters all run in activities.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta
from typing import Any, Literal, NoReturn, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy, SearchAttributeKey
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    FailureError,
    is_cancelled_exception,
)
from temporalio.exceptions import TimeoutError as TemporalTimeoutError
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from hitl.wire import (
        ACT_CALL_MODEL,
        ACT_EXECUTE_TOOL,
        ACT_FILTER_HANDOFF,
        ACT_HANDLE_RUN_ERROR,
        ACT_LOAD_SESSION,
        ACT_PLAN_TOOLS,
        ACT_REJECTION_TEXT,
        ACT_RESOLVE_AGENT,
        ACT_RUN_GUARDRAILS,
        ACT_SAVE_SESSION,
        EVENTS_TOPIC,
        SA_AGENT,
        SA_PENDING_SINCE,
        SA_PENDING_TOOLS,
        SA_STATUS,
        WORKFLOW_TYPE,
        AgentGraph,
        AgentSpec,
        CallModelInput,
        CallRecord,
        CarriedState,
        ChildReport,
        DecideInput,
        DecisionInput,
        DecisionKind,
        DecisionRecord,
        DecisionVia,
        ExecuteToolInput,
        FromRoot,
        GuardrailsInput,
        GuardrailsOutput,
        HandleRunErrorInput,
        HandleRunErrorOutput,
        HandoffFilterInput,
        HandoffFilterOutput,
        ModelResponse,
        ModelTool,
        ParentLink,
        Phase,
        PlanCall,
        PlanToolsInput,
        PlanToolsOutput,
        PolicyDecision,
        RefusedDecision,
        RejectionTextInput,
        RejectionTextOutput,
        ResolveAgentInput,
        ResolvedRun,
        RunContextData,
        RunErrorInfo,
        RunEvent,
        RunInput,
        RunItem,
        RunOutput,
        RunSnapshot,
        RunStatus,
        SessionAppend,
        SessionItems,
        SessionRef,
        SettledStatus,
        ToolOutput,
        ToolSpec,
        TranscriptPage,
        TranscriptQuery,
        TranscriptRef,
        Usage,
        WaitInput,
        child_workflow_id,
    )
    from workflows.book import ApprovalBook, ChildView, parse_payload, refusal
    from workflows.items import (
        REJECTION_MESSAGE,
        TOOL_ERROR_PREFIX,
        BadInput,
        FunctionCall,
        assistant_message,
        check_arguments,
        function_output,
        message_text,
        model_input,
        normalize_input,
        parse_model_output,
    )
    from workflows.tracing import RunTracer

SA_STATUS_KEY = SearchAttributeKey.for_keyword(SA_STATUS)
SA_PENDING_TOOLS_KEY = SearchAttributeKey.for_keyword_list(SA_PENDING_TOOLS)
SA_AGENT_KEY = SearchAttributeKey.for_keyword(SA_AGENT)
SA_PENDING_SINCE_KEY = SearchAttributeKey.for_datetime(SA_PENDING_SINCE)

Visible = tuple[str, tuple[str, ...], datetime | None]
Out = TypeVar("Out", bound=BaseModel)
"""(status, pending tool names, waiting since): what operators see of a run."""

SIGNAL_CHILD_REPORT = "__hitl_child_report"
SIGNAL_FROM_ROOT = "__hitl_from_root"

DEFAULT_MAX_TURNS = 10
MAX_REFUSED_KEPT = 50

# Errors a model call must not retry: they need a change by a person, not another attempt.
MODEL_NON_RETRYABLE = ["ModelBehaviorError", "ModelProviderError", "UserError", "PayloadsTooLarge"]
TOOL_NON_RETRYABLE = ["ToolArgumentsInvalid", "ToolNotFound", "PayloadsTooLarge"]
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=8,
    non_retryable_error_types=MODEL_NON_RETRYABLE,
)
LOCAL_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=5,
    non_retryable_error_types=["UserError", "ModelBehaviorError"],
)
MODEL_TIMEOUT = timedelta(seconds=180)
LOCAL_TIMEOUT = timedelta(seconds=30)


class RunFailure(Exception):
    """Internal: ends the run as failed with a typed reason (after handlers finish)."""

    def __init__(self, type_name: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.info = RunErrorInfo(type=type_name, message=message, details=details or {})


# Local activities fail with the activity's own error (not wrapped in an ActivityError).
ACTIVITY_FAILURES = (ActivityError, ApplicationError, TemporalTimeoutError)


def _failure_from_activity(err: FailureError, what: str) -> RunFailure:
    cause: BaseException | None = err
    while isinstance(cause, ActivityError) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, CancelledError):
        raise err  # the run is being cancelled: let cancellation propagate
    if isinstance(cause, ApplicationError) and cause.type:
        return RunFailure(cause.type, cause.message)
    if isinstance(cause, TemporalTimeoutError):
        return RunFailure("ModelProviderError", f"{what} timed out: {cause.message}")
    message = cause.message if isinstance(cause, FailureError) else str(cause or err)
    return RunFailure("RunFailedError", f"{what} failed: {message}")


def _preview(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more]"


def _error_text(err: ActivityError) -> str:
    cause: BaseException | None = err.cause
    while isinstance(cause, ActivityError) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, TemporalTimeoutError):
        return f"the tool timed out ({cause.type.name.lower() if cause.type else 'timeout'})"
    if isinstance(cause, ApplicationError):
        return cause.message
    return str(cause or err)


@workflow.defn(name=WORKFLOW_TYPE)
class AgentRun:
    """The durable agent loop (see the module docstring)."""

    @workflow.init
    def __init__(self, raw: Any) -> None:
        # The input is decoded leniently and validated here: a malformed start from the CLI
        # (`--input '{"agnt": ...}'`) fails the run with a typed `UserError` instead of failing
        # every workflow task forever.
        self._bad_input: str | None = None
        try:
            inp = parse_payload(RunInput, raw, "AgentRun input")
        except ApplicationError as err:
            self._bad_input = err.message
            inp = RunInput(agent="")
        self._inp = inp
        self._graph: AgentGraph | None = None
        self._current: str = ""
        self._input_items: list[dict[str, Any]] = []
        self._new_items: list[RunItem] = []
        self._turn = 0
        self._bad_turns = 0
        self._usage = Usage()
        self._book = ApprovalBook()
        self._refused: list[RefusedDecision] = []
        self._continued_runs = 0
        self._busy = 0
        self._output: RunOutput | None = None
        self._error: RunErrorInfo | None = None
        self._continuing = False
        self._cancelled = False
        self._sa = False
        # What operators last saw (search attributes, UI details); nothing is published for a
        # run that only started, so a run that never pauses costs one upsert (at the end).
        self._published: Visible = ("running", (), None)
        self._session_base = 0
        self._own_input: list[dict[str, Any]] = []
        cfg = inp.run_config
        self._ctx: RunContextData | None = (
            RunContextData(
                value=inp.context, type=cfg.context_type, deserializer=cfg.context_deserializer
            )
            if inp.context is not None
            else None
        )
        """The run context: tools may change its value; a resume may replace it."""
        self._paused = False
        self._trace = RunTracer(False, {})
        self._announced: set[str] = set()
        self._stream = WorkflowStream(prior_state=inp.carried.stream if inp.carried else None)
        self._events = self._stream.topic(EVENTS_TOPIC, type=RunEvent)
        self._seen_from_root = 0
        # A nested run reports only changes that matter to its parent: nothing while it merely
        # runs, then whenever its pending approvals, phase or acknowledged decisions change.
        self._reported: tuple[Any, ...] = ("running", (), 0)
        if inp.graph is not None:
            # A nested run: the root's pinned graph, its standing rules, no search attributes
            # (its approvals are listed and decided on the root run).
            self._graph = inp.graph
            self._current = inp.start_agent or inp.graph.root
            self._book = ApprovalBook(always_rules=inp.always_rules)
        carried = inp.carried
        if carried is not None:
            self._graph = carried.graph
            self._current = carried.current_agent
            self._input_items = carried.input_items
            self._new_items = carried.new_items
            self._turn = carried.turn
            self._bad_turns = carried.bad_turns
            self._usage = carried.usage
            self._book = ApprovalBook(
                always_rules=carried.always_rules, decisions=carried.decisions
            )
            self._refused = carried.refused
            self._continued_runs = carried.continued_runs
            self._sa = carried.search_attributes
            self._session_base = carried.session_base
            self._own_input = carried.own_input
            if carried.context is not None:
                self._ctx = carried.context
            self._announced = {f"decided:{d.call_id}" for d in carried.decisions}
            self._seen_from_root = carried.seen_from_root

    # ================================================================= main loop

    @workflow.run
    async def run(self, raw: Any) -> RunOutput:
        inp = self._inp
        if self._bad_input is not None:
            raise ApplicationError(
                f"{self._bad_input} (expected "
                '{"agent": "<registered agent name>", "input": "..."})',
                type="UserError",
                non_retryable=True,
            )
        try:
            tracing = bool(
                (inp.parent and inp.parent.tracing) or (inp.carried and inp.carried.tracing)
            )
            if self._graph is None:
                resolved = await self._resolve()
                self._graph, self._sa = resolved.graph, resolved.search_attributes
                self._current = self._graph.root
                tracing = resolved.tracing
            self._start_tracing(tracing)
            if inp.carried is None:
                try:
                    own = normalize_input(inp.input)
                except BadInput as exc:
                    raise RunFailure("UserError", str(exc)) from None
                history = await self._load_session() if inp.session else []
                self._session_base = len(history)
                self._own_input = own
                self._input_items = [*history, *own]
                await self._guardrails("input", self._agent(), subject=inp.input)
            background = [asyncio.create_task(self._keep_published())]
            if inp.parent is not None:
                background.append(asyncio.create_task(self._keep_parent_informed()))
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
            failure = exc
            self._error = failure.info
            self._trace.end_run(error=failure.info.type)
            self._publish()
            self._emit("run_failed", text=failure.info.message, data={"type": failure.info.type})
            await self._finish_handlers()
            raise ApplicationError(
                failure.info.message,
                failure.info.details,
                type=failure.info.type,
                non_retryable=True,
            ) from None
        self._trace.end_run()
        self._publish()
        final = self._output.final_output
        self._emit("final_output", text=final if isinstance(final, str) else json.dumps(final))
        if inp.session:
            await self._save_session()
        await self._finish_handlers()
        return self._output

    async def _finish_handlers(self) -> None:
        # Stream subscribers long-poll with updates; release them so the run can close.
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)

    # ================================================================= tracing

    def _start_tracing(self, enabled: bool) -> None:
        cfg = self._inp.run_config
        attrs: dict[str, Any] = {
            "hitl.workflow_id": workflow.info().workflow_id,
            "hitl.agent": self._inp.agent,
            "hitl.workflow_name": cfg.workflow_name or self._inp.agent,
            "hitl.group_id": cfg.group_id,
        }
        for key, value in cfg.trace_metadata.items():
            attrs[f"hitl.metadata.{key}"] = (
                value if isinstance(value, str | int | float | bool) else json.dumps(value)
            )
        self._trace = RunTracer(enabled, attrs)
        self._trace.start_run(f"hitl.run {cfg.workflow_name or self._inp.agent}")

    def _sensitive(self, text: str | None) -> str | None:
        """Arguments and outputs go on spans only when the run asks for it."""
        if not self._inp.run_config.trace_include_sensitive_data:
            return None
        return _preview(text or "", 4000)

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
        cfg = self._inp.run_config
        own = agent.input_guardrails if kind == "input" else agent.output_guardrails
        run_level = cfg.input_guardrails if kind == "input" else cfg.output_guardrails
        if self._inp.parent is not None:
            run_level = []  # run-level guardrails apply to the root run only
        if not own and not run_level:
            return
        with self._trace.span(f"hitl.guardrails.{kind}", **{"hitl.agent": agent.name}):
            out = await self._local(
                ACT_RUN_GUARDRAILS,
                GuardrailsInput(
                    kind=kind,
                    root_agent=self._inp.agent,
                    agent_id=agent.id,
                    run_guardrails=run_level,
                    input=subject if isinstance(subject, str | list) else "",
                    final_output=final_output,
                    context=self._context(),
                    workflow_id=workflow.info().workflow_id,
                ),
                GuardrailsOutput,
                f"the {kind} guardrails",
                timeout=MODEL_TIMEOUT,
            )
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
        cfg = self._inp.run_config
        spec = next((h for h in agent.handoffs if h.agent_id == target), None)
        call = next(
            (i for i in self._new_items[turn_start:] if i.raw_item.get("call_id") == call_id), None
        )
        tool = call.raw_item.get("name") if call else (spec.tool_name if spec else "")
        spec = agent.handoff(str(tool)) or spec
        nest = cfg.nest_handoff_history
        if spec is not None and spec.nest_handoff_history is not None:
            nest = spec.nest_handoff_history
        has_filter = bool(spec and spec.input_filter) or bool(cfg.handoff_input_filter)
        if not has_filter and not nest:
            return
        out = await self._local(
            ACT_FILTER_HANDOFF,
            HandoffFilterInput(
                root_agent=self._inp.agent,
                from_agent_id=agent.id,
                handoff_tool=str(tool),
                to_agent_id=target,
                input_history=self._input_items,
                pre_handoff_items=self._new_items[:turn_start],
                new_items=self._new_items[turn_start:],
                run_filter=cfg.handoff_input_filter,
                nest=nest,
                mapper=cfg.handoff_history_mapper,
                context=self._context(),
            ),
            HandoffFilterOutput,
            "the handoff input filter",
        )
        self._input_items = out.input_history
        self._new_items = [*out.pre_handoff_items, *out.new_items]

    # ================================================================= sessions

    async def _load_session(self) -> list[dict[str, Any]]:
        assert self._inp.session is not None
        items = await self._local(
            ACT_LOAD_SESSION,
            SessionRef(session_id=self._inp.session, task_queue=workflow.info().task_queue),
            SessionItems,
            "loading the session",
            busy=False,
        )
        return items.items

    async def _save_session(self) -> None:
        """Append this run's turn to its session (once, even if the activity is retried)."""
        assert self._inp.session is not None
        turn = model_input(self._own_input, self._new_items)
        await workflow.execute_activity(
            ACT_SAVE_SESSION,
            SessionRef(
                session_id=self._inp.session,
                task_queue=workflow.info().task_queue,
                append=SessionAppend(run_id=workflow.info().workflow_id, items=turn),
            ),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
        )

    # ================================================================= events

    def _emit(self, kind: Any, **fields: Any) -> None:
        """Publish a `RunEvent` on the run's stream (no history event; rebuilt on replay)."""
        self._events.publish(
            RunEvent(type=kind, turn=self._turn, agent=self._agent_name(), **fields)
        )

    def _note_pause(self) -> None:
        """Emit `paused` / `resumed` when the run starts or stops waiting for people only."""
        paused = self._phase() == "awaiting_approval"
        if paused and not self._paused:
            self._emit("paused", data={"pending": [p.call_id for p in self._book.pending()]})
        elif self._paused and not paused and self._output is None and self._error is None:
            self._emit("resumed")
        self._paused = paused

    def _announce_request(self, call_id: str, tool: str, request: Any) -> None:
        if call_id in self._announced:
            return
        self._announced.add(call_id)
        self._emit(
            "approval_requested",
            call_id=call_id,
            tool=tool,
            text=request.title if request is not None else None,
            data={"message": request.message} if request is not None else {},
        )

    def _announce_decisions(self) -> None:
        for rec in self._book.all_decisions():
            key = f"decided:{rec.call_id}"
            if key in self._announced:
                continue
            self._announced.add(key)
            self._emit(
                "approval_decided",
                call_id=rec.call_id,
                tool=rec.tool_name,
                text=rec.kind,
                data={"source": rec.source, "approver": rec.approver, "message": rec.message},
            )
            self._trace.event(
                "hitl.approval_decision",
                **{
                    "hitl.agent": self._book.owner(rec.call_id),
                    "hitl.call_id": rec.call_id,
                    "hitl.tool": rec.tool_name,
                    "hitl.decision": rec.kind,
                    "hitl.decision.source": rec.source,
                    "hitl.decision.approver": rec.approver,
                },
            )

    def _agent_name(self) -> str | None:
        if self._graph is None or self._current not in self._graph.agents:
            return None
        return self._graph.agents[self._current].name

    async def _loop(self) -> RunOutput:
        max_turns = self._inp.max_turns or self._inp.run_config.max_turns or DEFAULT_MAX_TURNS
        while True:
            if self._should_continue_as_new():
                await self._continue_as_new()
            if self._turn >= max_turns:
                return await self._max_turns_exceeded(max_turns)
            agent = self._agent()
            response = await self._call_model(agent)
            self._turn += 1
            self._usage = self._usage.add(response.usage)
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
        return RunOutput(
            final_output=final,
            last_agent=agent.id,
            last_agent_name=agent.name,
            input_items=self._input_items,
            new_items=self._new_items,
            usage=self._usage,
            decisions=self._book.all_decisions(),
            turns=self._turn,
            run_id=workflow.info().run_id,
        )

    def _count_bad_turn(self, why: str) -> None:
        self._bad_turns += 1
        limit = self._inp.run_config.max_consecutive_bad_turns
        if self._bad_turns >= limit:
            raise RunFailure(
                "ModelBehaviorError",
                f"the model produced {self._bad_turns} unusable turns in a row (last: {why})",
            )

    # ================================================================= a turn of tool calls

    async def _run_turn(self, agent: AgentSpec, calls: list[FunctionCall]) -> None:
        cfg = self._inp.run_config
        now = workflow.now()
        records: list[CallRecord] = []
        handoff_target: str | None = None
        handoff_call: str | None = None
        turn_start = len(self._new_items)
        for call in calls:
            handoff = agent.handoff(call.name)
            kind = "handoff_call_item" if handoff else "tool_call_item"
            self._add_item(kind, call.raw, agent)
            rec = CallRecord(
                call_id=call.call_id,
                tool_name=call.name,
                agent_id=agent.id,
                agent_name=agent.name,
                arguments=call.arguments,
                turn=self._turn,
            )
            records.append(rec)
            if self._book.known(call.call_id):
                self._refuse(rec, f"Call id {call.call_id} was already used; ignoring this call.")
            elif handoff is not None:
                if handoff_target is None:
                    handoff_target, handoff_call = handoff.agent_id, call.call_id
                    target = self._spec(handoff.agent_id)
                    rec.output = json.dumps({"assistant": target.name})
                    rec.state = "done"
                else:
                    self._refuse(rec, "Multiple handoffs detected, ignoring this one.")
            elif agent.tool(call.name) is None:
                available = ", ".join(t.name for t in agent.tools) or "none"
                self._refuse(rec, f"Tool {call.name} not found. Available tools: {available}.")
            else:
                problem = check_arguments(call, cfg.max_tool_argument_bytes)
                if problem is not None:
                    self._refuse(rec, problem)
        self._book.begin_turn(records)

        to_plan = [
            r for r in records if r.state == "planning" and self._tool(agent, r).approval != "never"
        ]
        # (A tool with approval "never" needs no plan: nothing to ask, render or decide.)
        policies: dict[str, PolicyDecision] = {}
        by_policy: set[str] = set()  # refused by a guardrail: a policy's answer, not a mistake
        if to_plan:
            plans = await self._plan(agent, to_plan)
            for rec, plan in zip(to_plan, plans.plans, strict=True):
                if plan.tripwire is not None:
                    t = plan.tripwire
                    raise RunFailure(t.type, t.message, t.details)
                if plan.refusal is not None:
                    # Arguments the tool refuses are the model's mistake; a pre-approval
                    # guardrail's refusal is a policy's answer and not a bad turn.
                    self._refuse(rec, plan.refusal)
                    if plan.by_policy:
                        by_policy.add(rec.call_id)
                    continue
                # The graph pinned at run start decides whether a call needs a person: a
                # deploy that relaxes a tool's `needs_approval` does not relax parked runs.
                # Only predicates are evaluated with the code deployed now.
                pinned = self._tool(agent, rec).approval
                rec.needs_approval = plan.needs_approval or pinned == "always"
                rec.request = plan.request
                if plan.policy is not None:
                    policies[rec.call_id] = plan.policy
        now = workflow.now()
        for rec in records:
            if rec.state != "planning":
                continue
            if not rec.needs_approval:
                rec.state = "approved"
            elif self._book.apply_rule(rec, now):
                pass  # a standing always-approve / always-reject rule decided it
            elif rec.call_id in policies:
                self._book.decide_by(rec, policies[rec.call_id], now)
            elif cfg.auto_approve and self._tool(agent, rec).auto_approve:
                self._book.auto_approve(rec, now)  # both keys on: the run's and the tool's
            else:
                rec.state = "awaiting_approval"
                rec.requested_at = now
                spec = self._tool(agent, rec)
                rec.approvers = spec.approvers or cfg.approvers
                if spec.approval_timeout_seconds:
                    rec.deadline = now + timedelta(seconds=spec.approval_timeout_seconds)
                self._announce_request(rec.call_id, rec.tool_name, rec.request)
                self._trace.open(
                    rec.call_id,
                    "hitl.approval_wait",
                    **{
                        "hitl.tool": rec.tool_name,
                        "hitl.call_id": rec.call_id,
                        "hitl.agent": rec.agent_name,  # the tool's owner (the run's is root)
                    },
                )
        self._announce_decisions()

        mistakes = [r for r in records if r.call_id not in by_policy]
        if any(r.state == "refused" for r in mistakes) and all(
            r.state == "refused" for r in mistakes if r.call_id != handoff_call
        ):
            self._count_bad_turn("; ".join(r.output or "" for r in records if r.output))
        else:
            self._bad_turns = 0

        await asyncio.gather(*(self._drive(agent, r) for r in records if r.output is None))

        for rec in records:
            kind = "handoff_output_item" if rec.call_id == handoff_call else "tool_call_output_item"
            self._add_item(kind, function_output(rec.call_id, rec.output or ""), agent)
        self._book.end_turn()
        if handoff_target is not None:
            previous = agent.name
            await self._filter_handoff(agent, handoff_call or "", handoff_target, turn_start)
            self._current = handoff_target
            self._emit("handoff", data={"from": previous, "to": self._agent_name()})
            self._trace.event(
                "hitl.handoff", **{"hitl.from": previous, "hitl.to": self._agent_name()}
            )

    def _refuse(self, rec: CallRecord, message: str) -> None:
        rec.state = "refused"
        rec.output = message
        rec.is_error = True

    async def _drive(self, agent: AgentSpec, rec: CallRecord) -> None:
        """Take one call from its current state to an output."""
        tool = self._tool(agent, rec)
        if rec.state == "awaiting_approval":
            timeout = tool.approval_timeout_seconds
            try:
                await workflow.wait_condition(
                    lambda: rec.decision is not None,
                    timeout=timedelta(seconds=timeout) if timeout else None,
                )
            except TimeoutError:
                self._book.expire(
                    rec,
                    workflow.now(),
                    f"Approval for {rec.tool_name} expired after {timeout:g}s without a decision.",
                )
                self._announce_decisions()
        decision = rec.decision
        if decision is not None:
            self._trace.close(
                rec.call_id,
                **{
                    "hitl.decision": decision.kind,
                    "hitl.decision.source": decision.source,
                    "hitl.decision.approver": decision.approver,
                },
            )
        if decision is not None and decision.kind == "reject":
            rec.output = decision.message or await self._rejection_text(agent, rec)
            rec.state = "rejected"
            return
        rec.state = "running"
        self._emit("tool_started", call_id=rec.call_id, tool=rec.tool_name)
        if tool.kind == "agent":
            out = await self._run_nested(agent, rec, tool)
        else:
            out = await self._execute(agent, rec, tool.timeout_seconds)
        rec.output, rec.is_error, rec.state = out.output, out.is_error, "done"

    async def _run_nested(self, agent: AgentSpec, rec: CallRecord, tool: ToolSpec) -> ToolOutput:
        """Run an agent tool as a child workflow; its approvals surface and are decided here."""
        info = workflow.info()
        link = self._inp.parent
        try:
            text = json.loads(rec.arguments or "{}").get("input", "")
        except (json.JSONDecodeError, AttributeError):
            text = rec.arguments
        child_id = child_workflow_id(info.workflow_id, rec.call_id)
        token = str(workflow.uuid4())
        view = self._book.add_child(rec.call_id, child_id, token)
        child_input = RunInput(
            agent=self._inp.agent,
            input=str(text),
            context=self._inp.context,
            max_turns=self._inp.max_turns,
            run_config=self._inp.run_config,
            parent=ParentLink(
                workflow_id=info.workflow_id,
                call_id=rec.call_id,
                root_workflow_id=link.root_workflow_id if link else info.workflow_id,
                path=[*self._path(), agent.name, tool.name],
                call_path=[*(link.call_path if link else []), rec.call_id],
                tracing=self._trace.enabled,
                token=token,
            ),
            graph=self._graph,
            start_agent=tool.agent_id,
            always_rules=dict(self._book.always_rules),
        )
        handle = await workflow.start_child_workflow(
            WORKFLOW_TYPE,
            child_input,
            id=child_id,
            result_type=RunOutput,
            parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
            # No limit by default: a nested run may wait days for a person, like its root.
            execution_timeout=(
                timedelta(seconds=tool.run_timeout_seconds) if tool.run_timeout_seconds else None
            ),
            static_summary=f"{tool.name} for {agent.name}: {str(text)[:100]}",
        )
        forwarder = asyncio.create_task(self._forward_to(view, handle))
        try:
            out: RunOutput = await handle
        except ChildWorkflowError as err:
            cause: BaseException | None = err.cause
            message = cause.message if isinstance(cause, FailureError) else str(err)
            if tool.on_failure == "raise":
                kind = cause.type if isinstance(cause, ApplicationError) and cause.type else None
                raise RunFailure(kind or "RunFailedError", message) from None
            return ToolOutput(output=TOOL_ERROR_PREFIX + message, is_error=True)
        finally:
            view.done = True
            forwarder.cancel()
        final = out.final_output
        return ToolOutput(output=final if isinstance(final, str) else json.dumps(final))

    async def _forward_to(self, view: ChildView, handle: ChildWorkflowHandle[Any, Any]) -> None:
        """Forward decisions and standing rules made here to a nested run, in order."""
        while True:
            await workflow.wait_condition(view.has_mail)
            decisions, view.outbox = view.outbox, []
            view.rules_dirty = False
            view.seq += 1
            await handle.signal(
                SIGNAL_FROM_ROOT,
                FromRoot(
                    seq=view.seq,
                    decisions=decisions,
                    rules=dict(self._book.always_rules),
                    token=view.token,
                ),
            )

    async def _keep_parent_informed(self) -> None:
        """A nested run reports its pending approvals and phase to its parent."""
        link = self._inp.parent
        assert link is not None
        parent = workflow.get_external_workflow_handle(link.workflow_id)
        while True:
            await workflow.wait_condition(lambda: self._report_key() != self._reported)
            self._reported = self._report_key()
            await parent.signal(
                SIGNAL_CHILD_REPORT,
                ChildReport(
                    call_id=link.call_id,
                    phase=self._phase(),
                    pending=self._book.pending(self._path(), workflow.info().workflow_id),
                    seen=self._seen_from_root,
                    token=link.token,
                ),
            )

    def _report_key(self) -> tuple[Any, ...]:
        pending = self._book.pending()
        return (self._phase(), tuple(p.call_id for p in pending), self._seen_from_root)

    @workflow.signal(name=SIGNAL_CHILD_REPORT)
    def _on_child_report(self, report: ChildReport) -> None:
        view = self._book.children.get(report.call_id)
        if view is not None and report.token != view.token:
            self._record_refused(
                SIGNAL_CHILD_REPORT, report.call_id, "NotRoot", "not from the nested run"
            )
            return
        if view is not None and not view.done:
            view.report = report
            for p in view.pending():
                self._announce_request(f"{view.call_id}/{p.call_id}", p.tool_name, p.request)

    @workflow.signal(name=SIGNAL_FROM_ROOT)
    def _on_from_root(self, msg: FromRoot) -> None:
        link = self._inp.parent
        if link is None or msg.token != link.token:
            # Only the parent knows the token: no approval path bypasses the root.
            root = link.root_workflow_id if link else workflow.info().workflow_id
            self._record_refused(
                SIGNAL_FROM_ROOT,
                json.dumps(msg.model_dump(mode="json", exclude={"token"}))[:500],
                "NotRoot",
                f"decisions for this run are made on the root run {root}",
            )
            return
        now = workflow.now()
        # Decisions first, so the call a person decided is recorded as theirs; then the rules,
        # which decide this run's other waiting calls of the same tool.
        for rec in msg.decisions:
            problem = self._book.apply_forwarded(rec)
            if problem is not None:
                self._record_refused(rec.kind, rec.call_id, "AlreadyDecided", problem)
        for kind_tool, kind in msg.rules.items():
            if self._book.always_rules.get(kind_tool) != kind:
                self._book.add_rule(kind_tool, kind, now)
        self._seen_from_root = max(self._seen_from_root, msg.seq)

    def _path(self) -> list[str]:
        """Agents and agent tools from the root to this run (empty for the root)."""
        return self._inp.parent.path if self._inp.parent else []

    async def _execute(self, agent: AgentSpec, rec: CallRecord, timeout: float) -> ToolOutput:
        attrs = {
            "hitl.tool": rec.tool_name,
            "hitl.call_id": rec.call_id,
            "hitl.agent": agent.name,
            "hitl.tool.arguments": self._sensitive(rec.arguments),
        }
        with self._trace.span("hitl.tool_call", **attrs) as span:
            out = await self._execute_activity(agent, rec, timeout)
            if span is not None:
                span.set_attribute("hitl.tool.is_error", out.is_error)
                output = self._sensitive(out.output)
                if output is not None:
                    span.set_attribute("hitl.tool.output", output)
        return out

    async def _execute_activity(
        self, agent: AgentSpec, rec: CallRecord, timeout: float
    ) -> ToolOutput:
        tool = self._tool(agent, rec)
        info = workflow.info()
        try:
            out: ToolOutput = await workflow.execute_activity(
                ACT_EXECUTE_TOOL,
                ExecuteToolInput(
                    root_agent=self._inp.agent,
                    agent_id=agent.id,
                    tool_name=rec.tool_name,
                    call_id=rec.call_id,
                    arguments=rec.arguments,
                    idempotency_key=f"{info.workflow_id}:{rec.call_id}",
                    workflow_id=info.workflow_id,
                    context=self._context(),
                    decision=rec.decision,
                    max_output_bytes=self._inp.run_config.max_tool_output_bytes,
                ),
                result_type=ToolOutput,
                start_to_close_timeout=timedelta(seconds=timeout),
                heartbeat_timeout=(
                    timedelta(seconds=tool.heartbeat_timeout_seconds)
                    if tool.heartbeat_timeout_seconds
                    else None
                ),
                retry_policy=RetryPolicy(
                    maximum_attempts=tool.max_attempts,
                    non_retryable_error_types=TOOL_NON_RETRYABLE,
                ),
                summary=rec.tool_name,
                task_queue=self._inp.run_config.tool_task_queue,  # None: the run's own queue
            )
        except ActivityError as err:
            cause: BaseException | None = err.cause
            if isinstance(cause, ApplicationError) and cause.type == (
                "ToolInputGuardrailTripwireTriggered"
            ):
                details = cause.details[0] if cause.details else {}
                raise RunFailure(cause.type, cause.message, details) from None
            if isinstance(cause, TemporalTimeoutError):
                message = f"Tool '{rec.tool_name}' timed out after {timeout:g} seconds."
                if tool.timeout_behavior == "raise_exception":
                    raise RunFailure(
                        "ToolTimeoutError", message, {"tool": rec.tool_name, "timeout": timeout}
                    ) from None
                return ToolOutput(output=message, is_error=True)
            return ToolOutput(output=TOOL_ERROR_PREFIX + _error_text(err), is_error=True)
        if out.context is not None and self._ctx is not None:
            # The tool changed the run context: later activities see the new value.
            self._ctx = self._ctx.model_copy(update={"value": out.context.value})
        return out

    async def _rejection_text(self, agent: AgentSpec, rec: CallRecord) -> str:
        formatter = self._inp.run_config.tool_error_formatter
        if not formatter and not self._tool(agent, rec).user_action:
            return REJECTION_MESSAGE
        try:
            out: RejectionTextOutput = await workflow.execute_local_activity(
                ACT_REJECTION_TEXT,
                RejectionTextInput(
                    root_agent=self._inp.agent,
                    agent_id=agent.id,
                    tool_name=rec.tool_name,
                    call_id=rec.call_id,
                    arguments=rec.arguments,
                    formatter=formatter,
                    default_message=REJECTION_MESSAGE,
                    context=self._context(),
                    decision=rec.decision,
                    workflow_id=workflow.info().workflow_id,
                ),
                result_type=RejectionTextOutput,
                start_to_close_timeout=LOCAL_TIMEOUT,
                retry_policy=LOCAL_RETRY,
            )
        except ACTIVITY_FAILURES:
            workflow.logger.warning("rejection text for %s failed; using the default", rec.call_id)
            return REJECTION_MESSAGE
        return out.message or REJECTION_MESSAGE

    # ================================================================= activities

    async def _local(
        self,
        name: str,
        arg: BaseModel,
        result_type: type[Out],
        what: str,
        *,
        busy: bool = True,
        timeout: timedelta = LOCAL_TIMEOUT,
    ) -> Out:
        """Run a local activity (user code: predicates, guardrails, hooks); failures are typed.

        While it runs the run counts as busy, so it never reports waiting for a person.
        """
        if busy:
            self._busy += 1
        try:
            result: Out = await workflow.execute_local_activity(
                name,
                arg,
                result_type=result_type,
                start_to_close_timeout=timeout,
                retry_policy=LOCAL_RETRY,
            )
        except ACTIVITY_FAILURES as err:
            raise _failure_from_activity(err, what) from None
        finally:
            if busy:
                self._busy -= 1
        return result

    async def _resolve(self) -> ResolvedRun:
        resolved = await self._local(
            ACT_RESOLVE_AGENT,
            ResolveAgentInput(agent=self._inp.agent, run_config=self._inp.run_config),
            ResolvedRun,
            "resolving the agent",
            busy=False,
        )
        return resolved

    async def _call_model(self, agent: AgentSpec) -> ModelResponse:
        cfg = self._inp.run_config
        transcript = model_input(self._input_items, self._new_items)
        tools = [
            ModelTool(
                name=t.name,
                description=t.description,
                params_json_schema=t.params_json_schema,
                strict=t.strict_json_schema,
            )
            for t in agent.tools
        ] + [
            ModelTool(
                name=h.tool_name,
                description=h.tool_description,
                params_json_schema={
                    "type": "object",
                    "properties": {},
                    "required": [],
                    "additionalProperties": False,
                },
            )
            for h in agent.handoffs
        ]
        info = workflow.info()
        inp = CallModelInput(
            root_agent=self._inp.agent,
            agent_id=agent.id,
            agent_name=agent.name,
            model=agent.model,
            settings=agent.model_settings.merged_with(cfg.model_settings),
            instructions=agent.instructions,
            dynamic_instructions=agent.dynamic_instructions,
            tools=tools,
            output_schema=agent.output_schema,
            output_type_name=agent.output_type_name,
            context=self._context(),
            turn=self._turn,
            max_argument_bytes=cfg.max_tool_argument_bytes,
            stream=cfg.stream_text_deltas and agent.model.provider != "scripted",
            input_filter=cfg.call_model_input_filter,
        )
        # The activity outlives the client's own timeout (the model's, or the worker default).
        timeout = MODEL_TIMEOUT
        if agent.model.timeout_seconds is not None:
            timeout = max(MODEL_TIMEOUT, timedelta(seconds=agent.model.timeout_seconds + 60))
        self._busy += 1
        attrs: dict[str, str | int] = {
            "hitl.agent": agent.name,
            "hitl.model": agent.model.name,
            "hitl.turn": self._turn,
        }
        try:
            with self._trace.span("hitl.model_call", **attrs):
                if agent.model.local_activity:
                    # Local activity inputs are not stored in history: pass the transcript.
                    inp.transcript = transcript
                    response: ModelResponse = await workflow.execute_local_activity(
                        ACT_CALL_MODEL,
                        inp,
                        result_type=ModelResponse,
                        start_to_close_timeout=timeout,
                        retry_policy=MODEL_RETRY,
                    )
                else:
                    # Keep history linear in turns: the activity reads the transcript by
                    # query instead of receiving the whole conversation on every call.
                    inp.transcript_ref = TranscriptRef(
                        workflow_id=info.workflow_id, run_id=info.run_id, end=len(transcript)
                    )
                    response = await workflow.execute_activity(
                        ACT_CALL_MODEL,
                        inp,
                        result_type=ModelResponse,
                        start_to_close_timeout=timeout,
                        retry_policy=MODEL_RETRY,
                        summary=f"{agent.name}: {agent.model.name}",
                        task_queue=cfg.model_task_queue,  # None: the run's own queue
                    )
        except ACTIVITY_FAILURES as err:
            raise _failure_from_activity(err, "the model call") from None
        finally:
            self._busy -= 1
        return response

    async def _plan(self, agent: AgentSpec, recs: list[CallRecord]) -> PlanToolsOutput:
        cfg = self._inp.run_config
        plans = await self._local(
            ACT_PLAN_TOOLS,
            PlanToolsInput(
                root_agent=self._inp.agent,
                agent_id=agent.id,
                calls=[
                    PlanCall(call_id=r.call_id, tool_name=r.tool_name, arguments=r.arguments)
                    for r in recs
                ],
                context=self._context(),
                workflow_id=workflow.info().workflow_id,
                run_approver=cfg.approver,
                skip_policy=sorted(self._book.always_rules),
                pre_approval_guardrails=cfg.pre_approval_tool_input_guardrails,
            ),
            PlanToolsOutput,
            "planning tool calls",
        )
        return plans

    async def _max_turns_exceeded(self, max_turns: int) -> RunOutput:
        message = f"Max turns ({max_turns}) exceeded"
        handler = self._inp.run_config.error_handlers.get("max_turns")
        agent = self._agent()
        if handler:
            out = await self._local(
                ACT_HANDLE_RUN_ERROR,
                HandleRunErrorInput(
                    handler=handler,
                    message=message,
                    max_turns=max_turns,
                    context=self._context(),
                    input_items=self._input_items,
                    new_items=self._new_items,
                ),
                HandleRunErrorOutput,
                "the max_turns error handler",
            )
            if out.handled:
                if out.include_in_history:
                    final = out.final_output
                    text = final if isinstance(final, str) else json.dumps(final, default=str)
                    self._add_item(
                        "message_output_item",
                        assistant_message(text, f"msg_max_turns_{self._turn}"),
                        agent,
                    )
                return self._finish(out.final_output, agent)
        raise RunFailure("MaxTurnsExceeded", message, {"max_turns": max_turns})

    # ================================================================= continue-as-new

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        limit = self._inp.run_config.continue_as_new_after_events
        if limit is not None and info.get_current_history_length() >= limit:
            return True
        return info.is_continue_as_new_suggested()

    async def _continue_as_new(self) -> NoReturn:
        assert self._graph is not None
        self._continuing = True
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(
            RunInput(
                agent=self._inp.agent,
                context=self._ctx.value if self._ctx else None,
                max_turns=self._inp.max_turns,
                run_config=self._inp.run_config,
                carried=CarriedState(
                    graph=self._graph,
                    current_agent=self._current,
                    input_items=self._input_items,
                    new_items=self._new_items,
                    turn=self._turn,
                    bad_turns=self._bad_turns,
                    usage=self._usage,
                    always_rules=self._book.always_rules,
                    decisions=self._book.all_decisions(),
                    refused=self._refused,
                    continued_runs=self._continued_runs + 1,
                    search_attributes=self._sa,
                    session_base=self._session_base,
                    own_input=self._own_input,
                    context=self._ctx,
                    tracing=self._trace.enabled,
                    stream=self._stream.get_state(),
                    seen_from_root=self._seen_from_root,
                ),
                session=self._inp.session,
                parent=self._inp.parent,
            )
        )

    # ================================================================= decisions

    def _decide(self, kind: DecisionKind, d: DecisionInput, via: DecisionVia) -> DecisionRecord:
        """Validate and record one decision, synchronously (never awaits)."""
        self._check(kind, d)
        rec = self._book.record(kind, d, now=workflow.now(), via=via)
        self._announce_decisions()
        self._note_pause()
        return rec

    def _check(self, kind: DecisionKind, d: DecisionInput) -> None:
        link = self._inp.parent
        if link is not None:
            # No approval path bypasses the root: it sees, validates and records every decision.
            qualified = "/".join([*link.call_path, d.call_id])
            raise refusal(
                "NotRoot",
                f"this is a nested run; decide on the root run {link.root_workflow_id} "
                f"(call id '{qualified}')",
            )
        if self._output is not None or self._error is not None:
            raise refusal("RunFinished", "the run has finished; it takes no more decisions")
        self._book.check(kind, d, workflow.now())

    # Update arguments are decoded leniently (`Any`) and validated here, so a malformed payload
    # gets a typed, one-line `InvalidDecision` instead of a generic decoding error.

    @workflow.update(name="approve")
    def approve(self, d: Any) -> DecisionRecord:
        """Approve one pending call: `{"call_id": "...", "always": false, "approver": "..."}`."""
        return self._decide("approve", parse_payload(DecisionInput, d), "update")

    @approve.validator
    def _validate_approve(self, d: Any) -> None:
        self._check("approve", parse_payload(DecisionInput, d))

    @workflow.update(name="reject")
    def reject(self, d: Any) -> DecisionRecord:
        """Reject one pending call: `{"call_id": "...", "message": "why (shown to the model)"}`."""
        return self._decide("reject", parse_payload(DecisionInput, d), "update")

    @reject.validator
    def _validate_reject(self, d: Any) -> None:
        self._check("reject", parse_payload(DecisionInput, d))

    @workflow.update(name="decide")
    async def decide(self, raw: Any) -> RunStatus:
        """Apply several decisions atomically; with `wait`, return once the run settles again."""
        req = parse_payload(DecideInput, raw)
        for d in req.decisions:
            self._decide(d.kind, d, "update")
        if req.context is not None:
            ctx = req.context
            if self._ctx is not None and ctx.deserializer is None:
                # The run's `context_deserializer` still rebuilds the new value.
                ctx = ctx.model_copy(
                    update={
                        "deserializer": self._ctx.deserializer,
                        "type": ctx.type or self._ctx.type,
                    }
                )
            self._ctx = ctx
        if req.wait:
            await workflow.wait_condition(self._settled)
        return self._status(SettledStatus)

    @decide.validator
    def _validate_decide(self, raw: Any) -> None:
        req = parse_payload(DecideInput, raw)
        kinds: dict[str, str] = {}
        for d in req.decisions:
            if kinds.setdefault(d.call_id, d.kind) != d.kind:
                raise refusal(
                    "InvalidDecision", f"call '{d.call_id}' is both approved and rejected"
                )
            self._check(d.kind, d)

    @workflow.update(name="wait")
    async def wait(self, _: WaitInput) -> RunStatus:
        """Return once the run waits for a person, finishes, or continues as new."""
        await workflow.wait_condition(self._settled)
        return self._status(SettledStatus)

    @workflow.signal(name="approve")
    def approve_signal(self, payload: RawValue = None) -> None:  # type: ignore[assignment]
        """Approve by signal (Temporal UI / `temporal workflow signal`); refusals show in status."""
        self._signal_decision("approve", payload)

    @workflow.signal(name="reject")
    def reject_signal(self, payload: RawValue = None) -> None:  # type: ignore[assignment]
        """Reject by signal; refusals show in status."""
        self._signal_decision("reject", payload)

    def _signal_decision(self, kind: DecisionKind, payload: RawValue | None) -> None:
        # A signal cannot return an error, and the SDK would silently drop one whose payload
        # fails to decode, so decode leniently here and record what was refused.
        text = ""
        try:
            if payload is None:
                raise refusal("InvalidDecision", "the signal carried no payload")
            text = payload.payload.data.decode("utf-8", "replace")[:500]
            value = workflow.payload_converter().from_payload(payload.payload)
            self._decide(kind, parse_payload(DecisionInput, value), "signal")
        except ApplicationError as err:
            self._record_refused(kind, text, err.type or "InvalidDecision", err.message)
        except Exception as err:  # the payload could not even be decoded
            self._record_refused(kind, text, "InvalidDecision", str(err).splitlines()[0])

    def _record_refused(self, name: str, payload: str, error_type: str, message: str) -> None:
        workflow.logger.warning("refused %s signal: %s", name, message)
        self._refused.append(
            RefusedDecision(
                received_at=workflow.now(),
                name=name,
                payload=payload,
                error_type=error_type,
                message=message,
            )
        )
        del self._refused[:-MAX_REFUSED_KEPT]

    # ================================================================= queries

    @workflow.query(name="status")
    def status(self) -> RunStatus:
        """Phase, current agent and pending approvals."""
        return self._status()

    @workflow.query(name="snapshot")
    def snapshot(self) -> RunSnapshot:
        """Status plus every item produced so far."""
        return RunSnapshot(
            status=self._status(), input_items=self._input_items, new_items=self._new_items
        )

    @workflow.query(name="transcript")
    def transcript(self, q: TranscriptQuery) -> TranscriptPage:
        """The model input items (what the model activity reads)."""
        items = model_input(self._input_items, self._new_items)
        return TranscriptPage(items=items[q.start : q.end], total=len(items))

    # ================================================================= visibility

    def _visible(self) -> Visible:
        if self._cancelled:
            return ("cancelled", (), None)
        pending = self._book.pending()
        phase = self._phase()
        status = "awaiting_approval" if pending and phase == "running" else phase
        since = min((p.requested_at for p in pending if p.requested_at), default=None)
        return (status, tuple(sorted({p.tool_name for p in pending})), since)

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
        status, tools, since = visible
        self._note_pause()
        if self._sa:
            workflow.upsert_search_attributes(
                [
                    SA_STATUS_KEY.value_set(status),
                    SA_PENDING_TOOLS_KEY.value_set(list(tools)),
                    SA_AGENT_KEY.value_set(self._inp.agent),
                    SA_PENDING_SINCE_KEY.value_set(since)
                    if since is not None
                    else SA_PENDING_SINCE_KEY.value_unset(),
                ]
            )
        workflow.set_current_details(self._details())

    def _details(self) -> str:
        """Markdown for the Temporal UI: what the run waits for and how to decide it."""
        wid = workflow.info().workflow_id
        awaiting = self._book.pending()
        phase = self._phase()
        if self._cancelled:
            return f"**Cancelled** after {self._turn} model turns."
        if phase == "completed":
            return f"**Completed** after {self._turn} model turns."
        if phase == "failed" and self._error is not None:
            return f"**Failed** ({self._error.type}): {self._error.message}"
        if not awaiting:
            return f"**Running** (turn {self._turn}, agent {self._current or self._inp.agent})."
        if self._inp.parent is not None:
            root = self._inp.parent.root_workflow_id
            return (
                f"**Waiting for approval** ({len(awaiting)} call(s)). This is a nested run: "
                f"its approvals are decided on the root run `{root}`."
            )
        lines = [f"**Waiting for approval** ({len(awaiting)} call(s)), agent {self._inp.agent}", ""]
        for c in awaiting:
            title = c.request.title if c.request else f"{c.agent_name} wants to run {c.tool_name}"
            where = " -> ".join([*c.path, c.tool_name])
            lines += [
                f"### {title}",
                f"({where})",
                f"Tool `{c.tool_name}`, call `{c.call_id}`, waiting since {c.requested_at}",
                "",
            ]
            if c.request is not None:
                lines += [c.request.message, ""]
                if c.request.preview:
                    label = c.request.preview_label or "Preview"
                    lines += [f"**{label}**", "```", c.request.preview[:4000], "```", ""]
            approve = json.dumps({"call_id": c.call_id, "approver": "you@example.com"})
            reject = json.dumps({"call_id": c.call_id, "message": "why, for the model"})
            lines += [
                "Decide with *Send an Update* (name `approve` or `reject`), or:",
                "```",
                f"temporal workflow update execute --workflow-id {wid} --name approve "
                f"--input '{approve}'",
                f"temporal workflow update execute --workflow-id {wid} --name reject "
                f"--input '{reject}'",
                "```",
                "",
            ]
        return "\n".join(lines)

    # ================================================================= helpers

    def _phase(self) -> Phase:
        if self._output is not None:
            return "completed"
        if self._error is not None:
            return "failed"
        if self._graph is None:
            return "starting"
        if self._busy == 0 and self._book.has_pending() and not self._book.active():
            return "awaiting_approval"
        return "running"

    def _settled(self) -> bool:
        return self._continuing or self._phase() in ("awaiting_approval", "completed", "failed")

    def _status(self, kind: type[RunStatus] = RunStatus) -> RunStatus:
        info = workflow.info()
        current = self._graph.agents.get(self._current) if self._graph else None
        return kind(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            phase=self._phase(),
            agent=self._inp.agent,
            current_agent=current.id if current else None,
            current_agent_name=current.name if current else None,
            turn=self._turn,
            pending=self._book.pending(self._path(), info.workflow_id),
            decisions=self._book.all_decisions(),
            refused=self._refused,
            usage=self._usage,
            items=len(self._input_items) + len(self._new_items),
            final_output=self._output.final_output if self._output else None,
            error=self._error,
            continued_as_new=self._continuing,
        )

    def _context(self) -> RunContextData | None:
        return self._ctx

    def _agent(self) -> AgentSpec:
        return self._spec(self._current)

    def _spec(self, agent_id: str) -> AgentSpec:
        assert self._graph is not None
        return self._graph.agents[agent_id]

    def _tool(self, agent: AgentSpec, rec: CallRecord) -> Any:
        tool = agent.tool(rec.tool_name)
        assert tool is not None
        return tool

    def _add_item(self, kind: Any, raw: dict[str, Any], agent: AgentSpec) -> None:
        self._new_items.append(
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
