"""Connecting to Temporal the way the `temporal` CLI does (envconfig), with our data converter.

Settings come from `temporalio.envconfig`: a profile in the CLI's TOML file
(`TEMPORAL_CONFIG_FILE`, default `~/.config/temporalio/temporal.toml`, chosen with
`TEMPORAL_PROFILE` or `profile=`) overridden by `TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`,
`TEMPORAL_API_KEY`, `TEMPORAL_TLS*` variables, then by explicit `address=` / `namespace=`. A wrong
address, namespace or credential fails fast with a `UserError` whose one-line message says which.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import gc
import logging
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client, Plugin
from temporalio.converter import DataConverter, ExternalStorage
from temporalio.envconfig import ClientConfig
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)
from temporalio.service import RPCError, RPCStatusCode

from hitl.codec import EncryptionCodec
from hitl.converter import HitlEncodedFailureConverter, hitl_data_converter
from hitl.errors import UserError
from hitl.storage import storage_from_env

DEFAULT_ADDRESS = "localhost:7233"
DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds to reach the frontend and check the namespace (`HITL_CONNECT_TIMEOUT`)."""


def data_converter(
    codec: EncryptionCodec | None = None, storage: ExternalStorage | None = None
) -> DataConverter:
    """Our pydantic data converter (`hitl.converter`), with encryption and storage if configured.

    The codec is the one given, else `HITL_ENCRYPTION_KEY`'s. With encryption, failure messages
    and stack traces are encoded too (they may quote tool arguments). The store is the one
    given, else `HITL_STORAGE`'s (`hitl.storage`).
    """
    codec = codec if codec is not None else EncryptionCodec.from_env()
    storage = storage if storage is not None else storage_from_env()
    converter = hitl_data_converter
    if codec is not None:
        converter = dataclasses.replace(
            converter,
            payload_codec=codec,
            failure_converter_class=HitlEncodedFailureConverter,
        )
    if storage is not None:
        converter = dataclasses.replace(converter, external_storage=storage)
    return converter


def connect_config(
    *, profile: str | None = None, address: str | None = None, namespace: str | None = None
) -> dict[str, Any]:
    """Connection settings from the TOML profile and `TEMPORAL_*` variables, as the CLI reads them.

    Falls back to `localhost:7233` and the `default` namespace.
    """
    try:
        config: dict[str, Any] = dict(ClientConfig.load_client_connect_config(profile=profile))
    except Exception as exc:
        where = os.environ.get("TEMPORAL_CONFIG_FILE") or "~/.config/temporalio/temporal.toml"
        raise UserError(
            f"cannot load the Temporal client configuration from {where}: {_first_line(exc)}"
        ) from exc
    if address:
        config["target_host"] = address
    if namespace:
        config["namespace"] = namespace
    if not config.get("target_host"):
        config["target_host"] = DEFAULT_ADDRESS
    config.setdefault("namespace", "default")
    return config


