"""The seeds' script and the encryption path, on the real dev server."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from hitl import Runner
from hitl.client import data_converter
from hitl.codec import EncryptionCodec, new_key, parse_keys
from hitl.wire import RunOutput
from hitl.worker.devserver import DevServer
from tests.agents import support_agent
from tests.helpers import ROOT, payload_texts, process_alive, queue_name, serving


def run_seed(
    dev_server: DevServer, tmp_path: Path, answer: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "examples/seeds/python_hitl.py")],
        input=answer,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={
            **os.environ,
            "TEMPORAL_ADDRESS": dev_server.address,
            "HITL_DEFAULT_MODEL": "scripted:seeds.weather",
            "HITL_TASK_QUEUE": queue_name("seed"),
        },
    )


def test_seed_script_runs_unchanged_apart_from_imports(
    dev_server: DevServer, tmp_path: Path
) -> None:
    approved = run_seed(dev_server, tmp_path, "y\n")
    assert approved.returncode == 0, approved.stderr
    assert 'Approve get_temperature with {"city": "Oakland"}? [y/N]:' in approved.stdout
    assert approved.stdout.strip().endswith("The temperature in Oakland is 20° Celsius")
    saved = (tmp_path / ".cache/hitl_state.json").read_text()
    assert '"$schemaVersion": 4' in saved

    rejected = run_seed(dev_server, tmp_path, "n\n")
    assert rejected.returncode == 0, rejected.stderr
    assert rejected.stdout.strip().endswith("Tool execution was not approved.")


async def test_encrypted_payloads_never_reach_the_server_in_clear(
    dev_server: DevServer,
) -> None:
    codec = EncryptionCodec(*parse_keys(new_key()))
    secure = await Client.connect(dev_server.address, data_converter=data_converter(codec))
    plain = await Client.connect(dev_server.address, data_converter=data_converter(None))
    canary = "CANARY-4111-1111-1111-1111"
    async with serving(secure, support_agent) as tq:
        result = await Runner.run(
            support_agent,
            f"email them: card {canary}",
            client=secure,
            task_queue=tq,
            serve=False,
        )
    assert result.final_output == "send_email: Sent 'About your order'"
    raw = (await plain.get_workflow_handle(result.workflow_id).fetch_history()).to_json()
    stored = payload_texts(raw)
    assert canary not in stored, "history stored without the key holds no plaintext"
    assert "Sent 'About your order'" not in stored
    assert "YmluYXJ5L2VuY3J5cHRlZA" in raw, "payloads carry the binary/encrypted encoding"
    # The check itself works: an unencrypted run's payloads do show the canary.
    async with serving(plain, support_agent) as tq2:
        clear = await Runner.run(
            support_agent,
            f"email them: card {canary}",
            client=plain,
            task_queue=tq2,
            serve=False,
        )
    clear_raw = (await plain.get_workflow_handle(clear.workflow_id).fetch_history()).to_json()
    assert canary in payload_texts(clear_raw)
    out = await secure.get_workflow_handle(result.workflow_id, result_type=RunOutput).result()
    assert out.final_output == result.final_output, "the key holder reads it back"
    with pytest.raises(Exception):  # noqa: B017 - without the key the payload cannot decode
        await plain.get_workflow_handle(result.workflow_id, result_type=RunOutput).result()


def _demo_pids(stdout: str) -> list[int]:
    """The processes the demo says it started (dev server, worker)."""
    pids = [int(m) for m in re.findall(r"(?:dev server|worker) pid (\d+)", stdout)]
    assert len(pids) == 2, stdout
    return pids


_alive = process_alive


def test_make_demo_runs_end_to_end_without_a_terminal(tmp_path: Path) -> None:
    """What `make demo` runs in CI: its own dev server, a worker, the refund desk; exits 0."""
    out = subprocess.run(
        [sys.executable, "-m", "hitl.examples.demo"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "HITL_DEMO_STATE_DIR": str(tmp_path), "HITL_DEMO_DECISION": "reject"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "paused after" in out.stdout
    # The link to the paused call in the approval console (it signs the person in once).
    assert re.search(
        r"http://127\.0\.0\.1:\d+/login\?token=[\w-]+&next=%2Fcall%3Fns%3Ddefault%26run%3D",
        out.stdout,
    )
    # The printed command is the decision that was sent: same approver, same message. The
    # refund takes signed decisions from finance: `hitl` with ann's key; the cancellation the
    # plain `temporal` CLI.
    assert out.stdout.count("temporal workflow update execute") == 1
    assert out.stdout.count("--name reject") == 1
    assert '"approver": "ann", "message": "The reviewer declined this."' in out.stdout
    keys = re.escape(str(tmp_path / "keys"))
    assert re.search(
        rf"HITL_SIGNING_KEY={keys}/ann\.key \S+ --address \S+ reject \S+ t\d+\.\d+ --as ann "
        r"--message 'The reviewer declined this\.'",
        out.stdout,
    ), out.stdout
    assert 'cancel_order({"order_id": 1002}): The reviewer declined this.' in out.stdout
    assert re.search(r"refund t\d+\.\d+: reject by ann \(person, signed\)", out.stdout)
    assert re.search(r"cancel_order t\d+\.\d+: reject by ann \(person\)", out.stdout)
    assert (tmp_path / "dev.sqlite").exists(), "the server persisted to the state folder"
    for pid in _demo_pids(out.stdout):
        assert not _alive(pid), f"the demo left process {pid} behind"


def test_make_demo_refund_over_a_thousand_takes_two_people_of_finance(tmp_path: Path) -> None:
    """The refund desk's four eyes, unattended: ann approves, the call still waits, bob
    approves; both signed with their own keys from the demo's approver directory."""
    out = subprocess.run(
        [sys.executable, "-m", "hitl.examples.demo", "--request",
         "Order 1004 arrived broken: please refund $1,250.00."],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "HITL_DEMO_STATE_DIR": str(tmp_path), "HITL_DEMO_DECISION": "approve"},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Refund $1,250.00 to Grace Hopper (order 1004)" in out.stdout
    assert "needs 2 different approvers; approved so far by ann" in out.stdout
    assert "-> approved by ann" in out.stdout and "-> approved by bob" in out.stdout
    assert re.search(r"refund t\d+\.\d+: approve by ann, bob \(person, signed\)", out.stdout)
    assert re.search(r"REFUND-1004-\d{4}: refund order 1004 \$1250.00", out.stdout), out.stdout
    directory = json.loads((tmp_path / "approvers.json").read_text())["approvers"]
    assert {n: e["groups"] for n, e in directory.items() if not e.get("gateway")} == {
        "ann": ["finance"],
        "bob": ["finance"],
        "lee": ["finance-leads"],
    }
    for pid in _demo_pids(out.stdout):
        assert not _alive(pid), f"the demo left process {pid} behind"


