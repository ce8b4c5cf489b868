"""Activities around tools: planning (approval predicates, argument checks) and execution."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.context import rebuild_context
from hitl.context import RunContextWrapper, ToolContext
from hitl.errors import UserError
from hitl.refs import resolve_ref
from hitl.registry import AgentRegistry
from hitl.run_config import ToolErrorFormatterArgs
from hitl.tools import ToolArgumentsError, tool_output_text
from hitl.wire import (
    ACT_EXECUTE_TOOL,
    ACT_FORMAT_TOOL_ERROR,
    ACT_PLAN_TOOLS,
    CallPlan,
    ExecuteToolInput,
    FormatToolErrorInput,
    FormatToolErrorOutput,
    PlanToolsInput,
    PlanToolsOutput,
    ToolOutput,
)

log = logging.getLogger("hitl.activities")


def _user_error(exc: UserError) -> ApplicationError:
    return ApplicationError(exc.message, type="UserError", non_retryable=True)


class ToolActivities:
    """Plan and execute tool calls with the tools deployed on this worker."""

    def __init__(self, registry: AgentRegistry) -> None:
        self.registry = registry

    @activity.defn(name=ACT_PLAN_TOOLS)
    async def plan_tools(self, inp: PlanToolsInput) -> PlanToolsOutput:
        """Check arguments and evaluate `needs_approval` for calls that may need a person."""
        try:
            agent = self.registry.agent(inp.root_agent, inp.agent_id)
            context = rebuild_context(inp.context)
        except UserError as exc:
            raise _user_error(exc) from None
        plans: list[CallPlan] = []
        for call in inp.calls:
            tool = self.registry.tool(inp.root_agent, inp.agent_id, call.tool_name)
            if tool is None:
                plans.append(
                    CallPlan(
                        call_id=call.call_id,
                        refusal=f"Tool {call.tool_name} is no longer available.",
                    )
                )
                continue
            try:
                params = tool.parse_arguments(call.arguments)
            except ToolArgumentsError as exc:
                plans.append(CallPlan(call_id=call.call_id, refusal=f"{exc}. Retry."))
                continue
            ctx = RunContextWrapper(
                context=context, workflow_id=inp.workflow_id, agent_name=agent.name
            )
            try:
                needs = await tool.evaluate_needs_approval(ctx, params, call.call_id)
                plans.append(CallPlan(call_id=call.call_id, needs_approval=needs))
            except Exception as exc:
                # Fail safe: when the policy cannot decide, a person does.
                log.warning("needs_approval of %s failed: %r", call.tool_name, exc)
                plans.append(
                    CallPlan(
                        call_id=call.call_id,
                        needs_approval=True,
                        note=f"approval predicate failed ({exc!r}); a person must decide",
                    )
                )
        return PlanToolsOutput(plans=plans)

    @activity.defn(name=ACT_EXECUTE_TOOL)
    async def execute_tool(self, inp: ExecuteToolInput) -> ToolOutput:
        """Run one approved (or approval-free) tool call with the deployed tool code."""
        tool = self.registry.tool(inp.root_agent, inp.agent_id, inp.tool_name)
        if tool is None:
            raise ApplicationError(
                f"tool {inp.tool_name!r} no longer exists on this worker",
                type="ToolNotFound",
                non_retryable=True,
            )
        info = activity.info()
        try:
            agent_name = self.registry.agent(inp.root_agent, inp.agent_id).name
            context = rebuild_context(inp.context)
        except UserError as exc:
            raise _user_error(exc) from None
        ctx: ToolContext[Any] = ToolContext(
            context=context,
            workflow_id=inp.workflow_id,
            agent_name=agent_name,
            tool_name=inp.tool_name,
            tool_call_id=inp.call_id,
            tool_arguments=inp.arguments,
            idempotency_key=inp.idempotency_key,
            attempt=info.attempt,
            decision=inp.decision,
        )
        async with _heartbeating(
            info.heartbeat_timeout.total_seconds() if info.heartbeat_timeout else None
        ):
            try:
                result = await tool.invoke(ctx, inp.arguments)
            except ToolArgumentsError as exc:
                raise ApplicationError(
                    str(exc), type="ToolArgumentsInvalid", non_retryable=True
                ) from None
        text = tool_output_text(result)
        data = text.encode("utf-8")
        if len(data) > inp.max_output_bytes:
            cut = data[: inp.max_output_bytes].decode("utf-8", "ignore")
            note = f"\n[output truncated: {len(data)} bytes, limit {inp.max_output_bytes}]"
            return ToolOutput(output=cut + note, truncated=True)
        return ToolOutput(output=text)

    @activity.defn(name=ACT_FORMAT_TOOL_ERROR)
    async def format_tool_error(self, inp: FormatToolErrorInput) -> FormatToolErrorOutput:
        """Run the run's `tool_error_formatter` for a rejected call."""
        try:
            formatter = resolve_ref(inp.formatter)
            context = rebuild_context(inp.context)
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
        result = formatter(args)
        if asyncio.iscoroutine(result):
            result = await result
        return FormatToolErrorOutput(message=result if isinstance(result, str) else None)


@contextlib.asynccontextmanager
async def _heartbeating(timeout: float | None) -> AsyncIterator[None]:
    """Heartbeat in the background so a crashed worker is noticed within `timeout`."""
    if not timeout:
        yield
        return

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(max(timeout / 3, 0.1))

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
