"""Test a tool's approval policy and its execution without a server.

Scripting's `testApprovalFn` / `testExecuteFn`, for `@function_tool`s:

```python
from hitl.testing import ToolCheck

check = ToolCheck(refund)
assert not await check.needs_approval({"order": 7, "amount": 40})
request = await check.request({"order": 7, "amount": 5000})
assert "5000" in request.message
verdict = await check.decide({"order": 7, "amount": 5000}, run_config=RunConfig(auto_approve=True))
assert verdict.outcome == "waits" and verdict.required_approvals == 2
assert await check.execute({"order": 7, "amount": 40}) == "refunded $40"
```

`decide` runs the same code a run does: the planning step (argument validation, the approval
predicate, `required_approvals`, `approvers`, pre-approval guardrails, the approval request,
the approver callbacks) and then the run's decision order (the pinned approval mode, standing
rules, approver callbacks, two-key auto-approval, then a person), in-process. So this module
is worker-side code (it imports the planning activity and the run's decision core): tests
import it, the client API never does (`make lint` checks that).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from hitl.activities.planning import plan_call
from hitl.agent import Agent
from hitl.approval import ApprovalRequest, UserAction
from hitl.context import RunContextWrapper, ToolContext
from hitl.items import FunctionCall
from hitl.model import ModelReply, ModelRequest, ScriptedModel
from hitl.registry import AgentRegistry
from hitl.run_config import RunConfig
from hitl.tools import FunctionTool, tool_output_text
from hitl.wire import (
    AgentSpec,
    ApprovalRequestData,
    CallPlan,
    CallRecord,
    CarriedState,
    DecisionKind,
    DecisionRecord,
    DecisionSource,
    PlanCall,
    RunConfigSpec,
    StandingRule,
    idempotency_key,
)
from hitl.workflows import turn
from hitl.workflows.book import ApprovalBook

__all__ = ["ToolCheck", "Verdict"]

TEST_WORKFLOW_ID = "hitl-tool-check"


def _idle(req: ModelRequest) -> ModelReply:
    return ModelReply.say("")


@dataclass
class Verdict:
    """What a run would do with one call, as `ToolCheck.decide` found it.

    Attributes:
        outcome: `approved` (runs now), `rejected` (does not run; the model reads `message`),
            `waits` (for a person) or `refused` (arguments or a pre-approval guardrail refused
            it; the model reads `message`).
        source: Who decided: `always_rule`, `policy`, `auto_approval` (`None` when nobody had
            to, or a person must).
        needs_approval: Whether the call needs a decision at all.
        approvers: Who may decide it (empty: anyone).
        required_approvals: Distinct people who must approve it.
        request: The approval request a person would see.
        message: What the model reads for a rejected or refused call.
        decision: The recorded decision, when one was made.
    """

    outcome: Literal["approved", "rejected", "waits", "refused"]
    source: DecisionSource | None = None
    needs_approval: bool = False
    approvers: list[str] = field(default_factory=list)
    required_approvals: int = 1
    request: ApprovalRequestData | None = None
    message: str | None = None
    decision: DecisionRecord | None = None


class ToolCheck:
    """One tool, tried the way runs use it, in-process.

    Args:
        tool: The `@function_tool`.
        agent: The agent that has it (default: a stand-in agent with just this tool).
        context: The run context (what `ctx.context` is for the tool's functions).
    """

    def __init__(
        self, tool: FunctionTool, *, agent: Agent[Any] | None = None, context: Any = None
    ) -> None:
        self.tool = tool
        self.agent = agent or Agent(
            name=f"ToolCheck {tool.name}",
            tools=[tool],
            model=ScriptedModel(_idle, "hitl.testing.idle"),
        )
        if tool not in self.agent.tools:
            raise ValueError(f"agent {self.agent.name!r} has no tool {tool.name!r}")
        self.context = context

    def _ctx(self) -> RunContextWrapper[Any]:
        return RunContextWrapper(
            context=self.context, workflow_id=TEST_WORKFLOW_ID, agent_name=self.agent.name
        )

    async def needs_approval(self, arguments: dict[str, Any], call_id: str = "call_1") -> bool:
        """What the tool's `needs_approval` says for these arguments."""
        params = self.tool.parse_arguments(json.dumps(arguments))
        return await self.tool.evaluate_needs_approval(self._ctx(), params, call_id)

    async def request(self, arguments: dict[str, Any]) -> ApprovalRequest | None:
        """The tool's own approval request for these arguments (`None`: it renders none)."""
        params = self.tool.parse_arguments(json.dumps(arguments))
        return await self.tool.render_request(self._ctx(), params)

    async def execute(
        self, arguments: dict[str, Any], *, confirmed: bool = True, call_id: str = "call_1"
    ) -> str:
        """Run the tool as an approved call would; the output text the model would read.

        `confirmed=False`: the person's action was the secondary button (`UserAction`).
        """
        text = json.dumps(arguments)
        ctx = ToolContext(
            context=self.context,
            workflow_id=TEST_WORKFLOW_ID,
            agent_name=self.agent.name,
            tool_name=self.tool.name,
            tool_call_id=call_id,
            tool_arguments=text,
            idempotency_key=idempotency_key(TEST_WORKFLOW_ID, call_id),
        )
        result = await self.tool.invoke(ctx, text, UserAction(primary_confirmed=confirmed))
        return tool_output_text(result)

    async def decide(
        self,
        arguments: dict[str, Any],
        *,
        run_config: RunConfig | None = None,
        rules: list[tuple[DecisionKind, str | None]] = (),  # type: ignore[assignment]
        call_id: str = "call_1",
    ) -> Verdict:
        """What a run would do with this call: the planning step, then the decision order.

        `rules` are standing `always_approve` / `always_reject` rules as (kind, approver).
        """
        cfg = run_config or RunConfig()
        registry = AgentRegistry([self.agent], allow=cfg.callables())
        graph = registry.resolve(self.agent.name).graph
        spec = graph.agents[graph.root]
        cfg_spec = cfg.spec()
        call = FunctionCall(
            call_id=call_id, name=self.tool.name, arguments=json.dumps(arguments), raw={}
        )
        standing = [
            StandingRule(agent_id=spec.id, tool_name=self.tool.name, kind=k, approver=a)
            for k, a in rules
        ]
        book = ApprovalBook(CarriedState(graph=graph, rules=standing))
        opened = turn.open_turn(
            spec, [call], book, graph.agents, 1, cfg_spec.max_tool_argument_bytes
        )
        book.begin_turn(opened.records)
        plans = await self._plan(call, opened, spec, book, cfg, cfg_spec)
        turn.settle(spec, opened, plans, book, cfg_spec, datetime.now(UTC))
        return _verdict(opened.records[0])

    async def _plan(
        self,
        call: FunctionCall,
        opened: turn.OpenedTurn,
        spec: AgentSpec,
        book: ApprovalBook,
        cfg: RunConfig,
        cfg_spec: RunConfigSpec,
    ) -> dict[str, CallPlan]:
        """The planning activity's own code, when the run would plan the call."""
        planned = turn.to_plan(spec, opened.records)
        if not planned:
            return {}
        plan = await plan_call(
            self.agent,
            PlanCall(call_id=call.call_id, tool_name=self.tool.name, arguments=call.arguments),
            self._ctx(),
            cfg.approver,
            turn.skip_policy(spec, book, cfg_spec, planned),
            cfg.pre_approval_tool_input_guardrails,
        )
        return turn.apply_plans(opened, planned, [plan])


def _verdict(rec: CallRecord) -> Verdict:
    """What the run's decision core made of the call, as a `Verdict`."""
    verdict = Verdict(
        outcome="waits",
        needs_approval=rec.needs_approval,
        approvers=list(rec.approvers),
        required_approvals=rec.required_approvals,
        request=rec.request,
        decision=rec.decision,
        source=rec.decision.source if rec.decision is not None else None,
    )
    if rec.state == "refused":
        verdict.outcome, verdict.message = "refused", rec.output
    elif rec.state == "approved":
        verdict.outcome = "approved"
    elif rec.state == "rejected":
        verdict.outcome = "rejected"
        verdict.message = rec.decision.message if rec.decision else None
    return verdict
