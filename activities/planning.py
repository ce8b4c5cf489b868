"""Tool planning: what happens to a model's call before anything runs.

A call is refused (an unknown tool, bad arguments, a guardrail), free to run, or waits for
people: which ones, how many, and what they see. The approver callbacks may decide it first.
Everything here is side-effect free and runs in an activity (`plan_tools`, or `call_model` for
the calls it returns), never in the workflow.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from hitl._user_code import call_user
from hitl.activities.policy import PlanPolicy, release_all, verdict_for
from hitl.agent import Agent
from hitl.approval import ApprovalCall, ApprovalRequest, ToolApproved, ToolDenied
from hitl.context import RunContextWrapper, ToolContext
from hitl.guardrails import ToolGuardrailFunctionOutput, ToolInputGuardrailData
from hitl.limits import MAX_PREVIEW_CHARS
from hitl.mcp import MCPServerError, mcp_tool
from hitl.tools import FunctionTool, ToolArgumentsError
from hitl.wire import (
    ApprovalRequestData,
    CallPlan,
    PlanCall,
    PolicyDecision,
    PolicyVerdict,
    RunErrorInfo,
    idempotency_key,
)

log = logging.getLogger("hitl.activities")


PLAN_SERVER_ATTEMPTS = 3
"""Attempts of the planning step while an MCP server cannot be reached; then the model is told
the call was not made (the run goes on)."""


async def plan_call(
    agent: Agent[Any],
    call: PlanCall,
    ctx: RunContextWrapper[Any],
    run_approver: Any,
    skip_policy: list[str],
    pre_approval_guardrails: bool = False,
    policy: PlanPolicy | None = None,
) -> CallPlan:
    """The plan for one call: refused, free to run, or waiting for people (and which).

    The steps a run's calls go through, in order; each may settle the call. User code that
    fails never lets a call through: a failed predicate means a person decides, a failed count
    means two people, and approvers that cannot be named refuse the call. `notes` collect those
    failures for the person who decides. The run's approval `policy` (docs/policies.md) is
    asked first: its deny refuses the call whatever the code says, its ask makes the call wait
    for people, and its allow frees the call only when the code would too (or defers to it).
    """
    tool = await _tool_to_plan(agent, call)
    if isinstance(tool, CallPlan):
        return tool
    try:
        params = tool.parse_arguments(call.arguments)
    except ToolArgumentsError as exc:
        return CallPlan(call_id=call.call_id, refusal=f"{exc}. Retry.")
    verdict = await _policy_verdict(policy, agent, tool, call)
    if verdict is not None and verdict.effect == "deny":
        return CallPlan(
            call_id=call.call_id, refusal=verdict.message, by_policy=True, verdict=verdict
        )
    notes: list[str] = []
    if not await _needs_approval(tool, ctx, params, call, notes, verdict):
        return CallPlan(call_id=call.call_id, needs_approval=False, verdict=_set(verdict, "free"))
    required = await _required_approvals(tool, ctx, params, call, notes)
    _set(verdict, "asked")
    if verdict is not None and verdict.effect == "ask" and verdict.required_approvals:
        required = max(required or 1, verdict.required_approvals)
    try:
        approvers = await tool.evaluate_approvers(ctx, params, call.call_id)
    except Exception as exc:
        return await _released(_approvers_unknown(call, exc), policy, verdict)
    if pre_approval_guardrails and tool.tool_input_guardrails:
        stopped = await _pre_approval_guardrails(agent, tool, call, ctx, params)
        if stopped is not None:
            return await _released(stopped, policy, verdict)
    plan = await _waiting(agent, tool, call, ctx, params, run_approver, skip_policy, notes)
    plan.required_approvals, plan.approvers, plan.verdict = required, approvers, verdict
    return plan


async def _waiting(
    agent: Agent[Any],
    tool: FunctionTool,
    call: PlanCall,
    ctx: RunContextWrapper[Any],
    params: dict[str, Any],
    run_approver: Any,
    skip_policy: list[str],
    notes: list[str],
) -> CallPlan:
    """A call that waits for people: what they see, and what the approver callbacks say."""
    request = await _request(agent, tool, ctx, params, notes)
    callback = None
    if call.tool_name not in skip_policy:
        approval = ApprovalCall(
            tool_name=call.tool_name,
            call_id=call.call_id,
            params=params,
            arguments=call.arguments,
            agent_name=agent.name,
            request=request,
        )
        callback = await _policy(tool, run_approver, ctx, approval, notes)
    note = "; ".join(notes) or None
    return CallPlan(
        call_id=call.call_id,
        needs_approval=True,
        request=_request_data(request, agent, tool, note),
        policy=callback,
        note=note,
    )


async def _policy_verdict(
    policy: PlanPolicy | None, agent: Agent[Any], tool: FunctionTool, call: PlanCall
) -> PolicyVerdict | None:
    """The run's policy on the call (`None`: no policy); a deny gives back its reservations."""
    if policy is None:
        return None
    reserve_as = call.reserve_as or call.call_id  # an edit reserves under its own id
    verdict = await verdict_for(policy, agent.name, tool.name, reserve_as, call.arguments)
    if verdict.effect == "deny":
        await release_all(policy, verdict, "denied")
        verdict.outcome = "refused"
        verdict.message = verdict.message or "The call was refused by policy."
    return verdict


