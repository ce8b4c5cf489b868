"""Provider errors, keys and timeouts of the OpenAI model activity, without a Temporal server.

The exceptions are the `openai` package's own, built on real `httpx2` requests and responses
(what `AsyncOpenAI` raises), so the mapping is tested against what production sees.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, formatdate
from typing import Any

import httpx2
import openai
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from hitl import Agent, OpenAIModel
from hitl.activities.model import ModelActivities
from hitl.activities.openai_model import (
    ACTIVITY_MARGIN,
    CLIENT_TIMEOUT,
    MAX_RETRY_AFTER,
    OpenAIProvider,
    client_timeout,
    map_error,
    retry_after_seconds,
    scrub,
)
from hitl.errors import UserError
from hitl.registry import AgentRegistry
from hitl.wire import CallModelInput, ModelSpec
from hitl.workflows.steps import MODEL_TIMEOUT

KEY_ENV = "HITL_TEST_KEY"
CANARY = "sk-test-CANARY-unit-8c1f0e"
SPEC = ModelSpec(name="gpt-test", api="responses", api_key_env=KEY_ENV)
URL = "https://models.example.test/v1/responses"

_STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    403: openai.PermissionDeniedError,
    404: openai.NotFoundError,
    409: openai.ConflictError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


def status_error(
    status: int,
    message: str = "provider says no",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> openai.APIStatusError:
    """The exception `AsyncOpenAI` raises for this HTTP answer (same class, same body shape)."""
    error = {"message": message, "type": "invalid_request_error", "code": code, "param": None}
    request = httpx2.Request("POST", URL)
    response = httpx2.Response(status, headers=headers, json={"error": error}, request=request)
    cls = _STATUS_ERRORS.get(status)
    if cls is None:
        cls = openai.InternalServerError if status >= 500 else openai.APIStatusError
    # The client hands the exception the inner `error` object as its body.
    return cls(f"Error code: {status} - {error}", response=response, body=error)


def mapped(exc: openai.APIError, spec: ModelSpec = SPEC) -> ApplicationError:
    return map_error(exc, spec, CANARY)


def assert_retryable(err: ApplicationError, type_: str) -> None:
    assert (err.type, err.non_retryable) == (type_, False), err.message


def assert_final(err: ApplicationError, *fragments: str) -> None:
    assert (err.type, err.non_retryable) == ("ModelProviderError", True), err.message
    for fragment in fragments:
        assert fragment in err.message
    assert CANARY not in err.message


# ----------------------------------------------------------------------------- 429


def test_rate_limit_waits_retry_after_seconds() -> None:
    err = mapped(status_error(429, "Rate limit reached", headers={"retry-after": "3"}))
    assert_retryable(err, "ModelRateLimited")
    assert err.next_retry_delay == timedelta(seconds=3)
    assert "retry after 3s" in err.message


def test_rate_limit_prefers_retry_after_ms() -> None:
    err = mapped(
        status_error(429, headers={"retry-after-ms": "1500", "retry-after": "9"}),
    )
    assert_retryable(err, "ModelRateLimited")
    assert err.next_retry_delay == timedelta(seconds=1.5)


def test_rate_limit_waits_until_an_http_date() -> None:
    now = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=42), usegmt=True)
    assert retry_after_seconds(httpx2.Headers({"retry-after": later}), now=now) == 42.0
    # Through map_error (relative to the real clock; the header has one-second resolution).
    header = formatdate(time.time() + 30, usegmt=True)
    err = mapped(status_error(429, headers={"retry-after": header}))
    assert_retryable(err, "ModelRateLimited")
    assert err.next_retry_delay is not None
    assert 28.0 <= err.next_retry_delay.total_seconds() <= 30.0


def test_retry_after_is_clamped_and_garbage_ignored() -> None:
    now = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)

    def wait(value: str) -> float | None:
        return retry_after_seconds(httpx2.Headers({"retry-after": value}), now=now)

    assert wait(format_datetime(now - timedelta(minutes=5), usegmt=True)) == 0.0
    assert wait(format_datetime(now + timedelta(days=1), usegmt=True)) == MAX_RETRY_AFTER
    assert wait("86400") == MAX_RETRY_AFTER
    assert wait("1e999") == MAX_RETRY_AFTER
    assert wait("-5") == 0.0
    assert wait("soon") is None
    assert wait("nan") is None
    assert retry_after_seconds(httpx2.Headers({})) is None


def test_rate_limit_with_a_past_date_falls_back_to_the_retry_policy() -> None:
    past = formatdate(time.time() - 60, usegmt=True)
    err = mapped(status_error(429, headers={"retry-after": past}))
    assert_retryable(err, "ModelRateLimited")
    assert err.next_retry_delay is None


def test_rate_limit_without_retry_after_uses_the_retry_policy() -> None:
    err = mapped(status_error(429, "Rate limit reached"))
    assert_retryable(err, "ModelRateLimited")
    assert err.next_retry_delay is None


def test_insufficient_quota_is_final() -> None:
    err = mapped(status_error(429, "You exceeded your current quota", "insufficient_quota"))
    assert_final(err, "quota is exhausted", "add credit")
    assert err.next_retry_delay is None


# ----------------------------------------------------------------------------- retryable


@pytest.mark.parametrize("status", [500, 502, 503, 504, 408, 409])
def test_server_errors_retry_with_backoff(status: int) -> None:
    err = mapped(status_error(status, "upstream exploded"))
    assert_retryable(err, "ModelUnavailable")
    assert f"server error {status}: upstream exploded" in err.message
    assert err.next_retry_delay is None


def test_unavailable_with_retry_after_waits_as_asked() -> None:
    err = mapped(status_error(503, "overloaded", headers={"retry-after": "7"}))
    assert_retryable(err, "ModelUnavailable")
    assert err.next_retry_delay == timedelta(seconds=7)


def test_connection_error_retries() -> None:
    exc = openai.APIConnectionError(request=httpx2.Request("POST", URL))
    err = mapped(exc)
    assert_retryable(err, "ModelUnavailable")
    assert "connection failed" in err.message


def test_timeout_retries() -> None:
    exc = openai.APITimeoutError(request=httpx2.Request("POST", URL))
    err = mapped(exc)
    assert_retryable(err, "ModelTimeout")
    assert "timed out" in err.message and "timeout_seconds" in err.message


# ----------------------------------------------------------------------------- final


def test_bad_request_is_final_and_quotes_the_provider() -> None:
    err = mapped(status_error(400, "Invalid value for 'temperature'", "invalid_value"))
    assert_final(err, "request refused (400): Invalid value for 'temperature'", "model settings")


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("This model's maximum context length is 8192 tokens.", "context_length_exceeded"),
        ("This model's maximum context length is 8192 tokens.", None),
    ],
)
def test_context_length_says_to_trim(message: str, code: str | None) -> None:
    err = mapped(status_error(400, message, code))
    assert_final(err, "longer than the model's context window", "call_model_input_filter")


def test_authentication_names_the_variable_and_never_the_key() -> None:
    echoed = f"Incorrect API key provided: {CANARY}"
    err = mapped(status_error(401, echoed, "invalid_api_key"))
    assert_final(err, "authentication failed (401)", f"check {KEY_ENV}")


def test_authentication_names_header_variables_too() -> None:
    spec = SPEC.model_copy(update={"default_headers_env": {"api-key": "HITL_TEST_GATEWAY"}})
    err = map_error(status_error(401), spec, "gateway-secret-value")
    assert_final(err, f"check {KEY_ENV} and HITL_TEST_GATEWAY")


def test_permission_denied_names_the_variable() -> None:
    err = mapped(status_error(403, f"Project of key {CANARY} has no access"))
    assert_final(err, "permission denied (403)", f"in {KEY_ENV} cannot use this model")
    assert "[redacted]" in err.message


def test_not_found_says_check_model_and_base_url() -> None:
    err = mapped(status_error(404, "The model `gpt-nope` does not exist"))
    assert_final(err, "not found (404)", "check the model name and base URL")


def test_other_client_errors_are_final() -> None:
    err = mapped(status_error(422, "unprocessable"))
    assert_final(err, "request refused (422): unprocessable")


# ----------------------------------------------------------------------------- keys


def test_missing_key_variable_is_a_typed_final_error_without_any_key() -> None:
    env = {"OPENAI_API_KEY": CANARY, "OTHER": "sk-other-key-0123456789"}
    with pytest.raises(ApplicationError) as err:
        OpenAIProvider(env).client(SPEC)
    assert (err.value.type, err.value.non_retryable) == ("ModelProviderError", True)
    assert f"{KEY_ENV} is not set in the worker's environment" in err.value.message
    text = str(err.value) + repr(err.value.details)
    assert CANARY not in text and "sk-other" not in text


def test_missing_default_key_names_openai_api_key() -> None:
    with pytest.raises(ApplicationError, match="OPENAI_API_KEY is not set") as err:
        OpenAIProvider({}).client(ModelSpec(name="gpt-test"))
    assert err.value.non_retryable


def test_local_server_needs_no_key_but_a_named_variable_must_exist() -> None:
    local = ModelSpec(name="llama", api="chat", base_url="http://127.0.0.1:1/v1")
    client, _ = OpenAIProvider({}).client(local)
    assert client.api_key == "not-needed"
    with pytest.raises(ApplicationError, match=f"{KEY_ENV} is not set") as err:
        OpenAIProvider({}).client(local.model_copy(update={"api_key_env": KEY_ENV}))
    assert err.value.non_retryable


def test_missing_header_variable_names_variable_and_header() -> None:
    spec = SPEC.model_copy(update={"default_headers_env": {"api-key": "HITL_TEST_GATEWAY"}})
    with pytest.raises(ApplicationError) as err:
        OpenAIProvider({KEY_ENV: CANARY}).client(spec)
    assert (err.value.type, err.value.non_retryable) == ("ModelProviderError", True)
    assert "HITL_TEST_GATEWAY is not set" in err.value.message
    assert "'api-key' header" in err.value.message
    assert CANARY not in err.value.message


# ----------------------------------------------------------------------------- client settings


def test_client_never_retries_and_times_out_inside_the_activity() -> None:
    client, secrets = OpenAIProvider({KEY_ENV: CANARY}).client(SPEC)
    assert client.max_retries == 0, "Temporal owns retries"
    assert client.timeout == CLIENT_TIMEOUT
    assert secrets == (CANARY,)
    # The model activity's start-to-close timeout outlasts the client's, with room to report.
    assert MODEL_TIMEOUT.total_seconds() >= CLIENT_TIMEOUT + ACTIVITY_MARGIN
    assert client_timeout(SPEC, MODEL_TIMEOUT) == CLIENT_TIMEOUT


def test_timeout_seconds_sets_the_client_timeout() -> None:
    spec = SPEC.model_copy(update={"timeout_seconds": 30.0})
    client, _ = OpenAIProvider({KEY_ENV: CANARY}).client(spec)
    assert client.timeout == 30.0


async def test_client_timeout_is_cut_to_fit_the_activity_timeout() -> None:
    spec = SPEC.model_copy(update={"timeout_seconds": 300.0})
    provider = OpenAIProvider({KEY_ENV: CANARY})
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, start_to_close_timeout=timedelta(seconds=60))

    async def build() -> Any:
        client, _ = provider.client(spec)
        return client.timeout

    assert await env.run(build) == 60 - ACTIVITY_MARGIN
    assert client_timeout(spec, timedelta(seconds=4)) == 2.0


def test_gateway_headers_and_query_come_from_the_environment() -> None:
    spec = SPEC.model_copy(
        update={
            "default_headers_env": {"api-key": "HITL_TEST_GATEWAY"},
            "default_query": {"api-version": "2024-10-21"},
        }
    )
    env = {KEY_ENV: CANARY, "HITL_TEST_GATEWAY": "gw-secret-41"}
    client, secrets = OpenAIProvider(env).client(spec)
    assert client.default_headers["api-key"] == "gw-secret-41"
    assert client.default_query == {"api-version": "2024-10-21"}
    assert secrets == (CANARY, "gw-secret-41")
    # A secret header value that a provider echoes is scrubbed like the key.
    err = map_error(status_error(403, "header gw-secret-41 refused"), spec, *secrets)
    assert "gw-secret-41" not in err.message


# ----------------------------------------------------------------------------- model spec


def test_openai_model_spec_carries_variable_names_never_values() -> None:
    model = OpenAIModel(
        "gpt-4.1",
        base_url="https://gateway.example.test/openai/v1",
        api_key_env="HITL_TEST_KEY",
        timeout_seconds=45,
        default_headers_env={"api-key": "AZURE_OPENAI_API_KEY"},
        default_query={"api-version": "2024-10-21"},
    )
    spec = model.spec()
    assert spec.timeout_seconds == 45
    assert spec.default_headers_env == {"api-key": "AZURE_OPENAI_API_KEY"}
    assert spec.default_query == {"api-version": "2024-10-21"}


def test_older_specs_still_read_and_new_fields_are_optional() -> None:
    old = ModelSpec.model_validate({"provider": "openai", "name": "gpt-4.1", "api": "responses"})
    assert (old.timeout_seconds, old.default_headers_env, old.default_query) == (None, None, None)
    assert client_timeout(old) == CLIENT_TIMEOUT
    plain = OpenAIModel("gpt-4.1").spec().model_dump()
    assert plain["default_headers_env"] is None and plain["default_query"] is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"api_key_env": CANARY},
        {"default_headers_env": {"api-key": CANARY}},
    ],
    ids=["api_key_env", "default_headers_env"],
)
def test_a_secret_where_a_variable_name_belongs_is_refused_unechoed(
    kwargs: dict[str, Any],
) -> None:
    with pytest.raises(UserError) as err:
        OpenAIModel("gpt-4.1", **kwargs).spec()
    assert "name of an environment variable" in err.value.message
    assert CANARY not in err.value.message


def test_timeout_seconds_must_be_positive() -> None:
    with pytest.raises(UserError, match="timeout_seconds must be positive"):
        OpenAIModel("gpt-4.1", timeout_seconds=0).spec()


# ----------------------------------------------------------------------------- the activity


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A local port that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def call_input(port: int, **model: Any) -> tuple[ModelActivities, CallModelInput]:
    openai_model = OpenAIModel("gpt-test", base_url=f"http://127.0.0.1:{port}/v1", **model)
    agent: Agent[None] = Agent(name="Unit desk", instructions="Help.", model=openai_model)
    inp = CallModelInput(
        root_agent=agent.name,
        agent_id=agent.name,
        agent_name=agent.name,
        model=openai_model.spec(),
        instructions="Help.",
        transcript=[{"role": "user", "content": "hi"}],
    )
    return ModelActivities(AgentRegistry([agent]), OpenAIProvider({})), inp


async def test_activity_connection_refused_is_retryable(closed_port: int) -> None:
    activities, inp = call_input(closed_port)
    with pytest.raises(ApplicationError) as err:
        await ActivityEnvironment().run(activities.call_model, inp)
    assert_retryable(err.value, "ModelUnavailable")
    assert "connection failed" in err.value.message


async def test_activity_timeout_is_retryable(silent_port: int) -> None:
    activities, inp = call_input(silent_port, timeout_seconds=0.3)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, start_to_close_timeout=timedelta(seconds=60))
    started = time.monotonic()
    with pytest.raises(ApplicationError) as err:
        await env.run(activities.call_model, inp)
    assert_retryable(err.value, "ModelTimeout")
    assert "timed out after 0.3s" in err.value.message
    assert time.monotonic() - started < 10, "the spec's timeout, not the 120 s default"


# ----------------------------------------------------------------------------- key fragments

KEY = "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr678"
HEADER_SECRET = "gw-7f3a9c1e5b2d8f4a6c0e"


@pytest.mark.parametrize(
    "echoed",
    [
        KEY.removeprefix("sk-"),  # the key without its prefix, as some providers print it
        KEY[10:19],  # a 9-character slice from the middle
        KEY[-8:],  # exactly 8 characters, at the very end
        f"{KEY[:12]}...{KEY[-10:]}",  # head and tail around an ellipsis
        f"{KEY[5:20]}{KEY[15:30]}",  # overlapping fragments, run together
    ],
)
def test_any_eight_character_fragment_of_the_key_is_scrubbed(echoed: str) -> None:
    text = scrub(f"Incorrect API key provided: {echoed}. See the docs.", KEY)
    assert "[redacted]" in text and text.endswith(". See the docs.")
    for i in range(len(KEY) - 8 + 1):
        assert KEY[i : i + 8] not in text, text


def test_fragments_of_several_secrets_are_scrubbed_and_short_ones_left() -> None:
    text = scrub(f"key {KEY[3:14]} header {HEADER_SECRET[2:12]} ok", KEY, HEADER_SECRET)
    assert text == "key [redacted] header [redacted] ok"
    # Seven characters of a key are too few to tell apart from ordinary text.
    assert scrub(f"id {KEY[20:27]}", KEY) == f"id {KEY[20:27]}"


def test_a_mapped_provider_error_never_carries_a_fragment() -> None:
    err = map_error(status_error(400, f"bad key prefix {KEY[3:25]} for project"), SPEC, KEY)
    assert_final(err, "request refused (400)")
    assert KEY[3:25] not in err.message and "[redacted]" in err.message


async def test_an_unexpected_client_error_is_typed_retried_and_scrubbed() -> None:
    """A failure that is not an `openai.APIError` (a transport error, an unreadable answer)."""

    class Exploding:
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError(f"could not send Authorization: Bearer {KEY[3:]}")

    provider = OpenAIProvider(env={KEY_ENV: KEY})
    provider.client = lambda spec: (Exploding(), (KEY,))  # type: ignore[method-assign,assignment,return-value]
    inp = CallModelInput(root_agent="a", agent_id="a", agent_name="a", model=SPEC)
    with pytest.raises(ApplicationError) as failed:
        await provider.respond(inp, None, [])
    assert failed.value.type == "ModelUnavailable" and not failed.value.non_retryable
    assert KEY[3:] not in failed.value.message and "[redacted]" in failed.value.message