def connect_timeout() -> float:
    """`HITL_CONNECT_TIMEOUT` seconds, else `DEFAULT_CONNECT_TIMEOUT`."""
    raw = os.environ.get("HITL_CONNECT_TIMEOUT")
    if not raw:
        return DEFAULT_CONNECT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise UserError(f"HITL_CONNECT_TIMEOUT must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise UserError(f"HITL_CONNECT_TIMEOUT must be positive, got {raw!r}")
    return value


_cached: dict[tuple[int, str, str | None], Client] = {}


@atexit.register
def _release_clients() -> None:
    # Drop cached clients while the interpreter is still whole: left to finalization, the
    # client's Rust threads can abort the process (PyGILState_Release, sdk-python#300).
    # Measured here: 7 aborts in 40 short scripts without this, 0 in 40 with it.
    _cached.clear()
    gc.collect()


def core_logs_to_stderr() -> None:
    """Send the SDK core's own log lines to Python's `temporalio.core` logger (standard error).

    By default the core writes them, colour codes and all, to standard output, where a warning
    such as TMPRL1103 (a payload over the warning size) would mix into what a command prints
    (`--json`). For the `hitl` CLI; a library leaves the process's default runtime alone.
    """
    logger = logging.getLogger("temporalio.core")
    forwarding = LogForwardingConfig(logger=logger, prepend_target_on_message=False)
    level = TelemetryFilter(core_level="WARN", other_level="ERROR")
    telemetry = TelemetryConfig(logging=LoggingConfig(filter=level, forwarding=forwarding))
    Runtime.set_default(Runtime(telemetry=telemetry), error_if_already_set=False)


def hard_exit(code: int) -> NoReturn:
    """Exit without interpreter teardown.

    The Temporal client's Rust threads can outlive the event loop, and CPython's finalization
    then sometimes aborts with `PyGILState_Release` (temporalio/sdk-python#300). Short-lived
    commands (the `hitl` CLI, `python -m hitl.worker`) flush their output and leave directly.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


async def connect(
    client: Client | None = None,
    *,
    profile: str | None = None,
    address: str | None = None,
    namespace: str | None = None,
    timeout: float | None = None,
    plugins: Sequence[Plugin] = (),
    runtime: Runtime | None = None,
) -> Client:
    """Return `client`, or connect with envconfig settings (cached per event loop).

    The namespace is checked once at connection time, so a wrong address, namespace or credential
    fails here with a `UserError` that names it, instead of later as a hanging worker or a
    confusing traceback. `plugins` go on the new client (the worker's `--otel` tracing); a
    client with plugins is never shared from the cache, nor one with its own `runtime` (the
    worker's `--metrics-port`: a runtime that serves Prometheus metrics).
    """
    if client is not None:
        return client
    config = connect_config(profile=profile, address=address, namespace=namespace)
    key = (id(asyncio.get_running_loop()), str(config.get("target_host")), profile)
    shared = address is None and namespace is None and not plugins and runtime is None
    if key in _cached and shared:
        return _cached[key]
    limit = timeout if timeout is not None else connect_timeout()
    target, ns = str(config["target_host"]), str(config["namespace"])
    try:
        new = await asyncio.wait_for(
            Client.connect(
                **config, data_converter=data_converter(), plugins=list(plugins), runtime=runtime
            ),
            limit,
        )
    except TimeoutError:
        raise UserError(
            f"cannot connect to Temporal at {target} (namespace {ns}): no answer within "
            f"{limit:g}s; check the address, the port (gRPC, usually 7233) and firewalls"
        ) from None
    except Exception as exc:
        raise UserError(
            f"cannot connect to Temporal at {target} (namespace {ns}): "
            + explain_connect_error(exc, target, config)
        ) from exc
    try:
        await asyncio.wait_for(check_namespace(new), limit)
    except TimeoutError:
        raise UserError(
            f"Temporal at {target} did not describe namespace {ns!r} within {limit:g}s"
        ) from None
    if shared:
        _cached[key] = new
    return new


async def check_namespace(client: Client) -> None:
    """Fail fast when the namespace does not exist or the credentials may not use it.

    A worker on a missing namespace would otherwise poll forever, and CLI commands would fail
    with a raw RPC error. Servers that do not implement the call (the time-skipping test server)
    pass.
    """
    ns = client.namespace
    target = client.service_client.config.target_host
    try:
        await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=ns))
    except RPCError as exc:
        if exc.status == RPCStatusCode.UNIMPLEMENTED:
            return
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise UserError(
                f"namespace {ns!r} does not exist at {target}: set TEMPORAL_NAMESPACE (or "
                f"--namespace), or create it (`temporal operator namespace create -n {ns}`)"
            ) from None
        if exc.status in (RPCStatusCode.UNAUTHENTICATED, RPCStatusCode.PERMISSION_DENIED):
            raise UserError(
                f"credentials rejected by {target} for namespace {ns!r} "
                f"({_first_line(exc.message)}): check TEMPORAL_API_KEY or the TLS client "
                "certificate, and that it grants access to this namespace"
            ) from None
        raise UserError(
            f"namespace {ns!r} at {target}: {_first_line(exc.message)} ({exc.status.name})"
        ) from None


def explain_connect_error(exc: BaseException, target: str, config: dict[str, Any]) -> str:
    """One line saying what went wrong when `Client.connect` failed, and what to check.

    The SDK reports transport failures as one long Rust error string; this picks out the cause.
    """
    text = str(exc)
    tls_setting = config.get("tls")
    tls = bool(config.get("api_key")) if tls_setting is None else tls_setting is not False
    host = target.rsplit(":", 1)[0]
    if "dns error" in text or "failed to lookup address" in text:
        return f"cannot resolve host {host!r}; check TEMPORAL_ADDRESS (host:port)"
    if "ConnectionRefused" in text or "Connection refused" in text:
        return "connection refused: nothing listens there; check TEMPORAL_ADDRESS (host:port)"
    if "code: Unauthenticated" in text or "code: PermissionDenied" in text:
        return (
            f"credentials rejected ({_status_message(text)}): check TEMPORAL_API_KEY or the TLS "
            "client certificate (TEMPORAL_TLS_CLIENT_CERT_PATH / _KEY_PATH)"
        )
    if "InvalidCertificate" in text or "certificate" in text.lower():
        return (
            "the server's TLS certificate was not accepted; set TEMPORAL_TLS_SERVER_CA_CERT_PATH "
            "(private CA) or TEMPORAL_TLS_SERVER_NAME"
        )
    if tls and ("InvalidContentType" in text or "InvalidMessage" in text or "tls" in text.lower()):
        why = "TEMPORAL_API_KEY is set" if config.get("api_key") else "TLS is configured"
        return (
            f"TLS handshake failed: the server does not speak TLS ({why}, which turns TLS on; "
            "for a plaintext server set TEMPORAL_TLS=false)"
        )
    if not tls and ("ConnectionReset" in text or "connection reset" in text.lower()):
        return (
            "the server reset the connection: it probably requires TLS (set TEMPORAL_TLS=true, "
            "TEMPORAL_API_KEY or a client certificate)"
        )
    if "grpc-status header missing" in text or "code: Unimplemented" in text:
        return "this is not a Temporal gRPC frontend (wrong port? the Web UI port is not it)"
    if "Timeout" in text or "timed out" in text:
        return "no answer in time; check the address, the port and firewalls"
    return _first_line(text)


def _status_message(text: str) -> str:
    match = re.search(r'message: "([^"]*)"', text)
    return match.group(1) if match else "no detail"


def _first_line(value: object) -> str:
    lines = [line.strip() for line in str(value).splitlines() if line.strip()]
    return lines[0] if lines else type(value).__name__