def _set(verdict: PolicyVerdict | None, outcome: Any) -> PolicyVerdict | None:
    if verdict is not None:
        verdict.outcome = outcome
    return verdict


async def _released(
    plan: CallPlan, policy: PlanPolicy | None, verdict: PolicyVerdict | None
) -> CallPlan:
    """A refusal after the policy asked: the call's reservations go back, the verdict stays."""
    if policy is not None and verdict is not None:
        await release_all(policy, verdict, "refused")
        verdict.outcome = "refused"
        plan.verdict = verdict
    return plan


async def _tool_to_plan(agent: Agent[Any], call: PlanCall) -> FunctionTool | CallPlan:
    """The tool a call names, or the refusal when it cannot be had.

    An MCP server that cannot be reached fails the attempt (retried) until the last of
    `PLAN_SERVER_ATTEMPTS`; then the model is told the call was not made, and the run goes on.
    """
    if call.mcp_server is None:
        tool = next((t for t in agent.tools if t.name == call.tool_name), None)
    else:
        try:
            tool = await mcp_tool(agent, call.mcp_server, call.tool_name)
        except MCPServerError as exc:
            if activity.in_activity() and activity.info().attempt < PLAN_SERVER_ATTEMPTS:
                raise ApplicationError(str(exc), type="MCPServerUnavailable") from None
            return CallPlan(call_id=call.call_id, refusal=f"{exc}. The call was not made.")
    if tool is None:
        return CallPlan(
            call_id=call.call_id, refusal=f"Tool {call.tool_name} is no longer available."
        )
    return tool


async def _needs_approval(
    tool: FunctionTool,
    ctx: RunContextWrapper[Any],
    params: dict[str, Any],
    call: PlanCall,
    notes: list[str],
    verdict: PolicyVerdict | None = None,
) -> bool:
    """Whether people decide the call: the policy's ask, else the tool's `needs_approval`.

    A policy only makes a call stricter than the code: its `allow` frees a call only when the
    tool defers to it (`needs_approval="policy"`). A deferring tool that no enforced rule
    decides asks a person. A failed predicate asks a person.
    """
    if verdict is not None and verdict.effect == "ask":
        return True
    if tool.needs_approval == "policy":
        if verdict is not None and verdict.effect == "allow":
            verdict.deferred = True
            return False
        notes.append("the tool defers to the approval policy and no rule decided it")
        return True
    try:
        return await tool.evaluate_needs_approval(ctx, params, call.call_id)
    except Exception as exc:
        log.warning("needs_approval of %s failed: %r", call.tool_name, exc)
        notes.append(f"the approval predicate failed ({exc!r}), so a person must decide")
        return True


async def _required_approvals(
    tool: FunctionTool,
    ctx: RunContextWrapper[Any],
    params: dict[str, Any],
    call: PlanCall,
    notes: list[str],
) -> int | None:
    """The tool's `required_approvals` for this call; 2 when it fails (two people decide)."""
    try:
        return await tool.evaluate_required_approvals(ctx, params, call.call_id)
    except Exception as exc:
        log.warning("required_approvals of %s failed: %r", call.tool_name, exc)
        notes.append(f"required_approvals failed ({exc!r}), so two people must approve")
        return 2


def _approvers_unknown(call: PlanCall, exc: Exception) -> CallPlan:
    """A call whose approvers cannot be named is not run: nobody could be told apart."""
    log.warning("approvers of %s failed: %r", call.tool_name, exc)
    why = f"{exc!r:.200}"
    return CallPlan(
        call_id=call.call_id,
        refusal=f"The call was not run: its approvers could not be determined ({why}).",
        by_policy=True,
    )


async def _pre_approval_guardrails(
    agent: Agent[Any],
    tool: FunctionTool,
    call: PlanCall,
    ctx: RunContextWrapper[Any],
    params: dict[str, Any],
) -> CallPlan | None:
    """The tool's input guardrails, run before anyone is asked: a refusal, a tripwire, or none."""
    data = ToolInputGuardrailData(
        context=ToolContext(
            context=ctx.context,
            workflow_id=ctx.workflow_id,
            agent_name=agent.name,
            tool_name=tool.name,
            tool_call_id=call.call_id,
            tool_arguments=call.arguments,
            idempotency_key=idempotency_key(ctx.workflow_id, call.call_id),
        ),
        agent=agent,
        tool_name=tool.name,
        call_id=call.call_id,
        arguments=call.arguments,
        params=params,
        stage="pre_approval",
    )
    verdict = await check_guardrails(tool, data)
    if verdict is None:
        return None
    name, result = verdict
    if result.behavior == "reject_content":
        return CallPlan(call_id=call.call_id, refusal=result.message or "", by_policy=True)
    return CallPlan(call_id=call.call_id, tripwire=guardrail_tripwire(tool, name, result))


