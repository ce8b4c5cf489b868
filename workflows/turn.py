"""What happens to each tool call of a turn: pure decisions, tested without a server.

A turn's calls go through two looks. The first (`open_turn`) needs nothing but the pinned
graph: a repeated call id, a second handoff, an unknown tool or unusable arguments are refused
with a message the model sees; a handoff is done at once. The second (`settle`) takes the plans
`plan_tools` made (predicates, approval requests, approver callbacks, run in an activity) and
decides, in this order, by

1. the pinned graph: a tool that needs approval always does, whatever today's code says;
2. a standing rule (`always_approve` / `always_reject`) that may decide the call;
3. an approver callback's answer;
4. two-key auto-approval (the run's preset and the tool both allow it);
5. otherwise a person: the call waits, with its approver list and deadline.

A call that needs several approvers (four eyes) is approved only by people, each in person:
rules, callbacks and auto-approval may reject it, never approve it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hitl.items import FunctionCall, check_arguments
from hitl.rules import call_approvers, narrow_approvers, policy_may_decide, required_approvals
from hitl.wire import (
    AgentSpec,
    ApproverDirectory,
    CallPlan,
    CallRecord,
    PinnedPolicy,
    PlanRequest,
    PolicyVerdict,
    RunConfigSpec,
    ToolSpec,
)
from hitl.workflows.book import ApprovalBook

MAX_VERDICTS_KEPT = 500
"""The policy verdicts a run keeps (the latest), so a long run's state stays bounded."""


@dataclass
class OpenedTurn:
    """A turn's calls after the first look."""

    records: list[CallRecord]
    handoff_target: str | None = None
    handoff_call: str | None = None
    by_policy: set[str] = field(default_factory=set)
    """Calls a policy (a guardrail) refused: its answer, not a mistake of the model."""


def refuse(rec: CallRecord, message: str) -> None:
    """The call does not run; the model sees `message`."""
    rec.state = "refused"
    rec.output = message
    rec.is_error = True


def tool_of(agent: AgentSpec, rec: CallRecord) -> ToolSpec:
    """The pinned tool a call of `agent` names (calls past the first look always have one)."""
    tool = agent.tool(rec.tool_name)
    assert tool is not None, rec.tool_name
    return tool


def open_turn(
    agent: AgentSpec,
    calls: list[FunctionCall],
    book: ApprovalBook,
    graph_agents: dict[str, AgentSpec],
    turn: int,
    max_argument_bytes: int,
    own_ids: bool = True,
) -> OpenedTurn:
    """First look at the model's calls: refuse what cannot run, do the handoff.

    With `own_ids` the run names each call itself (`t<turn>.<n>`) and keeps the model's id as
    data (`model_call_id`): a model's id may hold `/`, be thousands of characters long or
    anything else, and every call must still be decidable by name. (Runs recorded before
    that used the model's ids, and replay as they were.)
    """
    opened = OpenedTurn(records=[])
    for n, call in enumerate(calls, 1):
        rec = CallRecord(
            call_id=book.new_call_id(turn, n) if own_ids else call.call_id,
            model_call_id=call.call_id if own_ids else None,
            tool_name=call.name,
            agent_id=agent.id,
            agent_name=agent.name,
            arguments=call.arguments,
            turn=turn,
            call_type=None if call.call_type == "function_call" else call.call_type,
        )
        opened.records.append(rec)
        handoff = agent.handoff(call.name)
        if book.model_id_used(call.call_id) or (not own_ids and book.known(call.call_id)):
            refuse(rec, f"Call id {call.call_id} was already used; ignoring this call.")
        elif handoff is not None:
            if opened.handoff_target is None:
                opened.handoff_target, opened.handoff_call = handoff.agent_id, rec.call_id
                rec.output = json.dumps({"assistant": graph_agents[handoff.agent_id].name})
                rec.state = "done"
            else:
                refuse(rec, "Multiple handoffs detected, ignoring this one.")
        elif agent.tool(call.name) is None:
            available = ", ".join(t.name for t in agent.tools) or "none"
            refuse(rec, f"Tool {call.name} not found. Available tools: {available}.")
        else:
            problem = check_arguments(call, max_argument_bytes)
            if problem is not None:
                refuse(rec, problem)
    return opened


