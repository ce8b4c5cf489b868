"""Production paths on the real dev server: connection settings, fail-fast errors, the compose
stack's setup script, and tools or model calls on their own task queues."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client, WorkflowHandle, WorkflowHistory

from hitl import Agent, OpenAIModel, RunConfig, Runner
from hitl.admin import missing_search_attributes
from hitl.client import connect, data_converter
from hitl.wire import DecisionInput, RunOutput
from hitl.worker.build import WorkerOptions, build_worker
from hitl.worker.devserver import DevServer, free_port, temporal_binary
from tests.agents import support_agent
from tests.fake_openai import Reply, fake_openai, response_body, responses_text
from tests.helpers import ROOT, Ledger, WorkerProcess, queue_name, wait_for

BIN = Path(sys.executable).parent


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without Temporal settings (and no user config file)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    env["TEMPORAL_CONFIG_FILE"] = "/nonexistent/temporal.toml"
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def run_worker(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hitl.worker", "--agents", "tests.agents", *args],
        cwd=ROOT,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{text}"
    return lines[0]


# ----------------------------------------------------------------------------- fail fast


def test_worker_with_nothing_at_the_address_exits_with_one_line() -> None:
    port = free_port()
    result = run_worker("--address", f"127.0.0.1:{port}")
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert f"127.0.0.1:{port}" in line and "connection refused" in line, line
    assert "worker ready" not in result.stdout


def test_worker_with_an_unresolvable_host_exits_with_one_line() -> None:
    result = run_worker(TEMPORAL_ADDRESS="temporal.invalid:7233")
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert "cannot resolve host 'temporal.invalid'" in line, line


def test_worker_on_an_unknown_namespace_exits_with_one_line(dev_server: DevServer) -> None:
    result = run_worker("--address", dev_server.address, TEMPORAL_NAMESPACE="no-such-ns")
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert "namespace 'no-such-ns' does not exist" in line and dev_server.address in line, line


def test_api_key_against_a_plaintext_server_says_tls(dev_server: DevServer) -> None:
    # An API key turns TLS on (as in the `temporal` CLI); a local server speaks plaintext.
    result = run_worker(TEMPORAL_ADDRESS=dev_server.address, TEMPORAL_API_KEY="not-a-real-key")
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert "TLS handshake failed" in line and "TEMPORAL_API_KEY" in line, line
    assert "not-a-real-key" not in result.stderr + result.stdout


def test_hitl_cli_on_an_unknown_namespace_says_so(dev_server: DevServer) -> None:
    result = subprocess.run(
        [str(BIN / "hitl"), "--address", dev_server.address, "--namespace", "nope", "pending"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "namespace 'nope' does not exist" in one_line(result.stderr)


# ----------------------------------------------------------------------------- credentials


class FakeFrontend:
    """A gRPC server on 127.0.0.1 that answers as a Temporal frontend with authentication does.

    Just enough HTTP/2 (RFC 9113) for the SDK's client: the preface, settings and pings, then
    every request answered with a gRPC status. Request headers are not decoded (the client's
    HPACK uses Huffman coding, more than a test needs); the protobuf body tells the two calls a
    connecting client makes apart: `GetSystemInfo` is empty, `DescribeNamespace` names the
    namespace.
    """

    def __init__(self, system_info: tuple[int, str] | None, describe: tuple[int, str]) -> None:
        self.system_info, self.describe = system_info, describe
        self.calls: list[str] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.server.close()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.server.accept()
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError, EOFError):
            reader = conn.makefile("rb")

            def read(n: int) -> bytes:
                data = reader.read(n)
                if len(data) < n:
                    raise EOFError
                return data

            assert read(24) == b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
            conn.sendall(_frame(4, 0, 0))  # our (default) settings
            bodies: dict[int, bytes] = {}
            while True:
                head = read(9)
                length, kind, flags = int.from_bytes(head[:3], "big"), head[3], head[4]
                stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
                payload = read(length)
                if kind == 4 and not flags & 1:  # SETTINGS: acknowledge
                    conn.sendall(_frame(4, 1, 0))
                elif kind == 6 and not flags & 1:  # PING: answer
                    conn.sendall(_frame(6, 1, 0, payload))
                elif kind == 7:  # GOAWAY
                    return
                elif kind in (0, 1):  # DATA, HEADERS
                    if kind == 0:
                        if flags & 0x8:  # padded
                            payload = payload[1 : len(payload) - payload[0]]
                        bodies[stream] = bodies.get(stream, b"") + payload
                    if flags & 1:  # END_STREAM: the request is complete
                        conn.sendall(self._answer(stream, _grpc_message(bodies.pop(stream, b""))))

    def _answer(self, stream: int, message: bytes) -> bytes:
        if not message:
            self.calls.append("GetSystemInfo")
            status = self.system_info
        else:
            namespace = DescribeNamespaceRequest.FromString(message).namespace
            self.calls.append(f"DescribeNamespace {namespace}")
            status = self.describe
        head = b"\x88" + _header("content-type", "application/grpc")  # \x88: `:status: 200`
        if status is None:  # an empty GetSystemInfoResponse, then status OK
            return (
                _frame(1, 0x4, stream, head)
                + _frame(0, 0, stream, b"\x00\x00\x00\x00\x00")
                + _frame(1, 0x5, stream, _header("grpc-status", "0"))
            )
        code, message_text = status
        trailers = _header("grpc-status", str(code)) + _header(
            "grpc-message", urllib.parse.quote(message_text, safe=" .")
        )
        return _frame(1, 0x5, stream, head + trailers)  # trailers only: END_HEADERS|END_STREAM


def _grpc_message(body: bytes) -> bytes:
    """The message in a gRPC request body (the SDK gzips its requests)."""
    if not body:
        return b""
    compressed, message = body[0], body[5:]
    return gzip.decompress(message) if compressed else message


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
    )


def _header(name: str, value: str) -> bytes:
    """An HPACK literal header field, not indexed, plain (not Huffman) strings."""
    return b"\x00" + _hpack_string(name) + _hpack_string(value)


def _hpack_string(text: str) -> bytes:
    data, n = text.encode(), len(text.encode())
    if n < 127:
        return bytes([n]) + data
    out, n = [127], n - 127
    while n >= 128:
        out.append(n % 128 + 128)
        n //= 128
    return bytes([*out, n]) + data


UNAUTHENTICATED, PERMISSION_DENIED = 16, 7


@pytest.mark.parametrize(
    ("system_info", "describe", "calls", "expected"),
    [
        pytest.param(
            (UNAUTHENTICATED, "Request unauthorized."),
            (UNAUTHENTICATED, "Request unauthorized."),
            ["GetSystemInfo"],
            "cannot connect to Temporal at {address} (namespace backoffice): credentials "
            "rejected (Request unauthorized.): check TEMPORAL_API_KEY or the TLS client "
            "certificate",
            id="unauthenticated-on-connect",
        ),
        pytest.param(
            None,
            (PERMISSION_DENIED, "Request unauthorized."),
            ["GetSystemInfo", "DescribeNamespace backoffice"],
            "credentials rejected by {address} for namespace 'backoffice' (Request "
            "unauthorized.): check TEMPORAL_API_KEY or the TLS client certificate, and that it "
            "grants access to this namespace",
            id="permission-denied-on-the-namespace",
        ),
    ],
)
def test_rejected_credentials_stop_worker_and_hitl_with_one_line(
    system_info: tuple[int, str] | None,
    describe: tuple[int, str],
    calls: list[str],
    expected: str,
) -> None:
    fake = FakeFrontend(system_info, describe)
    try:
        env = {
            "TEMPORAL_ADDRESS": fake.address,
            "TEMPORAL_NAMESPACE": "backoffice",
            "TEMPORAL_API_KEY": "sk-rejected-key",
            "TEMPORAL_TLS": "false",  # the fake speaks plaintext
            "HITL_CONNECT_TIMEOUT": "20",
        }
        worker = run_worker(**env)
        assert fake.calls == calls, "the worker stopped at the first rejection"
        hitl = subprocess.run(
            [str(BIN / "hitl"), "pending"],
            env=clean_env(**env),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        fake.close()
    reason = expected.format(address=fake.address)
    assert worker.returncode == 2
    assert one_line(worker.stderr).startswith(f"worker: {reason}"), worker.stderr
    assert "worker ready" not in worker.stdout
    assert hitl.returncode == 1
    assert reason in one_line(hitl.stderr), hitl.stderr
    assert "sk-rejected-key" not in worker.stderr + worker.stdout + hitl.stderr + hitl.stdout


# ----------------------------------------------------------------------------- one profile


async def test_one_envconfig_profile_serves_worker_client_hitl_and_temporal_cli(
    dev_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "temporal.toml"
    config.write_text(
        f'[profile.backoffice]\naddress = "{dev_server.address}"\nnamespace = "default"\n'
    )
    env = {"TEMPORAL_CONFIG_FILE": str(config), "TEMPORAL_PROFILE": "backoffice"}
    for key in [k for k in os.environ if k.startswith("TEMPORAL_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    tq = queue_name("profile")
    # address="" leaves the address to the profile (WorkerProcess always passes --address).
    with WorkerProcess("", tq, env=env):
        client = await connect(profile="backoffice")
        result = await Runner.run(
            support_agent, "cancel order 31", client=client, task_queue=tq, serve=False
        )
        approve = await asyncio.to_thread(
            subprocess.run,
            [str(BIN / "hitl"), "approve", result.workflow_id, "--all", "--as", "ops"],
            env=clean_env(**env),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert approve.returncode == 0, approve.stderr
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        assert (await handle.result()).final_output == "cancel_order: Cancelled order 31"
    shown = await asyncio.to_thread(
        subprocess.run,
        [temporal_binary(), "workflow", "describe", "-w", result.workflow_id, "-o", "json"],
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)["workflowExecutionInfo"]
    assert info["status"] == "WORKFLOW_EXECUTION_STATUS_COMPLETED"


def test_an_unknown_profile_is_one_line() -> None:
    result = run_worker("--profile", "nope")
    assert result.returncode == 2
    assert "Profile 'nope' not found" in one_line(result.stderr)


# ----------------------------------------------------------------------------- compose setup


async def test_compose_setup_script_creates_namespace_and_search_attributes(
    dev_server: DevServer,
) -> None:
    """deploy/temporal/setup-namespace.sh, as the compose stack runs it, on a real server."""
    namespace = queue_name("compose-ns")
    script = ROOT / "deploy" / "temporal" / "setup-namespace.sh"
    env = clean_env(TEMPORAL_ADDRESS=dev_server.address, TEMPORAL_NAMESPACE=namespace)
    for _ in range(2):  # idempotent: compose runs it on every `up`
        done = await asyncio.to_thread(
            subprocess.run,
            ["sh", str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    client = await Client.connect(
        dev_server.address, namespace=namespace, data_converter=data_converter()
    )
    assert await missing_search_attributes(client) == []


# ----------------------------------------------------------------------------- task queues


def scheduled_on(hist: WorkflowHistory, activity: str) -> list[str]:
    """Task queues that activities of this type were scheduled on."""
    return [
        e.activity_task_scheduled_event_attributes.task_queue.name
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    ]


def identities(hist: WorkflowHistory, event_type: int) -> set[str]:
    out = set()
    for e in hist.events:
        if e.event_type != event_type:
            continue
        if event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            out.add(e.activity_task_started_event_attributes.identity)
        else:
            out.add(e.workflow_task_started_event_attributes.identity)
    return out


async def scheduled_tool_waits(handle: WorkflowHandle[object, object]) -> bool:
    desc = await handle.describe()
    return any(
        a.activity_type.name == "execute_tool"
        and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
        for a in desc.raw_description.pending_activities
    )


async def test_tools_run_only_on_the_tool_queue_worker(
    dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    tq, tools = queue_name("wf"), queue_name("tools")
    ledger = tmp_path / "ledger.db"
    # Only the tool worker can record effects: a tool run anywhere else would leave no row.
    with WorkerProcess(dev_server.address, tq, extra_args=["--identity", "wf-worker"]):
        result = await Runner.run(
            support_agent,
            "cancel order 12",
            client=dev_client,
            task_queue=tq,
            serve=False,
            run_config=RunConfig(tool_task_queue=tools),
        )
        handle = dev_client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        await handle.execute_update(
            "approve", DecisionInput(call_id=result.interruptions[0].call_id)
        )
        # With no worker on the tool queue, the approved call waits there.
        await wait_for(lambda: scheduled_tool_waits(handle), what="the queued tool")
        assert not ledger.exists()
        with WorkerProcess(
            dev_server.address,
            tools,
            env={"HITL_TEST_LEDGER": str(ledger)},
            extra_args=["--activities-only", "--identity", "tool-worker"],
        ) as tool_worker:
            out = await asyncio.wait_for(handle.result(), 30)
        assert "activities only" in "".join(tool_worker.output)
    assert out.final_output == "cancel_order: Cancelled order 12"
    assert [r[0] for r in Ledger(ledger).rows()] == [
        f"{result.workflow_id}:{result.interruptions[0].call_id}"
    ]
    hist = await handle.fetch_history()
    assert scheduled_on(hist, "execute_tool") == [tools]
    assert identities(hist, EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED) == {"tool-worker"}
    assert identities(hist, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED) == {"wf-worker"}


async def test_model_calls_run_on_the_model_queue_worker(
    dev_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HITL_TEST_OPENAI_KEY", "sk-test-model-queue")
    tq, models = queue_name("wf"), queue_name("models")
    with fake_openai() as fake:
        fake.queue("/v1/responses", Reply(response_body([responses_text("Hello from the queue")])))
        agent: Agent[None] = Agent(
            name="Model queue desk",
            instructions="Say hello.",
            model=OpenAIModel(
                "gpt-test",
                api="responses",
                base_url=fake.base_url,
                api_key_env="HITL_TEST_OPENAI_KEY",
            ),
        )
        workflows = build_worker(
            dev_client, [agent], WorkerOptions(task_queue=tq, graceful_shutdown=0)
        )
        model_worker = build_worker(
            dev_client,
            [agent],
            WorkerOptions(task_queue=models, activities_only=True, graceful_shutdown=0),
            identity="model-worker",
        )
        async with workflows, model_worker:
            result = await asyncio.wait_for(
                Runner.run(
                    agent,
                    "hi",
                    client=dev_client,
                    task_queue=tq,
                    serve=False,
                    run_config=RunConfig(model_task_queue=models),
                ),
                30,
            )
    assert result.final_output == "Hello from the queue"
    hist = await dev_client.get_workflow_handle(result.workflow_id).fetch_history()
    assert scheduled_on(hist, "call_model") == [models]
    assert identities(hist, EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED) == {"model-worker"}
