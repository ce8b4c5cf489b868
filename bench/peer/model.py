"""The peer's scripted model: the same deterministic script as our `ScriptedModel`s.

A `ModelProvider` handed to `OpenAIAgentsPlugin(model_provider=...)` (the integration's way of
plugging in a custom model; its `testing.TestModelProvider` does the same). It is instant, so
the peer pays only for what its runtime does around the model, as ours does.

Script: without a tool output yet, call `refund` for the order in the user's message; with one,
answer. With `turns=N` in the message, call `fetch_chunk` N times, then answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from agents import Model, ModelProvider, ModelResponse, Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


def _user_text(items: list[Any]) -> str:
    for item in reversed(items):
        if _get(item, "role") == "user":
            content = _get(item, "content")
            if isinstance(content, str):
                return content
            return "".join(str(_get(part, "text") or "") for part in content or [])
    return ""


def _call(name: str, arguments: dict[str, Any], n: int) -> ModelResponse:
    return ModelResponse(
        output=[
            ResponseFunctionToolCall(
                type="function_call",
                id=f"fc_{n}",
                call_id=f"call_{name}_{n}",
                name=name,
                arguments=json.dumps(arguments),
                status="completed",
            )
        ],
        usage=Usage(),
        response_id=None,
    )


def _say(text: str, n: int) -> ModelResponse:
    return ModelResponse(
        output=[
            ResponseOutputMessage(
                id=f"msg_{n}",
                type="message",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
            )
        ],
        usage=Usage(),
        response_id=None,
    )


def respond(items: list[Any]) -> ModelResponse:
    """The script (a pure function of the conversation)."""
    text = _user_text(items)
    outputs = [str(_get(i, "output")) for i in items if _get(i, "type") == "function_call_output"]
    turns = re.search(r"turns=(\d+)", text)
    if turns:
        wanted = int(turns.group(1))
        if len(outputs) >= wanted:
            return _say(f"Read {len(outputs)} chunks.", len(outputs))
        return _call("fetch_chunk", {"index": len(outputs)}, len(outputs))
    if outputs:
        return _say(f"Done: {outputs[-1]}", len(outputs))
    order = re.search(r"\d+", text)
    return _call("refund", {"order_id": int(order.group()) if order else 0}, 0)


class ScriptedPeerModel(Model):
    """An instant, deterministic `agents.Model`."""

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        return respond(items)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the benchmark does not stream")


class ScriptedPeerProvider(ModelProvider):
    """Hands out the scripted model whatever the model name."""

    def __init__(self) -> None:
        self._model = ScriptedPeerModel()

    def get_model(self, model_name: str | None) -> Model:
        return self._model