def to_plan(
    agent: AgentSpec, records: list[CallRecord], policy: PinnedPolicy | None = None
) -> list[CallRecord]:
    """Calls that may need a person.

    A tool with approval "never" needs no plan, unless the run pinned an approval policy: it
    may ask about or deny any call.
    """
    return [
        r
        for r in records
        if r.state == "planning" and (policy is not None or tool_of(agent, r).approval != "never")
    ]


def plan_request(
    agent: AgentSpec, book: ApprovalBook, cfg: RunConfigSpec, policy: PinnedPolicy | None = None
) -> PlanRequest | None:
    """What the model call's activity needs to plan the calls it returns.

    `None`: no tool of `agent` may need a person, or only MCP tools do (planning those needs
    their server).
    """
    tools = [
        t
        for t in agent.tools
        if (policy is not None or t.approval != "never") and t.mcp_server is None
    ]
    if not tools:
        return None
    return PlanRequest(
        tools=[t.name for t in tools],
        run_approver=cfg.approver,
        skip_policy=_ruled(agent, book, cfg, tools),
        pre_approval_guardrails=cfg.pre_approval_tool_input_guardrails,
        policy=policy,
        categories=categories(agent) if policy is not None else {},
    )


def categories(agent: AgentSpec) -> dict[str, list[str]]:
    """The pinned categories of `agent`'s tools that declare some (what policy rules match)."""
    return {t.name: list(t.categories) for t in agent.tools if t.categories}


def given_plans(planned: list[CallRecord], plans: list[CallPlan] | None) -> list[CallPlan] | None:
    """The model call's plans for `planned`, in order, if it made one for each (else `None`).

    The model call planned its output's calls under the model's ids.
    """
    if plans is None:
        return None
    by_id = {p.call_id: p for p in plans}
    if len(by_id) != len(plans) or any(r.model_id not in by_id for r in planned):
        return None
    return [by_id[r.model_id] for r in planned]


def skip_policy(
    agent: AgentSpec, book: ApprovalBook, cfg: RunConfigSpec, records: list[CallRecord]
) -> list[str]:
    """Tools whose approver callbacks need not run: a standing rule decides their calls."""
    return _ruled(agent, book, cfg, [tool_of(agent, r) for r in records])


def _ruled(
    agent: AgentSpec, book: ApprovalBook, cfg: RunConfigSpec, tools: list[ToolSpec]
) -> list[str]:
    """Which of `tools` a standing rule decides (by each tool's approvers, else the run's)."""
    return book.ruled_tools(agent.id, {t.name: t.approvers or cfg.approvers for t in tools})


def apply_plans(
    opened: OpenedTurn,
    planned: list[CallRecord],
    plans: list[CallPlan],
    verdicts: list[PolicyVerdict] | None = None,
) -> dict[str, CallPlan]:
    """Take what `plan_tools` found: refusals, requests, and whether a person is needed.

    Returns the plans by the run's call id (plans are made in call order, under the model's).
    The policy's verdicts are kept on their calls and added to `verdicts` (the run's record).
    """
    by_call = {}
    for rec, plan in zip(planned, plans, strict=True):
        by_call[rec.call_id] = plan
        if plan.verdict is not None:
            plan.verdict.call_id = rec.call_id
            rec.policy = plan.verdict
            if verdicts is not None:
                verdicts.append(plan.verdict)
                del verdicts[:-MAX_VERDICTS_KEPT]
        if plan.refusal is not None:
            # Arguments the tool refuses are the model's mistake; a pre-approval guardrail's
            # refusal is a policy's answer and not a bad turn.
            refuse(rec, plan.refusal)
            if plan.by_policy:
                opened.by_policy.add(rec.call_id)
            continue
        rec.needs_approval = plan.needs_approval
        rec.request = plan.request
    return by_call


