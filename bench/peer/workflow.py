"""The peer's workflow: the OpenAI Agents SDK's `needs_approval` flow inside a Temporal workflow.

What a user of `temporalio-openai-agents` writes for the benchmark's job: an `agents.Agent` with
one tool that needs approval, `Runner.run` inside the workflow (the plugin turns every model call
into an activity), and the approval loop by hand: keep `result.interruptions` visible, wait for a
decision, `state.approve(item)`, `Runner.run(agent, state)` again.

The hand-written plumbing mirrors what our `AgentRun` offers, so both are measured the same way:
a `wait` update that returns once the run waits for a person (or finished), used with
update-with-start exactly like ours; an `approve` update with a validator (unknown call ids are
refused); a `pending` query for listing.

Tools: `tool_mode="activity"` (default) runs the refund as an activity (`activity_as_tool` with
`needs_approval=True`), which is what a side-effecting tool needs and what our runtime does for
every tool; `tool_mode="inline"` uses a plain `@function_tool(needs_approval=True)`, which the
integration runs inside the workflow (no activity: the peer's cheapest, but not durable, choice).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner, function_tool
    from temporalio.openai_agents import workflow as agents_workflow

    from bench.proto import chunk_text

INSTRUCTIONS = "Refund orders when asked."


@activity.defn(name="refund")
async def refund(order_id: int) -> str:
    """Refund an order.

    Args:
        order_id: The order to refund.
    """
    return f"Refunded order {order_id}"


@activity.defn(name="fetch_chunk")
async def fetch_chunk(index: int) -> str:
    """Fetch one 5 KB chunk of a long document.

    Args:
        index: The chunk number.
    """
    return chunk_text(index)


@function_tool(needs_approval=True, name_override="refund")
async def refund_inline(order_id: int) -> str:
    """Refund an order.

    Args:
        order_id: The order to refund.
    """
    return f"Refunded order {order_id}"


ACTIVITIES = [refund, fetch_chunk]
TOOL_TIMEOUT = timedelta(seconds=300)


def make_agent(kind: str, tool_mode: str) -> Agent[Any]:
    if kind == "long":
        reader = agents_workflow.activity_as_tool(fetch_chunk, start_to_close_timeout=TOOL_TIMEOUT)
        return Agent(name="Bench reader", instructions="Read every chunk.", tools=[reader])
    if tool_mode == "inline":
        tool = refund_inline
    else:
        tool = dataclasses.replace(
            agents_workflow.activity_as_tool(refund, start_to_close_timeout=TOOL_TIMEOUT),
            needs_approval=True,
        )
    return Agent(name="Bench desk", instructions=INSTRUCTIONS, tools=[tool])


@dataclass
class PeerInput:
    prompt: str
    kind: str = "refund"
    tool_mode: str = "activity"
    max_turns: int = 10


@dataclass
class PendingCall:
    call_id: str
    tool: str
    arguments: str


@dataclass
class PeerStatus:
    phase: str
    pending: list[PendingCall] = field(default_factory=list)


@dataclass
class Decision:
    call_id: str
    approve: bool = True
    message: str | None = None


@workflow.defn(name="PeerAgentRun")
class PeerAgentRun:
    def __init__(self) -> None:
        self._phase = "running"
        self._pending: list[PendingCall] = []
        self._decisions: dict[str, Decision] = {}

    @workflow.run
    async def run(self, inp: PeerInput) -> str:
        agent = make_agent(inp.kind, inp.tool_mode)
        result = await Runner.run(agent, inp.prompt, max_turns=inp.max_turns)
        while result.interruptions:
            self._pending = [
                PendingCall(i.call_id or "", i.name or "", i.arguments or "")
                for i in result.interruptions
            ]
            self._phase = "awaiting_approval"
            await workflow.wait_condition(
                lambda: all(p.call_id in self._decisions for p in self._pending)
            )
            state = result.to_state()
            for item in result.interruptions:
                decision = self._decisions[item.call_id or ""]
                if decision.approve:
                    state.approve(item)
                else:
                    state.reject(item, rejection_message=decision.message)
            self._pending = []
            self._phase = "running"
            result = await Runner.run(agent, state, max_turns=inp.max_turns)
        self._phase = "completed"
        await workflow.wait_condition(workflow.all_handlers_finished)
        return str(result.final_output)

    @workflow.update(name="wait")
    async def wait(self) -> PeerStatus:
        await workflow.wait_condition(lambda: self._phase != "running")
        return PeerStatus(self._phase, list(self._pending))

    @workflow.update(name="approve")
    def approve(self, d: Decision) -> None:
        self._decisions[d.call_id] = d

    @approve.validator
    def _check(self, d: Decision) -> None:
        if d.call_id not in {p.call_id for p in self._pending}:
            raise ValueError(f"unknown call id {d.call_id!r}")
        prior = self._decisions.get(d.call_id)
        if prior is not None and prior.approve != d.approve:
            raise ValueError(f"call {d.call_id!r} is already decided")

    @workflow.query(name="pending")
    def pending(self) -> list[PendingCall]:
        return self._pending
