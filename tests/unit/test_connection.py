"""Connection failures become one line that says what to fix (hitl/client.py).

The transport errors below are the SDK's own texts, captured from real failed connections (the
end-to-end versions are in tests/e2e/test_production.py). Credential rejections are checked here
against the status the server returns, and end to end in tests/e2e/test_production.py against a
fake gRPC frontend that answers UNAUTHENTICATED or PERMISSION_DENIED.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

from hitl.client import check_namespace, connect_config, connect_timeout, explain_connect_error
from hitl.errors import UserError

PREFIX = "Failed client connect: "
REFUSED = (
    PREFIX
    + "Server connection error: tonic::transport::Error(Transport, ConnectError(ConnectError("
    '"tcp connect error", 127.0.0.1:1, Os { code: 111, kind: ConnectionRefused, message: '
    '"Connection refused" })))'
)
DNS = (
    PREFIX
    + "Server connection error: tonic::transport::Error(Transport, ConnectError(ConnectError("
    '"dns error", Custom { kind: Uncategorized, error: "failed to lookup address information: '
    'Name or service not known" })))'
)
TLS_TO_PLAINTEXT = (
    PREFIX + "Server connection error: tonic::transport::Error(Transport, ConnectError(Custom { "
    "kind: InvalidData, error: InvalidMessage(InvalidContentType) }))"
)
UNTRUSTED = (
    PREFIX + "Server connection error: tonic::transport::Error(Transport, ConnectError(Custom { "
    "kind: InvalidData, error: InvalidCertificate(Other(OtherError(CaUsedAsEndEntity))) }))"
)
PLAINTEXT_TO_TLS = (
    PREFIX + "`get_system_info` call error after connection: Status { code: Unknown, message: "
    '"transport error", source: Some(tonic::transport::Error(Transport, hyper::Error(Io, '
    "Kind(ConnectionReset)))) }"
)
HTTP_NOT_GRPC = (
    PREFIX + "`get_system_info` call error after connection: Status { code: Unimplemented, "
    'message: "grpc-status header missing, mapped from HTTP status code 404", metadata: '
    "MetadataMap { headers: {} }, source: None }"
)
SILENT = (
    PREFIX + "`get_system_info` call error after connection: Status { code: Cancelled, message: "
    '"Timeout expired", source: Some(tonic::transport::Error(Transport, TimeoutExpired(()))) }'
)
UNAUTHENTICATED = (
    PREFIX + "`get_system_info` call error after connection: Status { code: Unauthenticated, "
    'message: "Request unauthorized.", metadata: MetadataMap { headers: {} }, source: None }'
)


@pytest.mark.parametrize(
    ("text", "config", "expected"),
    [
        (REFUSED, {}, "connection refused"),
        (DNS, {}, "cannot resolve host 'h.example'"),
        (TLS_TO_PLAINTEXT, {"api_key": "k"}, "TLS handshake failed"),
        (TLS_TO_PLAINTEXT, {"tls": True}, "TLS is configured"),
        (UNTRUSTED, {"tls": True}, "TEMPORAL_TLS_SERVER_CA_CERT_PATH"),
        (PLAINTEXT_TO_TLS, {}, "it probably requires TLS"),
        (HTTP_NOT_GRPC, {}, "not a Temporal gRPC frontend"),
        (SILENT, {}, "no answer in time"),
        (UNAUTHENTICATED, {"api_key": "k"}, "credentials rejected (Request unauthorized.)"),
    ],
)
def test_connect_errors_say_what_to_fix(
    text: str, config: dict[str, object], expected: str
) -> None:
    message = explain_connect_error(RuntimeError(text), "h.example:7233", config)
    assert expected in message
    assert "\n" not in message and "tonic" not in message, message


def test_tls_off_with_an_api_key_is_not_blamed_on_tls() -> None:
    config = {"api_key": "k", "tls": False}
    assert "TLS" not in explain_connect_error(RuntimeError(REFUSED), "h:1", config)
    assert "requires TLS" in explain_connect_error(RuntimeError(PLAINTEXT_TO_TLS), "h:1", config)


def stub_client(error: RPCError | None) -> object:
    async def describe_namespace(_request: object) -> None:
        if error is not None:
            raise error

    return types.SimpleNamespace(
        namespace="backoffice",
        service_client=types.SimpleNamespace(config=types.SimpleNamespace(target_host="t:7233")),
        workflow_service=types.SimpleNamespace(describe_namespace=describe_namespace),
    )


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (RPCStatusCode.NOT_FOUND, "namespace 'backoffice' does not exist at t:7233"),
        (RPCStatusCode.PERMISSION_DENIED, "credentials rejected by t:7233 for namespace"),
        (RPCStatusCode.UNAUTHENTICATED, "check TEMPORAL_API_KEY or the TLS client certificate"),
        (RPCStatusCode.UNAVAILABLE, "namespace 'backoffice' at t:7233: boom (UNAVAILABLE)"),
    ],
)
async def test_namespace_check_names_the_problem(status: RPCStatusCode, expected: str) -> None:
    with pytest.raises(UserError) as caught:
        await check_namespace(stub_client(RPCError("boom\nsecond line", status, b"")))  # type: ignore[arg-type]
    assert expected in caught.value.message and "\n" not in caught.value.message


async def test_namespace_check_passes_servers_without_the_call() -> None:
    unimplemented = RPCError("unimplemented", RPCStatusCode.UNIMPLEMENTED, b"")
    await check_namespace(stub_client(unimplemented))  # type: ignore[arg-type]
    await check_namespace(stub_client(None))  # type: ignore[arg-type]


def test_a_missing_profile_names_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", "/nonexistent/temporal.toml")
    with pytest.raises(UserError, match=r"from /nonexistent/temporal.toml: Profile 'prod'"):
        connect_config(profile="prod")


def test_connect_timeout_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HITL_CONNECT_TIMEOUT", raising=False)
    assert connect_timeout() == 10.0
    monkeypatch.setenv("HITL_CONNECT_TIMEOUT", "2.5")
    assert connect_timeout() == 2.5
    for bad in ("soon", "0"):
        monkeypatch.setenv("HITL_CONNECT_TIMEOUT", bad)
        with pytest.raises(UserError, match="HITL_CONNECT_TIMEOUT"):
            connect_timeout()


def test_a_profile_with_client_certificates_gives_mtls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `temporal` CLI's TOML, mTLS included, is what workers and clients connect with."""
    (tmp_path / "client.pem").write_text("CERT")
    (tmp_path / "client.key").write_text("KEY")
    config = tmp_path / "temporal.toml"
    config.write_text(
        '[profile.selfhosted]\naddress = "temporal.internal:7233"\nnamespace = "backoffice"\n'
        "[profile.selfhosted.tls]\n"
        f'client_cert_path = "{tmp_path / "client.pem"}"\n'
        f'client_key_path = "{tmp_path / "client.key"}"\n'
        'server_name = "temporal.internal"\n'
    )
    for key in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY", "TEMPORAL_TLS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(config))
    monkeypatch.setenv("TEMPORAL_PROFILE", "selfhosted")
    cfg = connect_config()
    assert (cfg["target_host"], cfg["namespace"]) == ("temporal.internal:7233", "backoffice")
    tls = cfg["tls"]
    assert isinstance(tls, TLSConfig)
    assert (tls.client_cert, tls.client_private_key, tls.domain) == (
        b"CERT",
        b"KEY",
        "temporal.internal",
    )
    monkeypatch.setenv("TEMPORAL_NAMESPACE", "other")
    assert connect_config()["namespace"] == "other", "variables override the profile"
