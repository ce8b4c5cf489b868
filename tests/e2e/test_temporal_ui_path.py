"""The Temporal UI and CLI as an approval console, as an operator meets them (dev server, a
worker process with payload encryption on, the real `temporal` CLI): refusals read as one typed
line even encrypted, an empty payload is answered with an example, handlers describe their
payload, and the current details render amounts literally with a payload block per update."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client

from hitl import connect
from hitl.codec import KEY_ENV, new_key
from hitl.worker.devserver import DevServer
from tests.e2e.cli_support import hitl
from tests.helpers import (
    WorkerProcess,
    desk_approvers,
    queue_name,
    signed_as,
    temporal_cli,
    wait_for,
)


async def test_refusals_and_details_read_well_in_the_temporal_cli_and_ui(
    dev_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = new_key()
    monkeypatch.setenv(KEY_ENV, key)  # `hitl` and our client hold the key; `temporal` does not
    address, tq = dev_server.address, queue_name("ui")
    wid = f"{tq}-refund"
    env = {
        KEY_ENV: key,
        "HITL_BACKOFFICE_DB": str(tmp_path / "backoffice.sqlite"),
        **desk_approvers(tmp_path),
    }
    with WorkerProcess(address, tq, agents="hitl.examples.refund_desk:agent", env=env):
        started = await asyncio.to_thread(
            hitl,
            address,
            "--task-queue",
            tq,
            "run",
            "Refund desk",
            "Order 1001 arrived broken: please refund $250. Also cancel order 1002.",
            "--id",
            wid,
            "--wait",
        )
        assert "awaiting_approval" in started.stdout, started.stderr

        async def cli(*args: str) -> tuple[int, str]:
            done = await asyncio.to_thread(temporal_cli, *args, address=address)
            return done.returncode, done.stdout + done.stderr

        # A wrong call id, through the plain `temporal` CLI (no codec): one typed line, no
        # traceback, no worker paths, readable although failures are encrypted.
        code, out = await cli(
            "workflow", "update", "execute", "--workflow-id", wid, "--name", "approve",
            "--input", '{"call_id": "zzz"}',
        )  # fmt: skip
        assert code != 0
        assert "UnknownCall: unknown call id 'zzz'" in out, out
        assert "Traceback" not in out and ".py" not in out and "Encoded failure" not in out

        # No payload at all: the refusal shows the right shape.
        code, out = await cli(
            "workflow", "update", "execute", "--workflow-id", wid, "--name", "approve"
        )  # fmt: skip
        assert code != 0
        assert "InvalidDecision: " in out and '{"call_id": ' in out, out
        assert "missing 1 required positional argument" not in out

        # A signal with a wrong call id cannot be answered: the run lists it in its details.
        code, out = await cli(
            "workflow", "signal", "--workflow-id", wid, "--name", "approve",
            "--input", '{"call_id": "nope"}',
        )  # fmt: skip
        assert code == 0, out

        client: Client = await connect(address=address)
        handle = client.get_workflow_handle(wid)

        async def metadata() -> WorkflowMetadata:
            meta: WorkflowMetadata = await handle.query(
                "__temporal_workflow_metadata", result_type=WorkflowMetadata
            )
            return meta

        async def lists_the_refused_signal() -> bool:
            return "Refused signals" in (await metadata()).current_details

        await wait_for(lists_the_refused_signal, what="the refused signal in the details")
        meta = await metadata()
        details = meta.current_details
        # Amounts render literally (the UI's markdown reads `$...$` as math).
        assert r"refund \$250.00 of the \$250.00 order" in details, details
        # A short, pretty-printed payload per update, which fits the panel, and the hitl line.
        pending = json.loads(
            (await asyncio.to_thread(hitl, address, "show", wid, "--json")).stdout
        )["status"]["pending"]
        call_id = next(p["call_id"] for p in pending if p["tool_name"] == "refund")
        assert f'```json\n{{\n  "call_id": "{call_id}",\n  "approver": "you"\n}}\n```' in details
        assert "*Send an Update* named `approve`" in details
        assert f"`hitl approve {wid} {call_id}`" in details
        assert max(len(line) for line in details.splitlines() if '"call_id"' in line) < 80
        assert "`approve` for `nope`" in details or "`approve`: UnknownCall" in details
        assert " UTC" in details  # times as a person reads them
        # Each handler says what it is for and the shape of its payload.
        described = {u.name: u.description for u in meta.definition.update_definitions}
        assert '"call_id"' in described["approve"] and "Approve" in described["approve"]
        assert '"content"' in described["answer"]
        signals = {s.name: s.description for s in meta.definition.signal_definitions}
        assert "Prefer the update" in signals["approve"]

        # The same refusal through our own client keeps its type, without the prefix.
        rejected = await asyncio.to_thread(hitl, address, "approve", wid, "zzz")
        assert rejected.returncode == 1
        assert "refused: unknown call id 'zzz' (UnknownCall)" in rejected.stderr

        # `hitl show`: a call that ran while its sibling waits says so (not "pending").
        done = await asyncio.to_thread(
            hitl, address, "approve", wid, call_id, "--as", "ann", env=signed_as(tmp_path, "ann")
        )
        assert done.returncode == 0, done.stderr

        async def shows_it_ran() -> bool:
            shown = await asyncio.to_thread(hitl, address, "show", wid)
            return "refund({" in shown.stdout and "= (done;" in shown.stdout

        await wait_for(shows_it_ran, what="hitl show to list the refund as done")


def test_python_m_hitl_codec_prints_a_key_without_warnings() -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-W", "error", "-m", "hitl.codec"], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.startswith("k1:") and len(out.stdout.strip()) == 3 + 44
