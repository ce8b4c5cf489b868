"""Durable human-in-the-loop agent runs on Temporal.

The API follows the OpenAI Agents SDK's human-in-the-loop flow::

    result = await Runner.run(agent, "Refund order 1001")
    while result.interruptions:
        state = result.to_state()
        for item in result.interruptions:
            state.approve(item)          # or state.reject(item, message="...")
        result = await Runner.run(agent, state)
    print(result.final_output)

Each run is a Temporal workflow (`AgentRun`); model calls and tools are activities; a call that
needs approval parks the run durably until someone decides, from Python, the `temporal` CLI,
the Temporal UI or the `hitl` CLI.
"""

from hitl.agent import Agent, Handoff, handoff
from hitl.approval import ApprovalCall, ApprovalRequest, ToolApproved, ToolDenied, UserAction
from hitl.client import connect, data_converter
from hitl.context import RunContextWrapper, ToolContext
from hitl.errors import (
    AgentsException,
    AlreadyDecidedError,
    DecisionError,
    InvalidDecisionError,
    MaxTurnsExceeded,
    ModelBehaviorError,
    ModelProviderError,
    NotPendingError,
    NoWorkerError,
    RunFailedError,
    RunFinishedError,
    StateVersionError,
    ToolTimeoutError,
    UnknownCallError,
    UserError,
)
from hitl.model import Model, ModelReply, ModelRequest, OpenAIModel, ScriptedModel
from hitl.result import RunResult
from hitl.run import Runner, RunResultStreaming, serve_agents
from hitl.run_config import (
    RunConfig,
    RunErrorHandlerInput,
    RunErrorHandlerResult,
    ToolErrorFormatterArgs,
)
from hitl.session import TemporalSession
from hitl.state import RunState, ToolApprovalItem
from hitl.stream import stream_events
from hitl.tools import FunctionTool, function_tool
from hitl.wire import (
    DEFAULT_TASK_QUEUE,
    WORKFLOW_TYPE,
    DecisionRecord,
    ModelSettings,
    PendingApproval,
    RunEvent,
    RunItem,
    RunStatus,
    Usage,
)

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "WORKFLOW_TYPE",
    "Agent",
    "AgentsException",
    "ApprovalCall",
    "ApprovalRequest",
    "AlreadyDecidedError",
    "DecisionError",
    "DecisionRecord",
    "FunctionTool",
    "Handoff",
    "InvalidDecisionError",
    "MaxTurnsExceeded",
    "Model",
    "ModelBehaviorError",
    "ModelProviderError",
    "ModelReply",
    "ModelRequest",
    "ModelSettings",
    "NoWorkerError",
    "NotPendingError",
    "OpenAIModel",
    "PendingApproval",
    "RunConfig",
    "RunContextWrapper",
    "RunErrorHandlerInput",
    "RunErrorHandlerResult",
    "RunEvent",
    "RunFailedError",
    "RunFinishedError",
    "RunItem",
    "RunResult",
    "RunResultStreaming",
    "RunState",
    "RunStatus",
    "Runner",
    "ScriptedModel",
    "StateVersionError",
    "TemporalSession",
    "ToolApprovalItem",
    "ToolApproved",
    "ToolContext",
    "ToolDenied",
    "ToolErrorFormatterArgs",
    "ToolTimeoutError",
    "UnknownCallError",
    "Usage",
    "UserAction",
    "UserError",
    "connect",
    "data_converter",
    "function_tool",
    "handoff",
    "serve_agents",
    "stream_events",
]
