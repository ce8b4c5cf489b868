"""Activities around tools: planning, execution, and the text a rejected call leaves.

Planning covers the approval policy, approval requests and argument checks.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from hitl._user_code import call_user
from hitl.activities.context import context_value, rebuild_context
from hitl.activities.heartbeat import heartbeat_timeout, heartbeating
from hitl.agent import Agent
from hitl.approval import ApprovalCall, ApprovalRequest, ToolApproved, ToolDenied, UserAction
from hitl.context import RunContextWrapper, ToolContext
from hitl.errors import EffectUnknown, UserError
from hitl.guardrails import ToolGuardrailFunctionOutput, ToolInputGuardrailData
from hitl.limits import MAX_CONTEXT_BYTES
from hitl.mcp import InputRequired, MCPServerError, mcp_tool
from hitl.registry import AgentRegistry
from hitl.run_config import ToolErrorFormatterArgs
from hitl.tools import FunctionTool, ToolArgumentsError, tool_output_text
from hitl.wire import (
    ACT_EXECUTE_TOOL,
    ACT_PLAN_TOOLS,
    ACT_REJECTION_TEXT,
    ApprovalRequestData,
    CallPlan,
    ExecuteToolInput,
    PlanCall,
    PlanToolsInput,
    PlanToolsOutput,
    PolicyDecision,
    RejectionTextInput,
    RejectionTextOutput,
    RunContextData,
    RunErrorInfo,
    ToolOutput,
    idempotency_key,
)

log = logging.getLogger("hitl.activities")

PLAN_SERVER_ATTEMPTS = 3
"""Attempts of the planning step while an MCP server cannot be reached; then the model is told
the call was not made (the run goes on)."""


MAX_PREVIEW_CHARS = 32_000
"""Previews are stored with the pending approval (history, queries); longer ones are cut."""


def _user_error(exc: UserError) -> ApplicationError:
    return ApplicationError(exc.message, type="UserError", non_retryable=True)


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


class ToolActivities:
    """Plan and execute tool calls with the tools deployed on this worker."""

    def __init__(self, registry: AgentRegistry) -> None:
        self.registry = registry

    @activity.defn(name=ACT_PLAN_TOOLS)
    async def plan_tools(self, inp: PlanToolsInput) -> PlanToolsOutput:
        """Check arguments, evaluate `needs_approval`, render requests, consult approvers.

        Only for calls that may need a person; everything here is side-effect free.
        """
        return await self.plan(inp)

    async def plan(self, inp: PlanToolsInput) -> PlanToolsOutput:
        """`plan_tools`' work, also done by `call_model` for the calls it returns."""
        try:
            agent = self.registry.agent(inp.root_agent, inp.agent_id)
            context = rebuild_context(inp.context, self.registry.allowed)
            run_approver = (
                self.registry.allowed.get_callable(inp.run_approver, what="the run's approver")
                if inp.run_approver
                else None
            )
        except UserError as exc:
            raise _user_error(exc) from None
        ctx = RunContextWrapper(context=context, workflow_id=inp.workflow_id, agent_name=agent.name)
        plans = [
            await self._plan_one(
                agent, call, ctx, run_approver, inp.skip_policy, inp.pre_approval_guardrails
            )
            for call in inp.calls
        ]
        return PlanToolsOutput(plans=plans)

    async def _plan_one(
        self,
        agent: Agent[Any],
        call: PlanCall,
        ctx: RunContextWrapper[Any],
        run_approver: Any,
        skip_policy: list[str],
        pre_approval_guardrails: bool = False,
    ) -> CallPlan:
        if call.mcp_server is None:
            tool = next((t for t in agent.tools if t.name == call.tool_name), None)
        else:
            try:
                tool = await mcp_tool(agent, call.mcp_server, call.tool_name)
            except MCPServerError as exc:
                if activity.in_activity() and activity.info().attempt < PLAN_SERVER_ATTEMPTS:
                    raise ApplicationError(str(exc), type="MCPServerUnavailable") from None
                # Still down: the model is told and may try later; nothing ran.
                return CallPlan(call_id=call.call_id, refusal=f"{exc}. The call was not made.")
        if tool is None:
            return CallPlan(
                call_id=call.call_id, refusal=f"Tool {call.tool_name} is no longer available."
            )
        try:
            params = tool.parse_arguments(call.arguments)
        except ToolArgumentsError as exc:
            return CallPlan(call_id=call.call_id, refusal=f"{exc}. Retry.")
        notes: list[str] = []
        try:
            needs = await tool.evaluate_needs_approval(ctx, params, call.call_id)
        except Exception as exc:
            # Fail safe: when the policy cannot decide, a person does.
            log.warning("needs_approval of %s failed: %r", call.tool_name, exc)
            needs = True
            notes.append(f"the approval predicate failed ({exc!r}), so a person must decide")
        if not needs:
            return CallPlan(call_id=call.call_id, needs_approval=False)
        try:
            required = await tool.evaluate_required_approvals(ctx, params, call.call_id)
        except Exception as exc:
            # Fail safe again: when the count cannot be had, two people decide.
            log.warning("required_approvals of %s failed: %r", call.tool_name, exc)
            required = 2
            notes.append(f"required_approvals failed ({exc!r}), so two people must approve")
        try:
            approvers = await tool.evaluate_approvers(ctx, params, call.call_id)
        except Exception as exc:
            # Fail safe: a call whose approvers cannot be named is not run (nobody could be
            # told apart from anyone).
            log.warning("approvers of %s failed: %r", call.tool_name, exc)
            why = f"{exc!r:.200}"
            return CallPlan(
                call_id=call.call_id,
                refusal=f"The call was not run: its approvers could not be determined ({why}).",
                by_policy=True,
            )
        if pre_approval_guardrails and tool.tool_input_guardrails:
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
            verdict = await _check_guardrails(tool, data)
            if verdict is not None:
                name, result = verdict
                if result.behavior == "reject_content":
                    return CallPlan(
                        call_id=call.call_id, refusal=result.message or "", by_policy=True
                    )
                return CallPlan(call_id=call.call_id, tripwire=_tripwire(tool, name, result))

        try:
            request = await tool.render_request(ctx, params) or default_request(agent, tool, params)
        except Exception as exc:
            log.warning("approval_request of %s failed: %r", call.tool_name, exc)
            request = default_request(agent, tool, params)
            notes.append(f"the tool's approval request failed to render ({exc!r})")

        policy: PolicyDecision | None = None
        if call.tool_name not in skip_policy:
            approval_call = ApprovalCall(
                tool_name=call.tool_name,
                call_id=call.call_id,
                params=params,
                arguments=call.arguments,
                agent_name=agent.name,
                request=request,
            )
            for fn in (tool.approver, run_approver):
                if fn is None:
                    continue
                try:
                    policy = await _consult(fn, ctx, approval_call)
                except Exception as exc:
                    log.warning("approver %s failed: %r", _callable_name(fn), exc)
                    notes.append(f"{_callable_name(fn)} failed ({exc!r}), so a person must decide")
                    break
                if policy is not None:
                    # The run's approver is named by whoever started the run: the workflow
                    # lets it approve only tools that name no approvers of their own.
                    policy.run_level = fn is run_approver and fn is not tool.approver
                    break
        return CallPlan(
            call_id=call.call_id,
            needs_approval=True,
            request=_request_data(request, agent, tool, "; ".join(notes) or None),
            policy=policy,
            note="; ".join(notes) or None,
            required_approvals=required,
            approvers=approvers,
        )

    @activity.defn(name=ACT_EXECUTE_TOOL)
    async def execute_tool(self, inp: ExecuteToolInput) -> ToolOutput:
        """Run one approved (or approval-free) tool call with the deployed tool code."""
        try:
            tool = await self.registry.find_tool(
                inp.root_agent, inp.agent_id, inp.tool_name, inp.mcp_server
            )
        except MCPServerError as exc:
            raise ApplicationError(str(exc), type="MCPServerUnavailable") from None
        if tool is None:
            raise ApplicationError(
                f"tool {inp.tool_name!r} no longer exists on this worker",
                type="ToolNotFound",
                non_retryable=True,
            )
        info = activity.info()
        ctx = self._tool_context(inp.root_agent, inp.agent_id, inp, info.attempt)
        if tool.tool_input_guardrails:
            agent = self.registry.agent(inp.root_agent, inp.agent_id)
            check = ToolInputGuardrailData(
                context=ctx,
                agent=agent,
                tool_name=tool.name,
                call_id=inp.call_id,
                arguments=inp.arguments,
                params=_params_or_empty(tool, inp.arguments),
            )
            verdict = await _check_guardrails(tool, check)
            if verdict is not None:
                name, result = verdict
                if result.behavior == "reject_content":
                    return ToolOutput(output=result.message or "", guardrail=name)
                trip = _tripwire(tool, name, result)
                raise ApplicationError(
                    trip.message, trip.details, type=trip.type, non_retryable=True
                )
        before = _context_snapshot(ctx.context, inp.context)
        async with heartbeating(heartbeat_timeout()):
            try:
                result = await tool.invoke(ctx, inp.arguments, UserAction(primary_confirmed=True))
            except ToolArgumentsError as exc:
                raise ApplicationError(
                    str(exc), type="ToolArgumentsInvalid", non_retryable=True
                ) from None
            except EffectUnknown as exc:
                raise ApplicationError(
                    str(exc) or "the tool cannot tell whether its effect happened",
                    type=EffectUnknown.type_name,
                    non_retryable=True,
                ) from None
            except InputRequired as ask:
                raise ApplicationError(
                    f"{tool.name} asks: {ask.message}",
                    {
                        "server": ask.server,
                        "message": ask.message,
                        "schema": ask.schema,
                        "index": ask.index,
                    },
                    type="ToolInputRequired",
                    non_retryable=True,
                    category=ApplicationErrorCategory.BENIGN,  # a question, not a failure
                ) from None
            except MCPServerError as exc:
                raise ApplicationError(str(exc), type="MCPServerUnavailable") from None
        after = _context_snapshot(ctx.context, inp.context)
        changed = (
            RunContextData(
                value=after,
                type=inp.context.type if inp.context else None,
            )
            if after is not _UNKNOWN and after != before
            else None
        )
        text = tool_output_text(result)
        if changed is not None:
            size = len(json.dumps(changed.value))
            if size > MAX_CONTEXT_BYTES:
                # The effect happened; only the oversized context is not kept (every later
                # activity would carry it).
                log.warning("tool %s grew the run context to %d bytes", inp.tool_name, size)
                changed = None
                text += (
                    f"\n[the tool's change to the run context was not kept: {size} bytes, "
                    f"limit {MAX_CONTEXT_BYTES}]"
                )
        encoded = text.encode("utf-8")
        if len(encoded) > inp.max_output_bytes:
            cut = encoded[: inp.max_output_bytes].decode("utf-8", "ignore")
            note = f"\n[output truncated: {len(encoded)} bytes, limit {inp.max_output_bytes}]"
            return ToolOutput(output=cut + note, truncated=True, context=changed)
        return ToolOutput(output=text, context=changed)

    @activity.defn(name=ACT_REJECTION_TEXT)
    async def rejection_text(self, inp: RejectionTextInput) -> RejectionTextOutput:
        """The text the model sees for a rejected call without a message.

        A tool that takes a `UserAction` and declares `called_on_rejection` is asked (with
        `primary_confirmed=False`, so it does no real work); otherwise the run's
        `tool_error_formatter`; otherwise the default.
        """
        tool = self.registry.tool(inp.root_agent, inp.agent_id, inp.tool_name)
        try:
            if (
                tool is not None and tool.called_on_rejection and inp.mcp_server is None
            ):  # it takes a UserAction
                expired = inp.decision is not None and inp.decision.source == "deadline"
                action = UserAction(primary_confirmed=False, secondary_confirmed=not expired)
                ctx = self._tool_context(inp.root_agent, inp.agent_id, inp, 1)
                result = await tool.invoke(ctx, inp.arguments, action)
                return RejectionTextOutput(message=tool_output_text(result))
            if not inp.formatter:
                return RejectionTextOutput()
            formatter = self.registry.allowed.get_callable(
                inp.formatter, what="the run's tool_error_formatter"
            )
            context = rebuild_context(inp.context, self.registry.allowed)
        except UserError as exc:
            raise _user_error(exc) from None
        args = ToolErrorFormatterArgs(
            kind=inp.kind,
            tool_type="function",
            tool_name=inp.tool_name,
            call_id=inp.call_id,
            default_message=inp.default_message,
            run_context=RunContextWrapper(context=context),
        )
        result = await call_user(formatter, args, what="the run's tool_error_formatter")
        return RejectionTextOutput(message=result if isinstance(result, str) else None)

    def _tool_context(
        self, root: str, agent_id: str, inp: ExecuteToolInput | RejectionTextInput, attempt: int
    ) -> ToolContext[Any]:
        try:
            agent_name = self.registry.agent(root, agent_id).name
            context = rebuild_context(inp.context, self.registry.allowed)
        except UserError as exc:
            raise _user_error(exc) from None
        return ToolContext(
            context=context,
            workflow_id=inp.workflow_id,
            agent_name=agent_name,
            tool_name=inp.tool_name,
            tool_call_id=inp.call_id,
            tool_arguments=inp.arguments,
            # The key the workflow sent with the call; `rejection_text` is sent none: same rule.
            idempotency_key=(
                inp.idempotency_key
                if isinstance(inp, ExecuteToolInput)
                else idempotency_key(inp.workflow_id, inp.call_id)
            ),
            attempt=attempt,
            decision=inp.decision,
            answers=list(inp.answers) if isinstance(inp, ExecuteToolInput) else [],
        )


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


