"""What a failed activity comes to in a run.

Text for the model, a person's turn (an uncertain effect, a tool's question), or a typed end
of the run. Pure: no activities are started here.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from hitl.items import TOOL_ERROR_PREFIX
    from hitl.wire import CallRecord, RunErrorInfo, ToolOutput, ToolSpec


def _details(err: ApplicationError) -> Any:
    """The first detail of an activity's error, decoded (they arrive as raw payloads)."""
    if not err.details:
        return None
    first = err.details[0]
    if isinstance(first, RawValue):
        try:
            return workflow.payload_converter().from_payload(first.payload, dict)
        except Exception:
            return None
    return first


class NeedsInput(Exception):
    """The tool's server asked a question nobody has answered yet (MCP elicitation)."""

    def __init__(
        self,
        server: str,
        message: str,
        schema: dict[str, Any],
        index: int,
        timeout: float | None = None,
    ) -> None:
        super().__init__(message)
        self.server, self.message, self.schema, self.index = server, message, schema, index
        self.timeout = timeout


class Uncertain(Exception):
    """A tool's attempt ended without saying whether its effect happened."""


class RunFailure(Exception):
    """Ends the run as failed with a typed reason (after its handlers finish)."""

    def __init__(self, type_name: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.info = RunErrorInfo(type=type_name, message=message, details=details or {})


def failure_from_activity(err: FailureError, what: str) -> RunFailure:
    """The run's typed failure for an activity that failed for good."""
    cause: BaseException | None = err
    while isinstance(cause, ActivityError) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, CancelledError):
        raise err  # the run is being cancelled: let cancellation propagate
    if isinstance(cause, ApplicationError) and cause.type:
        return RunFailure(cause.type, cause.message)
    if isinstance(cause, TemporalTimeoutError):
        return RunFailure("ModelProviderError", f"{what} timed out: {cause.message}")
    message = cause.message if isinstance(cause, FailureError) else str(cause or err)
    return RunFailure("RunFailedError", f"{what} failed: {message}")


def _error_text(err: ActivityError) -> str:
    cause: BaseException | None = err.cause
    while isinstance(cause, ActivityError) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, TemporalTimeoutError):
        return f"the tool timed out ({cause.type.name.lower() if cause.type else 'timeout'})"
    if isinstance(cause, ApplicationError):
        return cause.message
    return str(cause or err)


def tool_failure(err: ActivityError, rec: CallRecord, tool: ToolSpec) -> ToolOutput:
    """What a failed tool activity comes to: text the model reads, or what the run does next.

    Raises `Uncertain` (the effect may have happened: a person says), `NeedsInput` (the tool's
    server asks a question) or `RunFailure` (a guardrail stopped the run, or a timeout that
    the tool says must fail it).
    """
    cause: BaseException | None = err.cause
    kind = cause.type if isinstance(cause, ApplicationError) else None
    if isinstance(cause, ApplicationError) and kind == "ToolEffectUnknown":
        raise Uncertain(cause.message)
    if isinstance(cause, ApplicationError) and kind == "ToolInputRequired":
        asked = _details(cause)
        if isinstance(asked, dict):
            schema, index = asked.get("schema"), asked.get("index")
            timeout = asked.get("timeout")
            raise NeedsInput(
                str(asked.get("server", "")),
                str(asked.get("message", "")),
                schema if isinstance(schema, dict) else {},
                index if isinstance(index, int) else 0,
                float(timeout)
                if isinstance(timeout, int | float)
                and not isinstance(timeout, bool)
                and 0 < timeout < 10**9
                else None,
            )
    if isinstance(cause, TemporalTimeoutError) and not tool.retry_safe:
        how = cause.type.name.lower() if cause.type else "timeout"
        raise Uncertain(f"the attempt ended without an answer ({how})")
    if isinstance(cause, ApplicationError) and kind == "ToolInputGuardrailTripwireTriggered":
        details = _details(cause)
        raise RunFailure(
            "ToolInputGuardrailTripwireTriggered",
            cause.message,
            details if isinstance(details, dict) else None,
        )
    if isinstance(cause, TemporalTimeoutError):
        timeout = tool.timeout_seconds
        message = f"Tool '{rec.tool_name}' timed out after {timeout:g} seconds."
        if tool.timeout_behavior == "raise_exception":
            raise RunFailure(
                "ToolTimeoutError", message, {"tool": rec.tool_name, "timeout": timeout}
            )
        return ToolOutput(output=message, is_error=True)
    return ToolOutput(output=TOOL_ERROR_PREFIX + _error_text(err), is_error=True)
