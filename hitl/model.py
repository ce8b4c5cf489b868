"""Models an agent can use: OpenAI (or compatible) by name, or a scripted model.

A `ScriptedModel` is **not** a language model: it is a deterministic Python function of the
transcript, for tests and offline demos. Because it is deterministic, retries and replays give
the same answer, and it can run as a local activity.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from hitl._user_code import call_user
from hitl.errors import UserError
from hitl.items import BUILTIN_CALLS, message_text, output_text, payload_field, strict_json
from hitl.wire import ModelSpec, ModelTool

DEFAULT_MODEL = "gpt-4.1"


class Model:
    """Base class of model objects usable as `Agent(model=...)`."""

    def spec(self) -> ModelSpec:
        """The model as data (recorded in history; never holds a key)."""
        raise NotImplementedError


@dataclass
class OpenAIModel(Model):
    """An OpenAI or OpenAI-compatible model reached by the worker.

    Everything here is recorded in history, so it names environment variables for secrets and
    never holds one: the worker reads the values when it calls the model.

    Attributes:
        name: The provider's model name.
        api: `responses` (OpenAI) or `chat` (Chat Completions, what most compatible servers
            speak). Default: `responses` without `base_url`, `chat` with one.
        base_url: Base URL of a compatible server (Ollama, vLLM, LM Studio, a gateway).
        api_key_env: Worker environment variable holding the key (default `OPENAI_API_KEY`).
        local_activity: Run calls as local activities (not recommended for real models).
        timeout_seconds: Seconds the client waits for one HTTP request (default 120). The
            worker keeps it inside the model activity's start-to-close timeout.
        default_headers_env: Extra headers for gateways, as header name -> name of the worker
            environment variable holding the value, e.g. `{"api-key": "AZURE_OPENAI_API_KEY"}`.
            With a `base_url` and no key set, no `Authorization` header is sent.
        default_query: Extra query parameters on every request, e.g. `{"api-version":
            "2024-10-21"}`. Recorded in history as given: never put secrets here.
    """

    name: str
    api: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    local_activity: bool = False
    timeout_seconds: float | None = None
    default_headers_env: Mapping[str, str] | None = None
    default_query: Mapping[str, str] | None = None

    def spec(self) -> ModelSpec:
        """The model as data."""
        api = self.api or ("chat" if self.base_url else "responses")
        if api not in ("responses", "chat"):
            raise UserError(f"api must be 'responses' or 'chat', not {self.api!r}")
        if self.timeout_seconds is not None and not self.timeout_seconds > 0:
            raise UserError(f"timeout_seconds must be positive, not {self.timeout_seconds!r}")
        # A value pasted where a variable name belongs would be recorded in history; the
        # messages below therefore never repeat it.
        if self.api_key_env is not None and not _ENV_NAME.match(self.api_key_env):
            raise UserError(
                "api_key_env must be the name of an environment variable (letters, digits, _), "
                "not the key itself"
            )
        headers = dict(self.default_headers_env or {})
        for header, var in headers.items():
            if not _ENV_NAME.match(var):
                raise UserError(
                    f"default_headers_env[{header!r}] must be the name of an environment variable "
                    "(letters, digits, _), not the header's value"
                )
        return ModelSpec(
            provider="openai",
            name=self.name,
            api=api,
            base_url=self.base_url,
            api_key_env=self.api_key_env,
            local_activity=self.local_activity,
            timeout_seconds=self.timeout_seconds,
            default_headers_env=headers or None,
            default_query=dict(self.default_query) if self.default_query else None,
        )


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def model_spec_for(model: str | Model | None, default: str | None = None) -> ModelSpec:
    """Resolve an agent's `model=` (a name, a `Model`, or `None`) to its spec.

    Without a model, `HITL_DEFAULT_MODEL`, then `OPENAI_DEFAULT_MODEL`, then `gpt-4.1` is used.
    Names may be provider-qualified: `openai:gpt-4.1` (Responses API), `openai-chat:gpt-4.1`
    (Chat Completions), or `scripted:<name>` for a registered `ScriptedModel`.
    """
    if isinstance(model, Model):
        return model.spec()
    # Read where agents are captured (clients, workers), never in workflow code.
    name = (
        model
        or default
        or os.environ.get("HITL_DEFAULT_MODEL")
        or os.environ.get("OPENAI_DEFAULT_MODEL")
        or DEFAULT_MODEL
    )
    if name.startswith("scripted:"):
        scripted = ScriptedModel.registered(name.removeprefix("scripted:"))
        return scripted.spec()
    if name.startswith("openai-chat:"):
        return OpenAIModel(name.removeprefix("openai-chat:"), api="chat").spec()
    return OpenAIModel(name.removeprefix("openai:")).spec()


# --------------------------------------------------------------------------- scripted model


@dataclass
class ToolResultView:
    """A tool call in the transcript together with its output (if it has one yet)."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    output: str | None


