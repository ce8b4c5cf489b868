from __future__ import annotations

import asyncio
import base64

import pytest
from temporalio.api.common.v1 import Payload

from hitl import UserError
from hitl.client import connect_config
from hitl.codec import UNDECRYPTABLE, EncryptionCodec, parse_keys
from hitl.items import FunctionCall, check_arguments, normalize_input, parse_model_output
from hitl.refs import Allowed, allow, callable_ref


def test_parse_model_output_never_trusts_the_model() -> None:
    parsed = parse_model_output(
        [
            {"type": "message", "role": "assistant", "content": []},
            {"type": "function_call", "call_id": "a", "name": "t", "arguments": "{}"},
            {"type": "function_call", "call_id": "a", "name": "t", "arguments": "{}"},
            {"type": "function_call", "name": "t"},
            {"type": "function_call", "call_id": "b", "name": "t", "arguments": {"x": 1}},
            {"type": "reasoning", "summary": []},
        ]
    )
    assert [c.call_id for c in parsed.calls] == ["a", "b"]
    assert parsed.calls[1].arguments == '{"x": 1}'
    assert len(parsed.others) == 1 and len(parsed.messages) == 1


def test_check_arguments() -> None:
    ok = FunctionCall("c", "t", '{"a": 1}', {})
    assert check_arguments(ok, 100) is None
    assert "too large (8 bytes" in (check_arguments(ok, 5) or "")
    assert "not valid JSON" in (check_arguments(FunctionCall("c", "t", "{", {}), 100) or "")
    assert "JSON object" in (check_arguments(FunctionCall("c", "t", "[]", {}), 100) or "")
    dropped = FunctionCall("c", "t", "", {}, oversized=5000)
    assert "too large (5000 bytes" in (check_arguments(dropped, 100) or "")


def test_normalize_input() -> None:
    assert normalize_input("hi") == [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError):
        normalize_input([1, 2])  # type: ignore[list-item]


def module_level(x: int) -> int:
    return x


def not_registered(x: int) -> int:
    return x


@allow
def registered_in_process(x: int) -> int:
    return x


def test_references_name_only_what_a_worker_allows() -> None:
    ref = callable_ref(module_level, what="handler")
    assert ref == "tests.unit.test_misc:module_level"
    with pytest.raises(UserError, match="module-level"):
        callable_ref(lambda x: x, what="handler")
    allowed = Allowed([module_level])
    assert allowed.get(ref, what="handler") is module_level
    assert allowed.get(callable_ref(registered_in_process, what="h"), what="h") is (
        registered_in_process
    )
    # A name is never imported: anything not registered is refused, however importable.
    for name in ("os:system", "subprocess:Popen", "tests.unit.test_misc:not_registered"):
        with pytest.raises(UserError, match="is not allowed on this worker"):
            allowed.get(name, what="the run's context_deserializer")


def test_encryption_codec_round_trip_and_rotation() -> None:
    k1 = base64.b64encode(b"1" * 32).decode()
    k2 = base64.b64encode(b"2" * 32).decode()
    old = EncryptionCodec(*parse_keys(f"old:{k1}"))
    rotated = EncryptionCodec(*parse_keys(f"new:{k2},old:{k1}"))
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'{"card": "4111"}')
    sealed = asyncio.run(old.encode([plain]))[0]
    assert b"4111" not in sealed.data
    assert asyncio.run(rotated.decode([sealed]))[0] == plain, "old keys still decrypt"
    assert asyncio.run(rotated.encode([plain]))[0].metadata["encryption-key-id"] == b"new"
    # Decoding never raises (a raise would fail every workflow task carrying the payload): what
    # cannot be decrypted becomes a stand-in saying why, which handlers refuse.
    unknown = asyncio.run(EncryptionCodec(*parse_keys(k2)).decode([sealed]))[0]
    assert unknown.metadata["encoding"] == UNDECRYPTABLE
    assert b"unknown key id 'old'" in unknown.metadata["reason"]
    forged = Payload(metadata=dict(sealed.metadata), data=b"\x00" * 40)
    garbage = asyncio.run(old.decode([forged]))[0]
    assert garbage.metadata["encoding"] == UNDECRYPTABLE
    assert b"does not decrypt" in garbage.metadata["reason"]
    with pytest.raises(UserError, match="32 bytes"):
        parse_keys("k:" + base64.b64encode(b"short").decode())


def test_connect_config_reads_the_cli_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", "temporal.example:7233")
    monkeypatch.setenv("TEMPORAL_NAMESPACE", "backoffice")
    cfg = connect_config()
    assert (cfg["target_host"], cfg["namespace"]) == ("temporal.example:7233", "backoffice")
    monkeypatch.delenv("TEMPORAL_ADDRESS")
    monkeypatch.delenv("TEMPORAL_NAMESPACE")
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", "/nonexistent/temporal.toml")
    assert connect_config()["target_host"] == "localhost:7233"
    assert connect_config(address="h:1")["target_host"] == "h:1"


def test_workflow_ids_fit_a_postgresql_backed_cluster() -> None:
    from hitl.starting import check_id as _check_id
    from hitl.starting import new_workflow_id
    from hitl.wire import MAX_ID_PREFIX, MAX_WORKFLOW_ID, child_workflow_id

    assert child_workflow_id("run-a-1", "call_x_0") == "run-a-1--call_x_0", "short ids unchanged"
    # Nesting ten levels deep under the longest id a client may give stays storable, and
    # distinct calls still get distinct ids.
    wid = "r" * MAX_ID_PREFIX
    seen = set()
    for level in range(10):
        wid = child_workflow_id(wid, f"call_{'f' * 12}_{level}")
        assert len(wid) <= MAX_WORKFLOW_ID
        seen.add(wid)
    assert len(seen) == 10
    assert child_workflow_id("p" * 250, "call_1") != child_workflow_id("p" * 250, "call_2")
    assert len(new_workflow_id("A very long agent name " * 40)) < 100
    with pytest.raises(UserError, match="workflow_id must be 1 to 160 characters"):
        _check_id("x" * 161, "workflow_id")
