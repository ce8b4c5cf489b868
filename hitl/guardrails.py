"""Guardrails: checks that can stop a run (input/output) or a tool call (tool input).

Guardrail functions are user code, so they run in activities: input guardrails before the first
model call, output guardrails on the final output, tool input guardrails right before a tool
executes (after its approval) and, with `RunConfig(pre_approval_tool_input_guardrails=True)`,
also before an approval is requested.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from hitl._user_code import call_user
from hitl.context import RunContextWrapper, ToolContext


@dataclass
class GuardrailFunctionOutput:
    """What an input or output guardrail found.

    Attributes:
        output_info: Anything JSON-serializable explaining the verdict (kept with the failure).
        tripwire_triggered: True stops the run with a tripwire exception.
    """

    output_info: Any = None
    tripwire_triggered: bool = False


InputGuardrailFunction: TypeAlias = Callable[
    [RunContextWrapper[Any], Any, "str | list[dict[str, Any]]"],
    GuardrailFunctionOutput | Awaitable[GuardrailFunctionOutput],
]
OutputGuardrailFunction: TypeAlias = Callable[
    [RunContextWrapper[Any], Any, Any],
    GuardrailFunctionOutput | Awaitable[GuardrailFunctionOutput],
]


@dataclass
class InputGuardrail:
    """`(ctx, agent, input) -> GuardrailFunctionOutput`, checked before the first model call."""

    guardrail_function: InputGuardrailFunction
    name: str | None = None

    def get_name(self) -> str:
        """The guardrail's name (its function's name by default)."""
        return self.name or str(getattr(self.guardrail_function, "__name__", "input_guardrail"))

    def __call__(self, *args: Any) -> Any:
        """Call the guardrail function."""
        return self.guardrail_function(*args)


@dataclass
class OutputGuardrail:
    """`(ctx, agent, output) -> GuardrailFunctionOutput`, checked on the final output."""

    guardrail_function: OutputGuardrailFunction
    name: str | None = None

    def get_name(self) -> str:
        """The guardrail's name (its function's name by default)."""
        return self.name or str(getattr(self.guardrail_function, "__name__", "output_guardrail"))

    def __call__(self, *args: Any) -> Any:
        """Call the guardrail function."""
        return self.guardrail_function(*args)


def input_guardrail(fn: InputGuardrailFunction) -> InputGuardrail:
    """Decorator: an input guardrail (module-level, so run configs can name it)."""
    return InputGuardrail(guardrail_function=fn)


def output_guardrail(fn: OutputGuardrailFunction) -> OutputGuardrail:
    """Decorator: an output guardrail (module-level, so run configs can name it)."""
    return OutputGuardrail(guardrail_function=fn)


@dataclass
class ToolGuardrailFunctionOutput:
    """A tool input guardrail's verdict: allow, reject with a message, or stop the run."""

    behavior: Literal["allow", "reject_content", "raise_exception"] = "allow"
    message: str | None = None
    output_info: Any = None

    @classmethod
    def allow(cls, output_info: Any = None) -> ToolGuardrailFunctionOutput:
        """Let the call run."""
        return cls("allow", None, output_info)

    @classmethod
    def reject_content(cls, message: str, output_info: Any = None) -> ToolGuardrailFunctionOutput:
        """Do not run the call; the model sees `message` as its output."""
        return cls("reject_content", message, output_info)

    @classmethod
    def raise_exception(cls, output_info: Any = None) -> ToolGuardrailFunctionOutput:
        """Stop the run with `ToolInputGuardrailTripwireTriggered`."""
        return cls("raise_exception", None, output_info)


@dataclass
class ToolInputGuardrailData:
    """What a tool input guardrail sees."""

    context: ToolContext[Any]
    agent: Any
    tool_name: str
    call_id: str
    arguments: str
    params: dict[str, Any] = field(default_factory=dict)
    stage: Literal["pre_approval", "execution"] = "execution"


ToolInputGuardrailFunction: TypeAlias = Callable[
    [ToolInputGuardrailData], ToolGuardrailFunctionOutput | Awaitable[ToolGuardrailFunctionOutput]
]


@dataclass
class ToolInputGuardrail:
    """A check on a tool call's input, run right before the tool executes."""

    guardrail_function: ToolInputGuardrailFunction
    name: str | None = None

    def get_name(self) -> str:
        """The guardrail's name."""
        name = getattr(self.guardrail_function, "__name__", "tool_input_guardrail")
        return self.name or str(name)

    async def run(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        """Evaluate the guardrail (sync or async function)."""
        result: ToolGuardrailFunctionOutput = await call_user(
            self.guardrail_function,
            data,
            expect=ToolGuardrailFunctionOutput,
            what=f"tool input guardrail {self.get_name()!r}",
        )
        return result


def tool_input_guardrail(fn: ToolInputGuardrailFunction) -> ToolInputGuardrail:
    """Decorator: a tool input guardrail."""
    return ToolInputGuardrail(guardrail_function=fn)


async def evaluate(guardrail: InputGuardrail | OutputGuardrail, *args: Any) -> Any:
    """Run an input/output guardrail (sync or async) and check what it returned."""
    return await call_user(
        guardrail, *args, expect=GuardrailFunctionOutput, what=f"guardrail {guardrail.get_name()!r}"
    )