@dataclass
class ModelRequest:
    """What a scripted model sees: the same inputs a real model would get."""

    agent_name: str
    instructions: str | None
    input: list[dict[str, Any]]
    tools: list[ModelTool]
    output_schema: dict[str, Any] | None
    turn: int
    context: Any = None

    def tool_names(self) -> list[str]:
        """Names of the tools offered this turn (handoffs included)."""
        return [t.name for t in self.tools]

    def last_user_text(self) -> str:
        """Text of the latest user message ('' when there is none)."""
        for item in reversed(self.input):
            if item.get("role") == "user":
                return message_text(item)
        return ""

    def tool_results(self, since_last_user: bool = True) -> list[ToolResultView]:
        """Tool calls with their outputs, oldest first (by default since the last user message)."""
        items = self.input
        if since_last_user:
            for i in range(len(items) - 1, -1, -1):
                if items[i].get("role") == "user":
                    items = items[i + 1 :]
                    break
        outputs = {
            it["call_id"]: text
            for it in items
            if isinstance(it.get("call_id"), str) and (text := output_text(it)) is not None
        }
        builtins = {f"{t.builtin}_call": t.name for t in self.tools if t.builtin is not None}
        views = []
        for it in items:
            kind = it.get("type")
            if isinstance(kind, str) and kind in BUILTIN_CALLS:
                key, default = payload_field(kind, it), BUILTIN_CALLS[kind][1]
                payload = it.get(key)
                views.append(
                    ToolResultView(
                        call_id=str(it.get("call_id")),
                        name=builtins.get(kind, default),
                        arguments={key: payload},
                        output=outputs.get(str(it.get("call_id"))),
                    )
                )
            elif kind == "function_call":
                try:
                    args = strict_json(it.get("arguments") or "{}")
                except ValueError:  # whatever the model sent (a script reads it as no arguments)
                    args = {}
                views.append(
                    ToolResultView(
                        call_id=it["call_id"],
                        name=it["name"],
                        arguments=args if isinstance(args, dict) else {},
                        output=outputs.get(it["call_id"]),
                    )
                )
        return views

    def results_for(self, name: str) -> list[ToolResultView]:
        """Tool results of the tool called `name`, since the last user message."""
        return [r for r in self.tool_results() if r.name == name]


@dataclass
class ScriptedCall:
    """A tool call a scripted model makes. `arguments` may be a raw string (to test bad JSON).

    `call_id`: the id the model gives the call (default: derived from the transcript); any
    string, as a real model may send (the run names its calls itself).
    """

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    call_id: str | None = None


