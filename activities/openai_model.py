"""OpenAI (and OpenAI-compatible) model calls, for the `call_model` activity.

The client is built with `max_retries=0`: Temporal owns retries, so every attempt is visible in
history. Provider errors map to retryable or non-retryable `ApplicationError`s; a 429 retries
after the server's `Retry-After`. Keys and secret headers are read from the worker's environment
and never appear in inputs, results or error messages. What each API is sent and answers is
`openai_api`'s.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import openai
from openai import AsyncOpenAI, Omit
from temporalio import activity
from temporalio.exceptions import ApplicationError

from hitl.activities.openai_api import OnDelta, chat_turn, responses_turn, to_chat_messages
from hitl.errors import PREVIOUS_RESPONSE_NOT_FOUND
from hitl.wire import CallModelInput, ModelSpec, Usage

__all__ = [
    "ACTIVITY_MARGIN",
    "CLIENT_TIMEOUT",
    "DEFAULT_KEY_ENV",
    "FRAGMENT",
    "MAX_RETRY_AFTER",
    "NO_KEY",
    "OnDelta",
    "OpenAIProvider",
    "client_timeout",
    "map_error",
    "retry_after_seconds",
    "scrub",
    "to_chat_messages",
]

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
        client, secrets = self.client(inp.model_spec)
        request: dict[str, Any] = {}
        if secrets[0] == NO_KEY and len(secrets) > 1:
            # The gateway authenticates by its own header: send no placeholder bearer token.
            request["extra_headers"] = {"Authorization": Omit()}
        try:
            turn = chat_turn if inp.model_spec.api == "chat" else responses_turn
            return await turn(client, inp, instructions, transcript, on_delta, request)
        except openai.APIError as exc:
            raise map_error(exc, inp.model_spec, *secrets) from None
        except ApplicationError:
            raise
        except Exception as exc:
            # Anything else the client raised (a transport error, an unreadable answer) is
            # retried like a connection failure; its text is scrubbed like the provider's.
            detail = scrub(f"{type(exc).__name__}: {exc}", *secrets)
            raise ApplicationError(
                f"model {inp.model_spec.name!r}: {detail}", type="ModelUnavailable"
            ) from None


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
    Transport failures, rate limits (after their `Retry-After`) and server errors are retried;
    every other refusal is non-retryable, with what to fix.
    """
    where = f"model {spec.name!r}" + (f" at {spec.base_url}" if spec.base_url else "")
    body = getattr(exc, "body", None)
    text = body.get("message") if isinstance(body, dict) else None
    detail = scrub(str(text or getattr(exc, "message", None) or exc), *secrets)
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
    if code == "previous_response_not_found" or (
        status in (400, 404) and "previous response" in detail.lower()
    ):
        # The call decides: send the whole transcript, or fail as `ConversationLost`.
        return ApplicationError(
            f"{where}: {detail}", type=PREVIOUS_RESPONSE_NOT_FOUND, non_retryable=True
        )
    if status == 404 and "conversation" in detail.lower():
        return ApplicationError(
            f"{where}: the provider no longer has the run's conversation ({detail}); the run "
            "cannot send it again (it holds turns from before the run): start a new run with "
            "a new conversation_id, or with the earlier turns as input",
            type="ConversationLost",
            non_retryable=True,
        )
    if code == "conversation_locked":
        # Another request is writing to the conversation: retried (with the policy's backoff).
        return ApplicationError(f"{where}: {detail}", type="ModelUnavailable")
    if status == 429 and code != "insufficient_quota":
        wait = _wait(exc)
        after = f", retry after {wait.total_seconds():g}s" if wait else ""
        return ApplicationError(
            f"{where}: rate limited (429){after}", type="ModelRateLimited", next_retry_delay=wait
        )
    if status >= 500 or status in (408, 409):
        return ApplicationError(
            f"{where}: server error {status}: {detail}",
            type="ModelUnavailable",
            next_retry_delay=_wait(exc),  # a 503 may say when to come back
        )
    return ApplicationError(
        f"{where}: {_refusal(status, code, detail, spec)}",
        type="ModelProviderError",
        non_retryable=True,
    )


def _refusal(status: int, code: str, detail: str, spec: ModelSpec) -> str:
    """What a person must fix when the provider refuses a request that retrying cannot help."""
    names = [spec.api_key_env or DEFAULT_KEY_ENV, *(spec.default_headers_env or {}).values()]
    variables = " and ".join(names)
    if status == 429:  # insufficient_quota
        return f"the account's quota is exhausted; add credit or use another key ({detail})"
    if status == 401:
        return f"authentication failed (401); check {variables} in the worker's environment"
    if status == 403:
        return (
            f"permission denied (403): {detail}; the credentials in {variables} cannot use "
            "this model"
        )
    if status == 404:
        return f"not found (404): {detail}; check the model name and base URL"
    if code == "context_length_exceeded" or "context length" in detail.lower():
        return (
            "the conversation is longer than the model's context window; trim the history "
            f"(call_model_input_filter) or use a larger model ({detail})"
        )
    return (
        f"request refused ({status}): {detail}; fix what the provider names (model settings, "
        "tools or output_type)"
    )