_UNKNOWN: Any = object()


def _context_snapshot(obj: Any, data: RunContextData | None) -> Any:
    """The context's JSON form, to notice a tool changing it (`_UNKNOWN` when it cannot)."""
    if obj is None:
        return None
    try:
        return context_value(obj, data)
    except (TypeError, ValueError):
        return _UNKNOWN


def _params_or_empty(tool: FunctionTool, arguments: str) -> dict[str, Any]:
    try:
        return tool.parse_arguments(arguments)
    except ToolArgumentsError:
        return {}


async def _check_guardrails(
    tool: FunctionTool, data: ToolInputGuardrailData
) -> tuple[str, ToolGuardrailFunctionOutput] | None:
    """The first guardrail that does not allow the call, with its verdict."""
    for guardrail in tool.tool_input_guardrails:
        result = await guardrail.run(data)
        if result.behavior != "allow":
            return guardrail.get_name(), result
    return None


def _tripwire(tool: FunctionTool, name: str, result: ToolGuardrailFunctionOutput) -> RunErrorInfo:
    output = result.output_info
    if hasattr(output, "model_dump"):
        output = output.model_dump(mode="json")
    return RunErrorInfo(
        type="ToolInputGuardrailTripwireTriggered",
        message=f"tool input guardrail {name!r} stopped the run at a call of {tool.name}",
        details={"guardrail": name, "output_info": output, "tool": tool.name},
    )
