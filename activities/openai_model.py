"""OpenAI (and OpenAI-compatible) model calls, for the `call_model` activity.

The client is built with `max_retries=0`: Temporal owns retries, so every attempt is visible in
history. Provider errors map to retryable or non-retryable `ApplicationError`s; a 429 retries
after the server's `Retry-After`. Keys and secret headers are read from the worker's environment
and never appear in inputs, results or error messages.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import openai
from openai import AsyncOpenAI, Omit
from openai.types.responses import Response
from temporalio import activity
from temporalio.exceptions import ApplicationError

from hitl.wire import CallModelInput, ModelSettings, ModelSpec, ModelTool, Usage

OnDelta = Callable[[str], None]
"""Receives each text delta of a streamed model answer."""

CLIENT_TIMEOUT = 120.0
"""Default seconds one HTTP request may take (`OpenAIModel(timeout_seconds=)` changes it)."""

ACTIVITY_MARGIN = 10.0
"""Seconds the activity keeps after the client gives up, to report a typed, retryable error."""

MAX_RETRY_AFTER = 600.0
"""Longest server-requested wait honoured; a longer `Retry-After` is clamped to this."""

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
NO_KEY = "not-needed"
"""Sent as the key to local servers that need none (Ollama, vLLM, LM Studio)."""

_KEYLIKE = re.compile(r"\b(sk|rk|pk)-[A-Za-z0-9_\-*]{6,}")


def client_timeout(spec: ModelSpec, activity_timeout: timedelta | None = None) -> float:
    """Seconds the client waits for one HTTP request: the spec's, kept inside the activity's.

    The activity's start-to-close timeout must end after the client's, so that a slow provider
    fails as a `ModelTimeout` this activity reports rather than as an anonymous activity timeout.
    """
    wanted = spec.timeout_seconds or CLIENT_TIMEOUT
    if activity_timeout is None:
        return wanted
    budget = activity_timeout.total_seconds()
    return min(wanted, budget - min(ACTIVITY_MARGIN, budget / 2))


class OpenAIProvider:
    """Builds clients per model configuration and turns responses into Responses items."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = env if env is not None else os.environ
        self._clients: dict[tuple[Any, ...], AsyncOpenAI] = {}

    def _key(self, spec: ModelSpec) -> str:
        var = spec.api_key_env or DEFAULT_KEY_ENV
        key = self._env.get(var, "")
        if not key:
            if spec.base_url and not spec.api_key_env:
                # Local servers (Ollama, vLLM, LM Studio) usually need no key at all. A variable
                # the agent names explicitly, though, is configuration that must be present.
                return NO_KEY
            raise ApplicationError(
                f"{var} is not set in the worker's environment; set it where the worker runs "
                "(keys never travel through Temporal)",
                type="ModelProviderError",
                non_retryable=True,
            )
        return key

    def _headers(self, spec: ModelSpec) -> dict[str, str]:
        headers = {}
        for header, var in (spec.default_headers_env or {}).items():
            value = self._env.get(var, "")
            if not value:
                raise ApplicationError(
                    f"{var} is not set in the worker's environment; it holds the {header!r} "
                    f"header of model {spec.name!r} (set it where the worker runs)",
                    type="ModelProviderError",
                    non_retryable=True,
                )
            headers[header] = value
        return headers

    async def aclose(self) -> None:
        """Close the clients built so far (their connection pools); later calls build anew."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()

    def client(self, spec: ModelSpec) -> tuple[AsyncOpenAI, tuple[str, ...]]:
        """A client for this model spec and the secrets it sends (for scrubbing errors).

        Raises:
            ApplicationError: (non-retryable `ModelProviderError`) a variable is not set.
        """
        key = self._key(spec)
        headers = self._headers(spec)
        in_activity = activity.in_activity()
        timeout = client_timeout(
            spec, activity.info().start_to_close_timeout if in_activity else None
        )
        query = dict(spec.default_query or {})
        cache_key = (
            spec.base_url,
            key,
            timeout,
            tuple(sorted(headers.items())),
            tuple(sorted(query.items())),
        )
        client = self._clients.get(cache_key)
        if client is None:
            if in_activity and spec.timeout_seconds and timeout < spec.timeout_seconds:
                activity.logger.warning(
                    "model %r: client timeout cut from %gs to %gs to end inside the "
                    "activity's start-to-close timeout",
                    spec.name,
                    spec.timeout_seconds,
                    timeout,
                )
            client = AsyncOpenAI(
                api_key=key,
                base_url=spec.base_url,
                max_retries=0,
                timeout=timeout,
                default_headers=headers or None,
                default_query=query or None,
            )
            self._clients[cache_key] = client
        return client, (key, *headers.values())

    async def respond(
        self,
        inp: CallModelInput,
        instructions: str | None,
        transcript: list[dict[str, Any]],
        on_delta: OnDelta | None = None,
    ) -> tuple[list[dict[str, Any]], Usage, str | None]:
        """One model turn as Responses output items, its usage, and the response id.

        With `on_delta`, the model is asked to stream and each text delta is passed on.
        """
        client, secrets = self.client(inp.model)
        request: dict[str, Any] = {}
        if secrets[0] == NO_KEY and len(secrets) > 1:
            # The gateway authenticates by its own header: send no placeholder bearer token.
            request["extra_headers"] = {"Authorization": Omit()}
        try:
            if inp.model.api == "chat":
                return await _chat(client, inp, instructions, transcript, on_delta, request)
            return await _responses(client, inp, instructions, transcript, on_delta, request)
        except openai.APIError as exc:
            raise map_error(exc, inp.model, *secrets) from None
        except ApplicationError:
            raise
        except Exception as exc:
            # Anything else the client raised (a transport error, an unreadable answer) is
            # retried like a connection failure; its text is scrubbed like the provider's.
            detail = scrub(f"{type(exc).__name__}: {exc}", *secrets)
            raise ApplicationError(
                f"model {inp.model.name!r}: {detail}", type="ModelUnavailable"
            ) from None


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
    if chat:
        return {"type": "function", "function": {"name": choice}}
    return {"type": "function", "name": choice}


async def _responses(
    client: AsyncOpenAI,
    inp: CallModelInput,
    instructions: str | None,
    transcript: list[dict[str, Any]],
    on_delta: OnDelta | None = None,
    request: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], Usage, str | None]:
    kwargs: dict[str, Any] = {"model": inp.model.name, "input": transcript, **(request or {})}
    if inp.previous_response_id:
        kwargs["previous_response_id"] = inp.previous_response_id
    if instructions:
        kwargs["instructions"] = instructions
    if inp.tools:
        kwargs["tools"] = [
            {
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
    if on_delta is None:
        # `responses.create` first walks the parameters against their TypedDicts (about 1 ms
        # of CPU per call, as much as the rest of the client's work). They are JSON already and
        # the Responses parameters have no aliases or formats to apply: post them as they are.
        headers = kwargs.pop("extra_headers", None)
        extra = kwargs.pop("extra_body", None) or {}
        body = {**kwargs, **extra}
        resp = await client.post(
            "/responses",
            body=body,
            cast_to=Response,
            options={"headers": headers} if headers else {},
        )
    else:
        final = None
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
        resp = final
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
    ]


async def _chat(
    client: AsyncOpenAI,
    inp: CallModelInput,
    instructions: str | None,
    transcript: list[dict[str, Any]],
    on_delta: OnDelta | None = None,
    request: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], Usage, str | None]:
    s = inp.settings
    kwargs: dict[str, Any] = {
        "model": inp.model.name,
        "messages": to_chat_messages(instructions, transcript),
        **(request or {}),
    }
    if inp.tools:
        kwargs["tools"] = _chat_tools(inp.tools)
        if s.parallel_tool_calls is not None:
            kwargs["parallel_tool_calls"] = s.parallel_tool_calls
        if s.tool_choice is not None:
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


# ----------------------------------------------------------------------------- errors


FRAGMENT = 8
"""A provider echoing this many characters of a secret in a row leaks it: they are redacted."""


def scrub(text: str, *secrets: str | None) -> str:
    """Remove the given secrets from provider text, whole or in part, and anything key-shaped.

    Providers echo keys in their errors, sometimes only in part ("incorrect API key provided:
    abc...xyz", the key without its `sk-` prefix). Every run of text covered by
    `FRAGMENT`-character slices of a secret is replaced by `[redacted]`; shorter secrets are
    removed where they appear whole.
    """
    grams: set[str] = set()
    for secret in secrets:
        if not secret or secret == NO_KEY:
            continue
        if len(secret) < FRAGMENT:
            text = text.replace(secret, "[redacted]")
            continue
        grams.update(secret[i : i + FRAGMENT] for i in range(len(secret) - FRAGMENT + 1))
    if grams:
        covered = bytearray(len(text))
        for i in range(len(text) - FRAGMENT + 1):
            if text[i : i + FRAGMENT] in grams:
                covered[i : i + FRAGMENT] = b"\x01" * FRAGMENT
        if any(covered):
            out, i = [], 0
            while i < len(text):
                if covered[i]:
                    while i < len(text) and covered[i]:
                        i += 1
                    out.append("[redacted]")
                else:
                    out.append(text[i])
                    i += 1
            text = "".join(out)
    return _KEYLIKE.sub("[redacted]", text)


def retry_after_seconds(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """The wait a response asks for, in seconds, or `None` when it asks for none we can read.

    Reads `retry-after-ms` (OpenAI's), then `retry-after` as seconds or as an HTTP date
    (relative to `now`). The result is clamped to `[0, MAX_RETRY_AFTER]`: a date in the past
    means "now", and a server asking for hours does not park the run for hours per attempt.
    """
    delay: float | None = None
    ms = headers.get("retry-after-ms")
    if ms:
        delay = _number(ms)
        delay = delay / 1000 if delay is not None else None
    value = headers.get("retry-after")
    if delay is None and value:
        delay = _number(value)
        if delay is None:
            try:
                when = parsedate_to_datetime(value)
            except (TypeError, ValueError, IndexError, OverflowError):
                return None
            if when.tzinfo is None:  # "-0000": UTC with no claim about the local zone
                when = when.replace(tzinfo=UTC)
            delay = (when - (now or datetime.now(UTC))).total_seconds()
    if delay is None:
        return None
    return min(max(delay, 0.0), MAX_RETRY_AFTER)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def _wait(exc: openai.APIStatusError) -> timedelta | None:
    """The server's requested wait as a `next_retry_delay` (`None`: the retry policy decides)."""
    delay = retry_after_seconds(exc.response.headers)
    return timedelta(seconds=delay) if delay else None


def map_error(exc: openai.APIError, spec: ModelSpec, *secrets: str | None) -> ApplicationError:
    """Classify a provider error: what Temporal should retry and what a person must fix.

    `secrets` (the key and secret header values in use) are removed from every message.
    """
    where = f"model {spec.name!r}" + (f" at {spec.base_url}" if spec.base_url else "")
    body = getattr(exc, "body", None)
    text = body.get("message") if isinstance(body, dict) else None
    detail = scrub(str(text or getattr(exc, "message", None) or exc), *secrets)
    names = [spec.api_key_env or DEFAULT_KEY_ENV, *(spec.default_headers_env or {}).values()]
    variables = " and ".join(names)
    if isinstance(exc, openai.APITimeoutError):
        limit = exc.request.extensions.get("timeout", {}).get("read")
        after = f" after {limit:g}s" if isinstance(limit, int | float) else ""
        return ApplicationError(
            f"{where}: request timed out{after}; it is retried (a slow model may need "
            "OpenAIModel(timeout_seconds=...))",
            type="ModelTimeout",
        )
    if isinstance(exc, openai.APIConnectionError):
        return ApplicationError(f"{where}: connection failed: {detail}", type="ModelUnavailable")
    if not isinstance(exc, openai.APIStatusError):
        return ApplicationError(f"{where}: {detail}", type="ModelUnavailable")
    status = exc.status_code
    code = str(getattr(exc, "code", "") or "")
    if status == 429:
        if code == "insufficient_quota":
            return ApplicationError(
                f"{where}: the account's quota is exhausted; add credit or use another key "
                f"({detail})",
                type="ModelProviderError",
                non_retryable=True,
            )
        wait = _wait(exc)
        after = f", retry after {wait.total_seconds():g}s" if wait else ""
        return ApplicationError(
            f"{where}: rate limited (429){after}",
            type="ModelRateLimited",
            next_retry_delay=wait,
        )
    if status >= 500 or status in (408, 409):
        return ApplicationError(
            f"{where}: server error {status}: {detail}",
            type="ModelUnavailable",
            next_retry_delay=_wait(exc),  # a 503 may say when to come back
        )
    if status == 401:
        return ApplicationError(
            f"{where}: authentication failed (401); check {variables} in the worker's environment",
            type="ModelProviderError",
            non_retryable=True,
        )
    if status == 403:
        return ApplicationError(
            f"{where}: permission denied (403): {detail}; the credentials in {variables} cannot "
            "use this model",
            type="ModelProviderError",
            non_retryable=True,
        )
    if status == 404:
        return ApplicationError(
            f"{where}: not found (404): {detail}; check the model name and base URL",
            type="ModelProviderError",
            non_retryable=True,
        )
    if code == "context_length_exceeded" or "context length" in detail.lower():
        return ApplicationError(
            f"{where}: the conversation is longer than the model's context window; trim the "
            f"history (call_model_input_filter) or use a larger model ({detail})",
            type="ModelProviderError",
            non_retryable=True,
        )
    return ApplicationError(
        f"{where}: request refused ({status}): {detail}; fix what the provider names "
        "(model settings, tools or output_type)",
        type="ModelProviderError",
        non_retryable=True,
    )