@dataclass
class ModelReply:
    """What a scripted model answers: text, tool calls, or both."""

    text: str | None = None
    tool_calls: list[ScriptedCall] = field(default_factory=list)
    items: list[dict[str, Any]] | None = None
    """Output items sent as they are, instead of `text` and `tool_calls` (`ModelReply.raw`)."""

    @classmethod
    def raw(cls, *items: dict[str, Any]) -> ModelReply:
        """Responses output items exactly as given: to test what a model may really send."""
        return cls(items=[dict(i) for i in items])

    @classmethod
    def say(cls, text: str) -> ModelReply:
        """A final answer."""
        return cls(text=text)

    @classmethod
    def output(cls, value: Any) -> ModelReply:
        """A structured final answer, sent as JSON text (as a real model would)."""
        if hasattr(value, "model_dump_json"):
            return cls(text=value.model_dump_json())
        return cls(text=json.dumps(value))

    @classmethod
    def call(
        cls,
        name: str,
        arguments: dict[str, Any] | str | None = None,
        *,
        call_id: str | None = None,
    ) -> ModelReply:
        """One tool call (`call_id`: the model's id for it; default derived)."""
        args = arguments if arguments is not None else {}
        return cls(tool_calls=[ScriptedCall(name, args, call_id)])

    @classmethod
    def calls(cls, *calls: tuple[str, dict[str, Any] | str]) -> ModelReply:
        """Several tool calls in one turn (parallel tool calls)."""
        return cls(tool_calls=[ScriptedCall(n, a) for n, a in calls])


ScriptFunction: TypeAlias = Callable[[ModelRequest], ModelReply | Awaitable[ModelReply]]

_SCRIPTED: dict[str, ScriptedModel] = {}


class ScriptedModel(Model):
    """A deterministic function of the transcript standing in for a model (tests, offline demos).

    The function receives a `ModelRequest` and returns a `ModelReply`. It must be deterministic
    (same transcript, same reply) because Temporal may retry or replay the call. Call ids are
    derived from the transcript, so they are stable too.

    Args:
        fn: The script.
        name: Registry name (default: the function's qualified name). Workers find the script
            by this name, so the module defining it must be imported by the worker.
        local_activity: Run as a local activity (default; the script is instant).
    """

    def __init__(
        self, fn: ScriptFunction, name: str | None = None, *, local_activity: bool = True
    ) -> None:
        self.fn = fn
        self.name = name or f"{fn.__module__}.{fn.__qualname__}"
        self.local_activity = local_activity
        _SCRIPTED[self.name] = self

    @classmethod
    def from_steps(
        cls, steps: Sequence[ModelReply], name: str, *, local_activity: bool = True
    ) -> ScriptedModel:
        """A script that answers `steps[turn]` on turn `turn` (the last step repeats)."""
        frozen = list(steps)
        if not frozen:
            raise UserError("from_steps needs at least one step")

        def by_turn(req: ModelRequest) -> ModelReply:
            return frozen[min(req.turn, len(frozen) - 1)]

        return cls(by_turn, name=name, local_activity=local_activity)

    @staticmethod
    def registered(name: str) -> ScriptedModel:
        """The scripted model registered under `name`."""
        try:
            return _SCRIPTED[name]
        except KeyError:
            raise UserError(
                f"no scripted model named {name!r} is registered in this process; "
                "import the module that defines it in the worker"
            ) from None

    def spec(self) -> ModelSpec:
        """The model as data."""
        return ModelSpec(provider="scripted", name=self.name, local_activity=self.local_activity)

    async def respond(self, request: ModelRequest) -> list[dict[str, Any]]:
        """Run the script and render its reply as Responses output items."""
        reply = await call_user(
            self.fn, request, expect=ModelReply, what=f"scripted model {self.name!r}"
        )
        if reply.items is not None:
            return [dict(i) for i in reply.items]
        seed = hashlib.sha256(
            json.dumps([request.agent_name, request.turn, request.input], sort_keys=True).encode()
        ).hexdigest()
        out: list[dict[str, Any]] = []
        for i, call in enumerate(reply.tool_calls):
            args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
            out.append(
                {
                    "type": "function_call",
                    "id": f"fc_{seed[:12]}_{i}",
                    "call_id": call.call_id or f"call_{seed[:12]}_{i}",
                    "name": call.name,
                    "arguments": args,
                    "status": "completed",
                }
            )
        if reply.text is not None:
            out.insert(
                0,
                {
                    "type": "message",
                    "id": f"msg_{seed[:12]}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                },
            )
        return out
