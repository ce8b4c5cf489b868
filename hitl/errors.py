"""One exception hierarchy for everything a user of `hitl` can see.

Errors that cross Temporal travel as `ApplicationError`s whose `type` is the class name below;
`from_failure` turns them back into these classes on the client, so a client awaiting
a failed run gets `MaxTurnsExceeded`, not a generic Temporal error.
"""

from __future__ import annotations

from typing import Any


class AgentsException(Exception):
    """Base class of every error raised by `hitl` (the OpenAI Agents SDK's name)."""

    type_name: str = "AgentsException"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class EffectUnknown(AgentsException):
    """Raise from a tool that cannot tell whether its effect happened (a timeout mid-request).

    The call becomes *uncertain*: the run parks and a person says whether it happened, to run
    it again, or to give up. Nothing retries it blindly.
    """

    type_name = "ToolEffectUnknown"


class UserError(AgentsException):
    """The code using `hitl` is misconfigured (unknown agent, unimportable callable, ...)."""

    type_name = "UserError"


class MaxTurnsExceeded(AgentsException):
    """The run used its `max_turns` without a final output and no error handler supplied one."""

    type_name = "MaxTurnsExceeded"


class ModelBehaviorError(AgentsException):
    """The model produced output the run cannot use (invalid structured output, bad turns)."""

    type_name = "ModelBehaviorError"


class ModelProviderError(AgentsException):
    """The model provider refused the request in a way retrying cannot fix."""

    type_name = "ModelProviderError"


class ConversationLostError(ModelProviderError):
    """The provider no longer holds the conversation a run continues (and the run cannot resend it).

    The run started from a `previous_response_id` or in a `conversation_id`, so turns
    before it live only at the provider (responses are kept for a limited time).
    """

    type_name = "ConversationLost"


PREVIOUS_RESPONSE_NOT_FOUND = "PreviousResponseNotFound"
"""Failure type of a model call whose `previous_response_id` the provider no longer has (the
model activity answers it by sending the whole transcript, or fails as `ConversationLost`)."""


class ToolTimeoutError(AgentsException):
    """A tool exceeded its timeout and is configured to fail the run."""

    type_name = "ToolTimeoutError"


class GuardrailTripwireTriggered(AgentsException):
    """A guardrail's tripwire stopped the run.

    Attributes:
        guardrail_name: The guardrail that tripped.
        output_info: What the guardrail returned as `output_info`.
    """

    type_name = "GuardrailTripwireTriggered"

    @property
    def guardrail_name(self) -> str | None:
        """The guardrail that tripped."""
        name = self.details.get("guardrail")
        return str(name) if name is not None else None

    @property
    def output_info(self) -> Any:
        """What the guardrail returned as `output_info`."""
        return self.details.get("output_info")

    @property
    def guardrail_result(self) -> dict[str, Any]:
        """The guardrail's name and output, as recorded with the failure."""
        return dict(self.details)


class InputGuardrailTripwireTriggered(GuardrailTripwireTriggered):
    """An input guardrail tripped before the first model call."""

    type_name = "InputGuardrailTripwireTriggered"


class OutputGuardrailTripwireTriggered(GuardrailTripwireTriggered):
    """An output guardrail tripped on the final output."""

    type_name = "OutputGuardrailTripwireTriggered"


class ToolInputGuardrailTripwireTriggered(GuardrailTripwireTriggered):
    """A tool input guardrail asked to stop the run."""

    type_name = "ToolInputGuardrailTripwireTriggered"


class RunFailedError(AgentsException):
    """The run failed for a reason without a more specific class."""

    type_name = "RunFailedError"


class NoWorkerError(AgentsException):
    """No worker is polling the run's task queue, so nothing would ever execute it."""

    type_name = "NoWorkerError"


class StoredPayloadMissing(AgentsException):
    """A payload kept by reference (`hitl.storage`) could not be read.

    The store lacks it, it was altered, or this process has no store configured
    (`HITL_STORAGE`).
    """

    type_name = "StoredPayloadMissing"


class StateVersionError(AgentsException):
    """A serialized `RunState` was written by a newer version and cannot be read."""

    type_name = "StateVersionError"


class DecisionError(AgentsException):
    """An approval or rejection was refused. Nothing about the run changed."""

    type_name = "DecisionError"


class UnknownCallError(DecisionError):
    """The decision names a call id this run does not know."""

    type_name = "UnknownCall"


class AlreadyDecidedError(DecisionError):
    """The call was already decided differently (the first decision stands)."""

    type_name = "AlreadyDecided"


class NotPendingError(DecisionError):
    """The call does not wait for a decision (it needed no approval)."""

    type_name = "NotPending"


class RunFinishedError(DecisionError):
    """The run has finished; it takes no more decisions."""

    type_name = "RunFinished"


class NotRootError(DecisionError):
    """The decision was sent to a nested run; approvals are decided on the root run."""

    type_name = "NotRoot"


class NotAuthorizedError(DecisionError):
    """The approver is not on the call's list of who may decide it."""

    type_name = "NotAuthorized"


class DeadlinePassedError(DecisionError):
    """The call stopped waiting for a decision (its approval timeout passed)."""

    type_name = "DeadlinePassed"


class InvalidDecisionError(DecisionError):
    """The decision payload is malformed (wrong types, unknown fields)."""

    type_name = "InvalidDecision"


_BY_TYPE: dict[str, type[AgentsException]] = {
    cls.type_name: cls
    for cls in (
        AgentsException,
        EffectUnknown,
        UserError,
        MaxTurnsExceeded,
        ModelBehaviorError,
        ModelProviderError,
        ConversationLostError,
        ToolTimeoutError,
        GuardrailTripwireTriggered,
        InputGuardrailTripwireTriggered,
        OutputGuardrailTripwireTriggered,
        ToolInputGuardrailTripwireTriggered,
        RunFailedError,
        NoWorkerError,
        StoredPayloadMissing,
        StateVersionError,
        DecisionError,
        UnknownCallError,
        AlreadyDecidedError,
        NotPendingError,
        RunFinishedError,
        InvalidDecisionError,
        NotRootError,
        NotAuthorizedError,
        DeadlinePassedError,
    )
}


# Retryable provider failures keep their own type in history (so retries are visible) and
# surface as `ModelProviderError` once retries are exhausted.
_BY_TYPE.update(
    {
        "ModelUnavailable": ModelProviderError,
        "ModelRateLimited": ModelProviderError,
        "ModelTimeout": ModelProviderError,
        PREVIOUS_RESPONSE_NOT_FOUND: ConversationLostError,
    }
)


def error_class(type_name: str | None) -> type[AgentsException] | None:
    """The `hitl` exception class for an `ApplicationError` type, if there is one."""
    if type_name is None:
        return None
    return _BY_TYPE.get(type_name)


def from_failure(type_name: str | None, message: str, details: Any = None) -> AgentsException:
    """Build the typed exception for a failure that crossed Temporal."""
    cls = error_class(type_name) or RunFailedError
    return cls(message, details=details if isinstance(details, dict) else None)
