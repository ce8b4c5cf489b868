"""The two OpenAI APIs a model turn can take: Responses, and Chat Completions.

OpenAI's models answer through Responses; OpenAI-compatible servers (`base_url`) through Chat
Completions. Either way the request is built from `CallModelInput` and the answer read back as
Responses output items. The client, its secrets and its errors are `openai_model`'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from openai import AsyncOpenAI
from openai.types.responses import Response
from temporalio.exceptions import ApplicationError

from hitl.wire import CallModelInput, ModelSettings, ModelTool, Usage

OnDelta = Callable[[str], None]
"""Receives each text delta of a streamed model answer."""


# ----------------------------------------------------------------------------- Responses API


def _settings_responses(settings: ModelSettings) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if settings.temperature is not None:
        out["temperature"] = settings.temperature
    if settings.top_p is not None:
        out["top_p"] = settings.top_p
    if settings.max_tokens is not None:
        out["max_output_tokens"] = settings.max_tokens
    if settings.tool_choice is not None:
        out["tool_choice"] = _tool_choice(settings.tool_choice, chat=False)
    if settings.parallel_tool_calls is not None:
        out["parallel_tool_calls"] = settings.parallel_tool_calls
    if settings.reasoning_effort is not None:
        out["reasoning"] = {"effort": settings.reasoning_effort}
    if settings.extra_args:
        out["extra_body"] = settings.extra_args
    return out


def _tool_choice(choice: str, *, chat: bool) -> Any:
    if choice in ("auto", "required", "none"):
        return choice
    if choice.startswith("mcp:"):  # a hosted MCP server's tool (`MCPToolChoice`)
        label, _, name = choice[4:].partition(":")
        return {"type": "mcp", "server_label": label, "name": name}
    if chat:
        return {"type": "function", "function": {"name": choice}}
    return {"type": "function", "name": choice}


async def responses_turn(
    client: AsyncOpenAI,
    inp: CallModelInput,
    instructions: str | None,
    transcript: list[dict[str, Any]],
    on_delta: OnDelta | None = None,
    request: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], Usage, str | None]:
    """One turn with the Responses API: output items, usage, and the response id.

    `request` holds extra client options (headers); with `on_delta`, the answer is streamed.
    """
    kwargs = _responses_request(inp, instructions, transcript, request)
    if on_delta is None:
        resp = await _post_response(client, kwargs)
    else:
        resp = await _stream_response(client, kwargs, on_delta)
    output = [item.model_dump(mode="json", exclude_none=True) for item in resp.output]
    usage = Usage(requests=1)
    if resp.usage is not None:
        usage = Usage(
            requests=1,
            input_tokens=resp.usage.input_tokens,
            output_tokens=resp.usage.output_tokens,
            total_tokens=resp.usage.total_tokens,
        )
    return output, usage, resp.id


def _responses_request(
    inp: CallModelInput,
    instructions: str | None,
    transcript: list[dict[str, Any]],
    request: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The `responses.create` parameters for this turn."""
    kwargs: dict[str, Any] = {"model": inp.model_spec.name, "input": transcript, **(request or {})}
    if inp.previous_response_id:
        kwargs["previous_response_id"] = inp.previous_response_id
    elif inp.conversation_id:
        kwargs["conversation"] = inp.conversation_id
    if instructions:
        kwargs["instructions"] = instructions
    if inp.tools:
        kwargs["tools"] = [
            _builtin_tool(t)
            if t.builtin is not None
            else {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.params_json_schema,
                "strict": t.strict,
            }
            for t in inp.tools
        ]
    if inp.output_schema is not None:
        kwargs["text"] = {
            "format": {
                "type": "json_schema",
                "name": "final_output",
                "schema": inp.output_schema,
                "strict": True,
            }
        }
    kwargs.update(_settings_responses(inp.settings))
    return kwargs


_BUILTIN_TOOLS: dict[str, dict[str, Any]] = {
    "shell": {"type": "shell", "environment": {"type": "local"}},
    "apply_patch": {"type": "apply_patch"},
}
"""Built-in tools as Responses declares them; the model calls them with `shell_call` /
`apply_patch_call` items (Chat Completions gets a function tool of the same name instead)."""


def _builtin_tool(tool: ModelTool) -> dict[str, Any]:
    if tool.builtin == "hosted_mcp":
        return {"type": "mcp", **(tool.builtin_config or {})}
    return _BUILTIN_TOOLS[tool.builtin or ""]


async def _post_response(client: AsyncOpenAI, kwargs: dict[str, Any]) -> Response:
    """The answer in one piece, posted as it is.

    `responses.create` first walks the parameters against their TypedDicts (about 1 ms of CPU
    per call, as much as the rest of the client's work). They are JSON already and the Responses
    parameters have no aliases or formats to apply.
    """
    headers = kwargs.pop("extra_headers", None)
    extra = kwargs.pop("extra_body", None) or {}
    body = {**kwargs, **extra}
    resp: Response = await client.post(
        "/responses",
        body=body,
        cast_to=Response,
        options={"headers": headers} if headers else {},
    )
    return resp


