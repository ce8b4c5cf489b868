"""Activities around tools: planning, execution, and the text a rejected call leaves.

What planning decides about a call (`hitl.activities.planning`) is side-effect free; execution
runs the deployed tool's code, at most once per attempt, with the run's idempotency key.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from hitl._user_code import call_user
from hitl.activities.context import context_value, rebuild_context, user_failure
from hitl.activities.heartbeat import heartbeat_timeout, heartbeating
from hitl.activities.planning import check_guardrails, guardrail_tripwire, plan_call
from hitl.activities.policy import PlanPolicy
from hitl.agent import Agent
from hitl.approval import UserAction
from hitl.context import RunContextWrapper, ToolContext
from hitl.errors import EffectUnknown, UserError
from hitl.guardrails import ToolInputGuardrailData
from hitl.limits import MAX_CONTEXT_BYTES
from hitl.mcp import InputRequired, MCPServerError
from hitl.policy.limits import LimitLedger
from hitl.registry import AgentRegistry
from hitl.run_config import ToolErrorFormatterArgs
from hitl.tools import FunctionTool, ToolArgumentsError, tool_output_text
from hitl.wire import (
    ACT_EXECUTE_TOOL,
    ACT_PLAN_TOOLS,
    ACT_REJECTION_TEXT,
    ExecuteToolInput,
    PlanToolsInput,
    PlanToolsOutput,
    RejectionTextInput,
    RejectionTextOutput,
    RunContextData,
    ToolOutput,
    idempotency_key,
)

log = logging.getLogger("hitl.activities")


class ToolActivities:
    """Plan and execute tool calls with the tools deployed on this worker."""

    def __init__(self, registry: AgentRegistry, ledger: LimitLedger | None = None) -> None:
        self.registry = registry
        self.ledger = ledger

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
            raise user_failure(exc) from None
        ctx = RunContextWrapper(context=context, workflow_id=inp.workflow_id, agent_name=agent.name)
        policy = (
            PlanPolicy(inp.policy, inp.categories, self.ledger, inp.workflow_id)
            if inp.policy is not None
            else None
        )
        plans = [
            await plan_call(
                agent,
                call,
                ctx,
                run_approver,
                inp.skip_policy,
                inp.pre_approval_guardrails,
                policy,
            )
            for call in inp.calls
        ]
        return PlanToolsOutput(plans=plans)

    @activity.defn(name=ACT_EXECUTE_TOOL)
    async def execute_tool(self, inp: ExecuteToolInput) -> ToolOutput:
        """Run one approved (or approval-free) tool call with the deployed tool code.

        A tool with a heartbeat timeout heartbeats from the activity's start, not only while
        its body runs: the timeout runs from the start, and finding the tool (an MCP server's
        listing) and its input guardrails take time of their own.
        """
        async with heartbeating(heartbeat_timeout()):
            return await self._execute_tool(inp)

    async def _execute_tool(self, inp: ExecuteToolInput) -> ToolOutput:
        inp = inp.located(activity.info().workflow_id or "")
        tool = await self._deployed_tool(inp)
        ctx = self._tool_context(inp.root_agent, inp.agent_id, inp, activity.info().attempt)
        if tool.tool_input_guardrails:
            agent = self.registry.agent(inp.root_agent, inp.agent_id)
            refused = await _input_guardrails(agent, tool, inp, ctx)
            if refused is not None:
                return refused
        before = _context_snapshot(ctx.context, inp.context)
        result = await _invoke(tool, ctx, inp.arguments)
        after = _context_snapshot(ctx.context, inp.context)
        changed = (
            RunContextData(value=after, type=inp.context.type if inp.context else None)
            if after is not _UNKNOWN and after != before
            else None
        )
        return _tool_output(inp, tool_output_text(result), changed)

    async def _deployed_tool(self, inp: ExecuteToolInput) -> FunctionTool:
        """The tool as this worker has it now (a run executes tools by name)."""
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
        return tool

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
            raise user_failure(exc) from None
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
            raise user_failure(exc) from None
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


async def _input_guardrails(
    agent: Agent[Any], tool: FunctionTool, inp: ExecuteToolInput, ctx: ToolContext[Any]
) -> ToolOutput | None:
    """The tool's input guardrails, right before it runs (`None`: it may run).

    A guardrail that rejects the content answers the model instead; a tripwire fails the run.
    """
    check = ToolInputGuardrailData(
        context=ctx,
        agent=agent,
        tool_name=tool.name,
        call_id=inp.call_id,
        arguments=inp.arguments,
        params=_params_or_empty(tool, inp.arguments),
    )
    verdict = await check_guardrails(tool, check)
    if verdict is None:
        return None
    name, result = verdict
    if result.behavior == "reject_content":
        return ToolOutput(output=result.message or "", guardrail=name)
    trip = guardrail_tripwire(tool, name, result)
    raise ApplicationError(trip.message, trip.details, type=trip.type, non_retryable=True)


async def _invoke(tool: FunctionTool, ctx: ToolContext[Any], arguments: str) -> Any:
    """Run the tool's code (`execute_tool` heartbeats around it).

    What the tool raises on purpose becomes the typed failure the workflow acts on: bad
    arguments and an unknown effect are not retried, a question (MCP elicitation) parks the
    call for an answer, and an MCP server that cannot be reached is retried.
    """
    try:
        return await tool.invoke(ctx, arguments, UserAction(primary_confirmed=True))
    except ToolArgumentsError as exc:
        raise ApplicationError(str(exc), type="ToolArgumentsInvalid", non_retryable=True) from None
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
                "timeout": ask.timeout,
            },
            type="ToolInputRequired",
            non_retryable=True,
            category=ApplicationErrorCategory.BENIGN,  # a question, not a failure
        ) from None
    except MCPServerError as exc:
        raise ApplicationError(str(exc), type="MCPServerUnavailable") from None


def _tool_output(inp: ExecuteToolInput, text: str, changed: RunContextData | None) -> ToolOutput:
    """What the run records: the output within `max_output_bytes`, the context if it fits.

    The effect happened either way; an oversized context is only not kept (every later
    activity would carry it), and the model is told so.
    """
    if changed is not None:
        size = len(json.dumps(changed.value))
        if size > MAX_CONTEXT_BYTES:
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