def settle(
    agent: AgentSpec,
    opened: OpenedTurn,
    plans: dict[str, CallPlan],
    book: ApprovalBook,
    cfg: RunConfigSpec,
    now: datetime,
    directory: ApproverDirectory | None = None,
) -> list[CallRecord]:
    """Decide every call still being planned; returns the calls that now wait for a person.

    A call the run's approval policy asks about (`ask`) waits for people: its approvers are
    narrowed to the rule's, and approver callbacks and auto-approval may not approve it.
    """
    waiting = []
    for rec in opened.records:
        if rec.state != "planning":
            continue
        tool = tool_of(agent, rec)
        # The graph pinned at run start decides whether a call needs a person: a deploy that
        # relaxes a tool's `needs_approval` does not relax parked runs. Only predicates are
        # evaluated with the code deployed now.
        rec.needs_approval = rec.needs_approval or tool.approval == "always"
        plan = plans.get(rec.call_id)
        rec.approvers = call_approvers(tool, plan, cfg)
        # As with the approval itself, the pinned number is a floor a deploy cannot lower.
        rec.required_approvals = required_approvals(tool, plan)
        asked = _policy_asks(rec, opened, directory) if rec.needs_approval else False
        if asked is None:
            continue  # refused: no one may decide it
        several = rec.required_approvals > 1 or asked
        policy = plan.policy if plan is not None else None
        if not rec.needs_approval:
            rec.state = "approved"
        elif book.apply_rule(rec, now):
            pass  # a standing rule decided it (one its maker may make for this call)
        elif policy is not None and policy_may_decide(tool, policy, several):
            book.decide_by(rec, policy, now)
        elif cfg.auto_approve and tool.auto_approve and not several:
            book.auto_approve(rec, now)  # both keys on: the run's and the tool's
        else:
            rec.state = "awaiting_approval"
            rec.requested_at = now
            timeout = _timeout(tool.approval_timeout_seconds or cfg.approval_timeout_seconds, rec)
            if timeout:
                rec.deadline = now + timedelta(seconds=timeout)
            waiting.append(rec)
    return waiting


def _policy_asks(
    rec: CallRecord, opened: OpenedTurn, directory: ApproverDirectory | None
) -> bool | None:
    """Whether the run's policy asks about the call; narrows its approvers to the rule's.

    Refuses the call (`None`) when no one is admitted by both lists: nobody could decide it.
    """
    verdict = rec.policy
    if verdict is None or verdict.effect != "ask":
        return False
    narrowed = narrow_approvers(rec.approvers, verdict.approvers, directory)
    if narrowed is None:
        refuse(
            rec,
            f"The call was not run: policy rule {verdict.rule} names approvers "
            f"{verdict.approvers} and the tool {rec.approvers}, and no one is in both.",
        )
        opened.by_policy.add(rec.call_id)
        return None
    rec.approvers = narrowed
    return True


def _timeout(seconds: float | None, rec: CallRecord) -> float | None:
    """How long the call may wait: the shorter of the code's and its policy rule's."""
    ruled = rec.policy.approval_timeout_seconds if rec.policy is not None else None
    if ruled and rec.policy is not None and rec.policy.effect == "ask":
        return min(seconds, ruled) if seconds else ruled
    return seconds


def bad_turn(opened: OpenedTurn) -> str | None:
    """Why the turn counts as unusable (every call the model made was refused), or `None`."""
    mistakes = [r for r in opened.records if r.call_id not in opened.by_policy]
    if any(r.state == "refused" for r in mistakes) and all(
        r.state == "refused" for r in mistakes if r.call_id != opened.handoff_call
    ):
        return "; ".join(r.output or "" for r in opened.records if r.output)
    return None