async def _stream_response(
    client: AsyncOpenAI, kwargs: dict[str, Any], on_delta: OnDelta
) -> Response:
    """The answer streamed: each text delta to `on_delta`, then the final response."""
    final: Response | None = None
    stream = await client.responses.create(**kwargs, stream=True)
    async for event in stream:
        if event.type == "response.output_text.delta":
            on_delta(event.delta)
        elif event.type in ("response.completed", "response.incomplete"):
            final = event.response
        elif event.type in ("response.failed", "error"):
            detail = getattr(getattr(event, "response", None), "error", None) or event
            raise ApplicationError(f"the model failed: {detail}", type="ModelUnavailable")
    if final is None:
        raise ApplicationError("the stream ended without a response", type="ModelUnavailable")
    return final


# ----------------------------------------------------------------------------- Chat Completions


def to_chat_messages(
    instructions: str | None, transcript: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Responses input items as Chat Completions messages (tool calls grouped per turn)."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    for item in transcript:
        kind = item.get("type")
        role = item.get("role")
        if kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            elif last is not None and last["role"] == "assistant" and last.get("_open"):
                last["tool_calls"] = [call]
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item["call_id"],
                    "content": output if isinstance(output, str) else json.dumps(output),
                }
            )
        elif role in ("user", "system", "developer", "assistant"):
            text = _text(item.get("content"))
            msg: dict[str, Any] = {"role": "system" if role == "developer" else role}
            msg["content"] = text
            if role == "assistant":
                msg["_open"] = True  # tool calls of the same turn attach to this message
            messages.append(msg)
        # reasoning and other provider-specific items have no Chat Completions form
    for m in messages:
        m.pop("_open", None)
    return messages


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return ""


def _chat_tools(tools: list[ModelTool]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.params_json_schema,
                "strict": t.strict,
            },
        }
        for t in tools
        if t.builtin != "hosted_mcp"  # the provider calls a hosted server: Responses only
    ]


async def chat_turn(
    client: AsyncOpenAI,
    inp: CallModelInput,
    instructions: str | None,
    transcript: list[dict[str, Any]],
    on_delta: OnDelta | None = None,
    request: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], Usage, str | None]:
    """One turn with Chat Completions, read back as Responses output items (as `responses_turn`).

    The transcript becomes chat messages (`to_chat_messages`); reasoning items are left out.
    """
    s = inp.settings
    kwargs: dict[str, Any] = {
        "model": inp.model_spec.name,
        "messages": to_chat_messages(instructions, transcript),
        **(request or {}),
    }
    if _chat_tools(inp.tools):
        kwargs["tools"] = _chat_tools(inp.tools)
        if s.parallel_tool_calls is not None:
            kwargs["parallel_tool_calls"] = s.parallel_tool_calls
        if s.tool_choice is not None and not s.tool_choice.startswith("mcp:"):
            # (a hosted MCP tool is Responses only: Chat Completions is not offered it)
            kwargs["tool_choice"] = _tool_choice(s.tool_choice, chat=True)
    if inp.output_schema is not None:
        kwargs["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "final_output", "schema": inp.output_schema, "strict": True},
        }
    if s.temperature is not None:
        kwargs["temperature"] = s.temperature
    if s.top_p is not None:
        kwargs["top_p"] = s.top_p
    if s.max_tokens is not None:
        kwargs["max_tokens"] = s.max_tokens
    if s.reasoning_effort is not None:
        kwargs["reasoning_effort"] = s.reasoning_effort
    if s.extra_args:
        kwargs["extra_body"] = s.extra_args
    if on_delta is not None:
        return await _chat_streamed(client, kwargs, on_delta)
    resp = await client.chat.completions.create(**kwargs)
    if not resp.choices:
        raise ApplicationError(
            "the model returned no choices", type="ModelBehaviorError", non_retryable=False
        )
    msg = resp.choices[0].message
    calls = [
        (tc.id, tc.function.name, tc.function.arguments or "")
        for tc in msg.tool_calls or []
        if getattr(tc, "function", None) is not None
    ]
    return _chat_output(resp.id, msg.content, calls, resp.usage)


async def _chat_streamed(
    client: AsyncOpenAI, kwargs: dict[str, Any], on_delta: OnDelta
) -> tuple[list[dict[str, Any]], Usage, str | None]:
    stream = await client.chat.completions.create(
        **kwargs, stream=True, stream_options={"include_usage": True}
    )
    rid: str | None = None
    text: list[str] = []
    calls: dict[int, list[str]] = {}
    usage = None
    async for chunk in stream:
        rid = chunk.id or rid
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                text.append(delta.content)
                on_delta(delta.content)
            for tc in delta.tool_calls or []:
                slot = calls.setdefault(tc.index, ["", "", ""])
                if tc.id:
                    slot[0] = tc.id
                if tc.function is not None:
                    slot[1] += tc.function.name or ""
                    slot[2] += tc.function.arguments or ""
    ordered = [(c[0], c[1], c[2]) for _, c in sorted(calls.items())]
    return _chat_output(rid or "stream", "".join(text) or None, ordered, usage)


def _chat_output(
    rid: str, content: str | None, calls: list[tuple[str, str, str]], usage: Any
) -> tuple[list[dict[str, Any]], Usage, str | None]:
    output: list[dict[str, Any]] = []
    if content:
        output.append(
            {
                "type": "message",
                "id": f"msg_{rid}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": content, "annotations": []}],
            }
        )
    for call_id, name, arguments in calls:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{call_id}",
                "call_id": call_id,
                "name": name,
                "arguments": arguments,
                "status": "completed",
            }
        )
    total = Usage(requests=1)
    if usage is not None:
        total = Usage(
            requests=1,
            input_tokens=usage.prompt_tokens,
            output_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
        )
    return output, total, rid