async def _request(
    agent: Agent[Any],
    tool: FunctionTool,
    ctx: RunContextWrapper[Any],
    params: dict[str, Any],
    notes: list[str],
) -> ApprovalRequest:
    """What the person sees: the tool's own request, else (or when it fails) the default."""
    try:
        return await tool.render_request(ctx, params) or default_request(agent, tool, params)
    except Exception as exc:
        log.warning("approval_request of %s failed: %r", tool.name, exc)
        notes.append(f"the tool's approval request failed to render ({exc!r})")
        return default_request(agent, tool, params)


async def _policy(
    tool: FunctionTool,
    run_approver: Any,
    ctx: RunContextWrapper[Any],
    call: ApprovalCall,
    notes: list[str],
) -> PolicyDecision | None:
    """What the approver callbacks say, the tool's first, then the run's (`None`: a person).

    The first answer counts; a callback that fails stops the asking (a person decides).
    """
    for fn in (tool.approver, run_approver):
        if fn is None:
            continue
        try:
            policy = await _consult(fn, ctx, call)
        except Exception as exc:
            log.warning("approver %s failed: %r", _callable_name(fn), exc)
            notes.append(f"{_callable_name(fn)} failed ({exc!r}), so a person must decide")
            return None
        if policy is not None:
            # The run's approver is named by whoever started the run: the workflow lets it
            # approve only tools that name no approvers of their own.
            policy.run_level = fn is run_approver and fn is not tool.approver
            return policy
    return None


async def _consult(
    fn: Any, ctx: RunContextWrapper[Any], call: ApprovalCall
) -> PolicyDecision | None:
    name = _callable_name(fn)
    expect = (ToolApproved, ToolDenied, type(None))
    result = await call_user(fn, ctx, call, expect=expect, what=f"approver {name}")
    if result is None:
        return None
    if isinstance(result, ToolApproved):
        return PolicyDecision(kind="approve", reason=result.reason, approver=name)
    return PolicyDecision(
        kind="reject", message=result.message, reason=result.reason, approver=name
    )


def default_request(
    agent: Agent[Any], tool: FunctionTool, params: dict[str, Any]
) -> ApprovalRequest:
    """What a person sees for a tool without its own `approval_request`."""
    args = json.dumps(params, indent=2, default=str, ensure_ascii=False)
    summary = tool.description.split("\n\n")[0] if tool.description else tool.name
    return ApprovalRequest(
        title=f"{agent.name} wants to run {tool.name}",
        message=f"{summary}\n\nArguments:\n{args}",
    )


def _request_data(
    req: ApprovalRequest, agent: Agent[Any], tool: FunctionTool, note: str | None = None
) -> ApprovalRequestData:
    preview = req.preview
    if preview is not None and len(preview) > MAX_PREVIEW_CHARS:
        cut = len(preview) - MAX_PREVIEW_CHARS
        preview = preview[:MAX_PREVIEW_CHARS] + f"\n[preview cut: {cut} more characters]"
    return ApprovalRequestData(
        title=req.title or f"{agent.name} wants to run {tool.name}",
        message=req.message,
        preview=preview,
        preview_label=req.preview_label,
        primary_label=req.primary_label,
        secondary_label=req.secondary_label,
        note=note,
    )


def _callable_name(fn: Any) -> str:
    return f"policy:{getattr(fn, '__qualname__', None) or type(fn).__name__}"


async def check_guardrails(
    tool: FunctionTool, data: ToolInputGuardrailData
) -> tuple[str, ToolGuardrailFunctionOutput] | None:
    """The first guardrail that does not allow the call, with its verdict."""
    for guardrail in tool.tool_input_guardrails:
        result = await guardrail.run(data)
        if result.behavior != "allow":
            return guardrail.get_name(), result
    return None


def guardrail_tripwire(
    tool: FunctionTool, name: str, result: ToolGuardrailFunctionOutput
) -> RunErrorInfo:
    """The run's failure when a tool input guardrail's tripwire stops it at a call."""
    output = result.output_info
    if hasattr(output, "model_dump"):
        output = output.model_dump(mode="json")
    return RunErrorInfo(
        type="ToolInputGuardrailTripwireTriggered",
        message=f"tool input guardrail {name!r} stopped the run at a call of {tool.name}",
        details={"guardrail": name, "output_info": output, "tool": tool.name},
    )
