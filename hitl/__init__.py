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

from importlib import metadata as _metadata

from hitl.agent import Agent, AgentTool, Handoff, HandoffInputData, handoff
from hitl.approval import ApprovalCall, ApprovalRequest, ToolApproved, ToolDenied, UserAction
from hitl.client import connect, data_converter
from hitl.client_tools import ClientTool, client_tool
from hitl.context import RunContextWrapper, ToolContext
from hitl.editor import ApplyPatchOperation, ApplyPatchResult, apply_diff
from hitl.errors import (
    AgentsException,
    AlreadyDecidedError,
    ConversationLostError,
    DeadlinePassedError,
    DecisionError,
    EffectUnknown,
    GuardrailTripwireTriggered,
    InputGuardrailTripwireTriggered,
    InvalidDecisionError,
    MaxTurnsExceeded,
    ModelBehaviorError,
    ModelProviderError,
    NotAuthorizedError,
    NotPendingError,
    NotRootError,
    NoWorkerError,
    OutputGuardrailTripwireTriggered,
    RunFailedError,
    RunFinishedError,
    StateVersionError,
    StoredPayloadMissing,
    ToolInputGuardrailTripwireTriggered,
    ToolTimeoutError,
    UnknownCallError,
    UserError,
)
from hitl.guardrails import (
    GuardrailFunctionOutput,
    InputGuardrail,
    OutputGuardrail,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    input_guardrail,
    output_guardrail,
    tool_input_guardrail,
)
from hitl.hosted_mcp import (
    HostedMCPTool,
    MCPToolApprovalFunction,
    MCPToolApprovalFunctionResult,
    MCPToolApprovalRequest,
)
from hitl.memory import Session, SessionSettings, SQLiteSession
from hitl.model import Model, ModelReply, ModelRequest, OpenAIModel, ScriptedModel
from hitl.notify import CallbackNotifier, Notifier, WebhookNotifier, verify_webhook
from hitl.refs import allow
from hitl.result import RunResult
from hitl.run import Runner, RunResultStreaming
from hitl.run_config import (
    CallModelData,
    ModelInputData,
    RunConfig,
    RunErrorHandlerInput,
    RunErrorHandlerResult,
    ToolErrorFormatterArgs,
)
from hitl.sdk_events import (
    AgentUpdatedStreamEvent,
    HandoffCallItem,
    HandoffOutputItem,
    ItemHelpers,
    MessageOutputItem,
    RawResponsesStreamEvent,
    ReasoningItem,
    RunItemStreamEvent,
    StreamEvent,
    ToolCallItem,
    ToolCallOutputItem,
)
from hitl.sdk_tools import (
    ApplyPatchTool,
    ShellCallOutcome,
    ShellCommandOutput,
    ShellCommandRequest,
    ShellResult,
    ShellTool,
)
from hitl.serving import serve_agents
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

try:
    __version__ = _metadata.version("hitl-temporal")
except _metadata.PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "__version__",
    # Agents, tools and models
    "Agent",
    "AgentTool",
    "allow",
    "apply_diff",
    "ApplyPatchOperation",
    "ApplyPatchResult",
    "ApplyPatchTool",
    "function_tool",
    "client_tool",
    "ClientTool",
    "FunctionTool",
    "Handoff",
    "HostedMCPTool",
    "handoff",
    "HandoffInputData",
    "Model",
    "ModelReply",
    "ModelRequest",
    "ModelSettings",
    "OpenAIModel",
    "ScriptedModel",
    "ShellCallOutcome",
    "ShellCommandOutput",
    "ShellCommandRequest",
    "ShellResult",
    "ShellTool",
    # Approvals
    "ApprovalCall",
    "ApprovalRequest",
    "ToolApproved",
    "ToolDenied",
    "UserAction",
    # Running, pausing, resuming
    "CallModelData",
    "connect",
    "data_converter",
    "ModelInputData",
    "RunConfig",
    "RunContextWrapper",
    "RunErrorHandlerInput",
    "RunErrorHandlerResult",
    "Runner",
    "RunResult",
    "RunResultStreaming",
    "RunState",
    "serve_agents",
    "stream_events",
    "Session",
    "SessionSettings",
    "SQLiteSession",
    "TemporalSession",
    "ToolApprovalItem",
    "ToolContext",
    "ToolErrorFormatterArgs",
    # The SDK's stream events (`RunResultStreaming.stream_events()`)
    "AgentUpdatedStreamEvent",
    "HandoffCallItem",
    "HandoffOutputItem",
    "ItemHelpers",
    "MessageOutputItem",
    "RawResponsesStreamEvent",
    "ReasoningItem",
    "RunItemStreamEvent",
    "StreamEvent",
    "ToolCallItem",
    "ToolCallOutputItem",
    # Guardrails
    "GuardrailFunctionOutput",
    "input_guardrail",
    "InputGuardrail",
    "output_guardrail",
    "OutputGuardrail",
    "tool_input_guardrail",
    "ToolGuardrailFunctionOutput",
    "ToolInputGuardrail",
    "ToolInputGuardrailData",
    # Notifications
    "CallbackNotifier",
    "Notifier",
    "verify_webhook",
    "WebhookNotifier",
    # What a run reports (its wire contracts)
    "DecisionRecord",
    "DEFAULT_TASK_QUEUE",
    "PendingApproval",
    "RunEvent",
    "RunItem",
    "RunStatus",
    "Usage",
    "WORKFLOW_TYPE",
    # Errors
    "AgentsException",
    "AlreadyDecidedError",
    "DeadlinePassedError",
    "DecisionError",
    "EffectUnknown",
    "GuardrailTripwireTriggered",
    "InputGuardrailTripwireTriggered",
    "InvalidDecisionError",
    "MCPToolApprovalFunction",
    "MCPToolApprovalFunctionResult",
    "MCPToolApprovalRequest",
    "MaxTurnsExceeded",
    "ModelBehaviorError",
    "ModelProviderError",
    "ConversationLostError",
    "NotAuthorizedError",
    "NotPendingError",
    "NotRootError",
    "NoWorkerError",
    "OutputGuardrailTripwireTriggered",
    "RunFailedError",
    "RunFinishedError",
    "StateVersionError",
    "StoredPayloadMissing",
    "ToolInputGuardrailTripwireTriggered",
    "ToolTimeoutError",
    "UnknownCallError",
    "UserError",
]
