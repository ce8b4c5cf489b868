"""Large payloads by reference on the dev server: history stays small, blobs are ciphertext,
a missing blob is a typed error, and forged references never jam a run."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from hitl import (
    Agent,
    ModelReply,
    ModelRequest,
    Runner,
    ScriptedModel,
    StoredPayloadMissing,
    ToolContext,
    function_tool,
)
from hitl.client import data_converter
from hitl.codec import EncryptionCodec, parse_keys
from hitl.converter import is_storage_reference
from hitl.storage import FileBlobStore, external_storage
from hitl.wire import DecisionInput, RunOutput, RunStatus, ToolOutput
from hitl.worker.devserver import DevServer
from tests.helpers import record_effect, serving, tool_activity_count
from tests.hostile import raw

THRESHOLD = 16 * 1024
CANARY = "canary-7f3a9c"


@function_tool(needs_approval=True)
def export_report(ctx: ToolContext[object], customer: str, notes: str) -> str:
    """Export a customer's report (large).

    Args:
        customer: The customer.
        notes: What to include.
    """
    record_effect(ctx, "export_report")
    return f"report for {customer}: " + (CANARY + " ") * 7_000


def script(req: ModelRequest) -> ModelReply:
    """Call the export with long notes, then answer with the report's size."""
    [*_, last] = req.results_for("export_report") or [None]
    if last is None:
        return ModelReply.call("export_report", {"customer": "acme", "notes": CANARY * 3000})
    return ModelReply.say(f"exported {len(last.output or '')} characters")


exporter = Agent(
    name="Exporter", tools=[export_report], model=ScriptedModel(script, "tests.exporter")
)


def payload_sizes(history_json: str) -> list[tuple[int, str]]:
    """(size, encoding) of every payload in a raw history."""
    found: list[tuple[int, str]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            meta = node.get("metadata")
            if isinstance(meta, dict) and "encoding" in meta and "data" in node:
                encoding = base64.b64decode(meta["encoding"]).decode()
                found.append((len(base64.b64decode(node.get("data") or "")), encoding))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(json.loads(history_json))
    return found


async def client_with(server: DevServer, blobs: Path, codec: EncryptionCodec | None) -> Client:
    storage = external_storage(FileBlobStore(blobs), THRESHOLD)
    return await Client.connect(
        server.address, data_converter=data_converter(codec=codec, storage=storage)
    )


async def test_large_payloads_go_to_the_store_encrypted_and_history_stays_small(
    dev_server: DevServer, tmp_path: Path, ledger: Any
) -> None:
    key = base64.b64encode(b"k" * 32).decode()
    codec = EncryptionCodec(*parse_keys(f"k1:{key}"))
    blobs = tmp_path / "blobs"
    client = await client_with(dev_server, blobs, codec)
    async with serving(client, exporter) as tq:
        paused = await Runner.run(
            exporter, "export acme", client=client, task_queue=tq, serve=False
        )
        [call] = paused.interruptions
        assert CANARY in call.arguments, "the person sees the real arguments"
        state = paused.to_state()
        state.approve(call)
        done = await Runner.run(exporter, state, client=client, task_queue=tq, serve=False)
    assert done.final_output == f"exported {len('report for acme: ') + 7_000 * 14} characters"
    handle = client.get_workflow_handle(done.workflow_id)
    hist = await handle.fetch_history()
    sizes = payload_sizes(hist.to_json())
    assert max(size for size, _ in sizes) < THRESHOLD, "every large payload went by reference"
    assert sum(enc == "json/protobuf" for _, enc in sizes) >= 2, "arguments and output stored"
    assert CANARY not in hist.to_json(), "nothing in clear in history"
    files = [f for f in blobs.rglob("*") if f.is_file()]
    assert files and all(CANARY.encode() not in f.read_bytes() for f in files), "blobs encrypted"
    assert tool_activity_count(hist) == 1 and ledger.count("export_report") == 1

    # The store lost its blobs: reading the tool's stored output is a typed error, not a crash.
    [output] = [
        e.activity_task_completed_event_attributes.result.payloads[0]
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    ]
    assert is_storage_reference(output)
    assert (await client.data_converter.decode([output], [ToolOutput]))[0].output.startswith(
        "report for acme"
    )
    for f in files:
        f.unlink()
    with pytest.raises(StoredPayloadMissing, match="no stored payload"):
        await client.data_converter.decode([output], [ToolOutput])


async def test_forged_references_are_refused_and_the_run_lives_on(
    dev_server: DevServer, tmp_path: Path, ledger: Any
) -> None:
    client = await client_with(dev_server, tmp_path / "blobs", codec=None)
    (tmp_path / "secret.txt").write_text(CANARY)
    async with serving(client, exporter) as tq:
        paused = await Runner.run(
            exporter, "export acme", client=client, task_queue=tq, serve=False
        )
        [call] = paused.interruptions
        handle: WorkflowHandle[Any, RunOutput] = client.get_workflow_handle(
            paused.workflow_id, result_type=RunOutput
        )
        forged = {
            "traversal": {"sha256": "../secret.txt"},
            "missing": {"sha256": "0" * 64},
            "elsewhere": {"bucket": "b", "key": "k"},
        }
        for why, claim in forged.items():
            ref = raw.storage_reference("hitl-file", claim)
            answer = await raw.update(client, handle.id, "approve", [ref])
            assert not answer.ok and answer.type == "InvalidDecision", (why, answer)
            assert "stored payload" in answer.message or "storage reference" in answer.message
            assert CANARY not in answer.message
            sent = await raw.signal(client, handle.id, "approve", [ref])
            assert sent.ok, (why, sent)
        status = await handle.query("status", result_type=RunStatus)
        assert [p.call_id for p in status.pending] == [call.call_id]
        assert len(status.refused) == len(forged) and all(
            r.error_type == "InvalidDecision" for r in status.refused
        )
        assert CANARY not in json.dumps([r.model_dump(mode="json") for r in status.refused])
        await handle.execute_update("approve", DecisionInput(call_id=call.call_id))
        out = await handle.result()
    assert out.final_output.startswith("exported")
    assert raw.task_failures(await handle.fetch_history()) == []
    assert ledger.count("export_report") == 1