def test_make_demo_email_sends_once_after_approval(tmp_path: Path) -> None:
    """`make demo-email`: mail to a customer about a refund waits for a person, shows the
    email as the preview, and goes out once when approved."""
    out = subprocess.run(
        [sys.executable, "-m", "hitl.examples.demo", "--example", "email"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "HITL_DEMO_STATE_DIR": str(tmp_path), "HITL_DEMO_DECISION": "approve"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "serving 'Email desk'" in out.stdout
    assert "goes outside example.com and it mentions a refund" in out.stdout
    assert "To: ada@lovelace.org" in out.stdout, "the email itself is the preview"
    assert out.stdout.count("--name approve") == 1, "only sending needed a person"
    assert re.search(r"MSG-\d{4}: to ada@lovelace.org", out.stdout), out.stdout
    for pid in _demo_pids(out.stdout):
        assert not _alive(pid), f"the demo left process {pid} behind"


def test_make_demo_mcp_gates_a_refund_and_answers_the_servers_question(tmp_path: Path) -> None:
    """`make demo-mcp`: tools from a local MCP server (stdio, started by the worker); the refund
    waits for approval, the account closure asks its own question, each effect happens once."""
    out = subprocess.run(
        [sys.executable, "-m", "hitl.examples.demo", "--example", "mcp"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "HITL_DEMO_STATE_DIR": str(tmp_path), "HITL_DEMO_DECISION": "approve"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "serving 'MCP desk'" in out.stdout
    assert "Refund $250.00 on order 1001" in out.stdout, "the worker's approval request"
    assert out.stdout.count("--name approve") == 1, "only the refund needed a decision"
    assert "close_account asks: Close the account of Ada Lovelace (#7001)?" in out.stdout
    assert re.search(r"hitl --address \S+ answer \S+ t\d+\.\d+ --set confirm=true", out.stdout)
    assert re.search(r"MCP-REFUND-1001-\d{4}: mcp-refund 1001 \$250.00", out.stdout), out.stdout
    assert re.search(r"MCP-CLOSE-7001-\d{4}: mcp-close 7001", out.stdout), out.stdout
    for pid in _demo_pids(out.stdout):
        assert not _alive(pid), f"the demo left process {pid} behind"


def test_make_demo_asks_on_a_terminal(tmp_path: Path) -> None:
    """On a terminal the demo asks y/n per pending call, as the seeds' example does."""
    primary, secondary = pty.openpty()
    try:
        # Typed ahead: the terminal's line discipline hands one line to each prompt.
        os.write(primary, b"y\nn\n")
        out = subprocess.run(
            [sys.executable, "-m", "hitl.examples.demo"],
            cwd=ROOT,
            stdin=secondary,
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "HITL_DEMO_STATE_DIR": str(tmp_path)},
        )
    finally:
        os.close(secondary)
        os.close(primary)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("[y/N]:") == 2
    assert "Approve refund as ann? [y/N]:" in out.stdout
    assert " approve refund-desk-" in out.stdout and "--name reject" in out.stdout
    assert re.search(r"refund t\d+\.\d+: approve by ann \(person, signed\)", out.stdout)
    assert 'cancel_order({"order_id": 1002}): The reviewer declined this.' in out.stdout
    for pid in _demo_pids(out.stdout):
        assert not _alive(pid), f"the demo left process {pid} behind"


def test_run_sync_serves_in_process(dev_server: DevServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Runner.run_sync` from synchronous code, with the agent served in this process."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", dev_server.address)
    monkeypatch.setenv("HITL_TASK_QUEUE", queue_name("sync"))
    result = Runner.run_sync(support_agent, "email them an update", serve=True)
    assert result.final_output == "send_email: Sent 'About your order'"


async def test_codec_server_lets_the_temporal_cli_read_and_decide_encrypted_runs(
    dev_server: DevServer,
) -> None:
    """Payloads are stored encrypted; `hitl codec-server` lets the plain `temporal` CLI (and
    the Web UI) read them and send encrypted decisions."""
    from hitl.codec import serve_codec
    from tests.helpers import temporal_cli

    codec = EncryptionCodec(*parse_keys(new_key()))
    server = serve_codec(codec, port=0)
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    secure = await Client.connect(dev_server.address, data_converter=data_converter(codec))
    addr = dev_server.address
    try:
        async with serving(secure, support_agent) as tq:
            result = await Runner.run(
                support_agent, "cancel order 21", client=secure, task_queue=tq, serve=False
            )
            wid, call = result.workflow_id, result.interruptions[0].call_id
            payload = json.dumps({"call_id": call, "approver": "cli-user"})
            # In a thread: the worker serving the run lives in this event loop.
            coded = await asyncio.to_thread(
                temporal_cli,
                "workflow",
                "update",
                "execute",
                "-w",
                wid,
                "--name",
                "approve",
                "--input",
                payload,
                "--codec-endpoint",
                endpoint,
                address=addr,
            )
            assert coded.returncode == 0, coded.stderr
            out = await secure.get_workflow_handle(wid, result_type=RunOutput).result()
        assert out.final_output == "cancel_order: Cancelled order 21"
        assert [d.approver for d in out.decisions] == ["cli-user"]
        raw = temporal_cli("workflow", "show", "-w", wid, "-o", "json", address=addr)
        decoded = temporal_cli(
            "workflow",
            "show",
            "-w",
            wid,
            "-o",
            "json",
            "--codec-endpoint",
            endpoint,
            address=addr,
        )
    finally:
        server.shutdown()
    stored, readable = payload_texts(raw.stdout), payload_texts(decoded.stdout)
    assert "Cancelled order 21" not in stored and "cli-user" not in stored
    assert "Cancelled order 21" in readable and "cli-user" in readable
