"""Activities running the run's hooks: guardrails and handoff input filters."""

from __future__ import annotations

import json
from typing import Any

from temporalio import activity

from hitl._user_code import ReturnTypeError, call_user
from hitl.activities.context import rebuild_context, user_failure
from hitl.agent import HandoffInputData, _as_handoff
from hitl.context import RunContextWrapper
from hitl.errors import UserError
from hitl.guardrails import GuardrailFunctionOutput, InputGuardrail, OutputGuardrail, evaluate
from hitl.items import message_text
from hitl.registry import AgentRegistry
from hitl.wire import (
    ACT_FILTER_HANDOFF,
    ACT_RUN_GUARDRAILS,
    GuardrailsInput,
    GuardrailsOutput,
    GuardrailVerdict,
    HandoffFilterInput,
    HandoffFilterOutput,
    RunItem,
)

NEST_HEADER = (
    "For context, here is the conversation so far between the user and the previous agent:"
)


def _json_safe(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    try:
        json.dumps(value)
    except TypeError:
        return repr(value)
    return value


class HookActivities:
    """Guardrails and handoff filters for the agents in `registry`."""

    def __init__(self, registry: AgentRegistry) -> None:
        self.registry = registry

    @activity.defn(name=ACT_RUN_GUARDRAILS)
    async def run_guardrails(self, inp: GuardrailsInput) -> GuardrailsOutput:
        """Evaluate the agent's and the run's input or output guardrails."""
        try:
            agent = self.registry.agent(inp.root_agent, inp.agent_id)
            context = rebuild_context(inp.context, self.registry.allowed)
            refs = [
                self.registry.allowed.get(r, what=f"run-level {inp.kind} guardrail")
                for r in inp.run_guardrails
            ]
        except UserError as exc:
            raise user_failure(exc) from None
        own: list[Any] = list(agent.input_guardrails if inp.kind == "input" else [])
        if inp.kind == "output":
            own = list(agent.output_guardrails)
        wrapper = InputGuardrail if inp.kind == "input" else OutputGuardrail
        guardrails = own + [r if isinstance(r, wrapper) else wrapper(r) for r in refs]
        ctx = RunContextWrapper(context=context, workflow_id=inp.workflow_id, agent_name=agent.name)
        subject = inp.input if inp.kind == "input" else inp.final_output
        verdicts = []
        for g in guardrails:
            result: GuardrailFunctionOutput = await evaluate(g, ctx, agent, subject)
            verdicts.append(
                GuardrailVerdict(
                    name=g.get_name(),
                    tripwire_triggered=result.tripwire_triggered,
                    output_info=_json_safe(result.output_info),
                )
            )
            if result.tripwire_triggered:
                break  # the run stops at the first tripwire
        return GuardrailsOutput(verdicts=verdicts)

    @activity.defn(name=ACT_FILTER_HANDOFF)
    async def filter_handoff(self, inp: HandoffFilterInput) -> HandoffFilterOutput:
        """Apply the handoff's input filter, or nest the history, for the next agent."""
        try:
            source = self.registry.agent(inp.root_agent, inp.from_agent_id)
            context = rebuild_context(inp.context, self.registry.allowed)
            handoff = next(
                (h for h in map(_as_handoff, source.handoffs) if h.tool_name == inp.handoff_tool),
                None,
            )
            fn = handoff.input_filter if handoff and handoff.input_filter else None
            allowed = self.registry.allowed
            if fn is None and inp.run_filter:
                fn = allowed.get_callable(inp.run_filter, what="the run's handoff_input_filter")
            mapper = (
                allowed.get_callable(inp.mapper, what="the run's handoff_history_mapper")
                if inp.mapper
                else None
            )
        except UserError as exc:
            raise user_failure(exc) from None
        data = HandoffInputData(
            input_history=list(inp.input_history),
            pre_handoff_items=list(inp.pre_handoff_items),
            new_items=list(inp.new_items),
            context=context,
        )
        if fn is not None:
            try:
                data = await call_user(
                    fn, data, expect=HandoffInputData, what="a handoff input filter"
                )
            except ReturnTypeError as exc:
                raise user_failure(exc) from None
        elif inp.nest:
            transcript = [*inp.input_history, *(i.raw_item for i in inp.pre_handoff_items)]
            history = (
                await call_user(mapper, transcript, what="the run's handoff_history_mapper")
                if mapper
                else [_nest(transcript)]
            )
            data = HandoffInputData(
                input_history=list(history), pre_handoff_items=[], new_items=list(inp.new_items)
            )
        return HandoffFilterOutput(
            input_history=data.input_history,
            pre_handoff_items=[RunItem.model_validate(i) for i in data.pre_handoff_items],
            new_items=[RunItem.model_validate(i) for i in data.new_items],
        )


def _nest(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """The default nested history: the transcript summarized in one assistant message."""
    lines = []
    for n, item in enumerate(transcript, 1):
        kind = item.get("type")
        if kind == "function_call":
            lines.append(f"{n}. tool call {item.get('name')}({item.get('arguments')})")
        elif kind == "function_call_output":
            lines.append(f"{n}. tool output: {item.get('output')}")
        else:
            lines.append(f"{n}. {item.get('role', 'assistant')}: {message_text(item)}")
    body = "\n".join(lines)
    return {
        "role": "assistant",
        "content": f"{NEST_HEADER}\n<CONVERSATION HISTORY>\n{body}\n</CONVERSATION HISTORY>",
    }
