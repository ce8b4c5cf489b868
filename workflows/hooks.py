"""The user code a run calls around its loop: guardrails, handoff filters, error handlers.

Each runs in an activity (`workflows.steps`); here the run decides when it is needed and
what its answer means.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from hitl.items import assistant_message
    from hitl.wire import (
        AgentSpec,
        CarriedState,
        HandleRunErrorInput,
        HandoffFilterInput,
        RunInput,
        RunOutput,
    )
    from hitl.workflows.failures import RunFailure
    from hitl.workflows.steps import Steps

if TYPE_CHECKING:
    from hitl.workflows.events import Events
    from hitl.workflows.tracing import RunTracer


class Hooked(Protocol):
    """What the hooks around the loop read and change of a run."""

    inp: RunInput
    state: CarriedState
    steps: Steps
    events: Events
    trace: RunTracer

    def agent(self) -> AgentSpec:
        """The agent whose turn it is."""
        ...

    def finish(self, final: Any, agent: AgentSpec) -> RunOutput:
        """The run's result."""
        ...


async def guardrails(
    run: Hooked,
    kind: Literal["input", "output"],
    agent: AgentSpec,
    *,
    subject: Any = "",
    final_output: Any = None,
) -> None:
    """Run the agent's (and, at the root, the run's) guardrails; a tripwire fails the run."""
    cfg = run.inp.run_config
    own = agent.input_guardrails if kind == "input" else agent.output_guardrails
    run_level = cfg.input_guardrails if kind == "input" else cfg.output_guardrails
    if run.inp.parent is not None:
        run_level = []  # run-level guardrails apply to the root run only
    if not own and not run_level:
        return
    with run.trace.span(f"hitl.guardrails.{kind}", **{"hitl.agent": agent.name}):
        out = await run.steps.guardrails(kind, agent, run_level, subject, final_output)
    for verdict in out.verdicts:
        if verdict.tripwire_triggered:
            raise RunFailure(
                "InputGuardrailTripwireTriggered"
                if kind == "input"
                else "OutputGuardrailTripwireTriggered",
                f"{kind} guardrail {verdict.name!r} tripped",
                {"guardrail": verdict.name, "output_info": verdict.output_info},
            )


async def filter_handoff(
    run: Hooked, agent: AgentSpec, call_id: str, target: str, turn_start: int
) -> None:
    """Apply the handoff's input filter or nested history (an activity), if it has one."""
    cfg, s = run.inp.run_config, run.state
    spec = next((h for h in agent.handoffs if h.agent_id == target), None)
    call = next((i for i in s.new_items[turn_start:] if i.raw_item.get("call_id") == call_id), None)
    tool = call.raw_item.get("name") if call else (spec.tool_name if spec else "")
    spec = agent.handoff(str(tool)) or spec
    nest = cfg.nest_handoff_history
    if spec is not None and spec.nest_handoff_history is not None:
        nest = spec.nest_handoff_history
    has_filter = bool(spec and spec.input_filter) or bool(cfg.handoff_input_filter)
    if not has_filter and not nest:
        return
    out = await run.steps.filter_handoff(
        HandoffFilterInput(
            root_agent=run.inp.agent,
            from_agent_id=agent.id,
            handoff_tool=str(tool),
            to_agent_id=target,
            input_history=s.input_items,
            pre_handoff_items=s.new_items[:turn_start],
            new_items=s.new_items[turn_start:],
            run_filter=cfg.handoff_input_filter,
            nest=nest,
            mapper=cfg.handoff_history_mapper,
            context=s.context,
        )
    )
    s.input_items = out.input_history
    s.new_items = [*out.pre_handoff_items, *out.new_items]


async def max_turns_exceeded(run: Hooked, max_turns: int) -> RunOutput:
    """Ask the run's `error_handlers["max_turns"]` for a final output, else fail the run."""
    message = f"Max turns ({max_turns}) exceeded"
    handler = run.inp.run_config.error_handlers.get("max_turns")
    agent = run.agent()
    if handler:
        s = run.state
        out = await run.steps.handle_run_error(
            HandleRunErrorInput(
                handler=handler,
                message=message,
                max_turns=max_turns,
                context=s.context,
                input_items=s.input_items,
                new_items=s.new_items,
            )
        )
        if out.handled:
            if out.include_in_history:
                final = out.final_output
                text = final if isinstance(final, str) else json.dumps(final, default=str)
                run.events.add_item(
                    "message_output_item", assistant_message(text, f"msg_max_turns_{s.turn}"), agent
                )
            return run.finish(out.final_output, agent)
    raise RunFailure("MaxTurnsExceeded", message, {"max_turns": max_turns})
