"""The trust-boundary reproductions, each sent from outside the way it was found.

Every test here failed on the code before the trust-boundary work: a shell command ran on the
worker, a tool needing approval ran with no decision, an `always` rule crossed an approver list,
one decision terminated a run, one signal jammed it for good, a queued decision vanished.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.query.v1 import WorkflowQuery
from temporalio.api.workflowservice.v1 import QueryWorkflowRequest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle

from hitl.wire import RunOutput, RunStatus, WaitInput
from tests.helpers import (
    history,
    hitl_cli,
    local_markers,
    serving,
    temporal_cli,
    tool_activity_count,
    wait_for,
)
from tests.hostile import raw
from tests.hostile.agents import AGENTS
from tests.hostile.conftest import Desk

CANARY_MODULE = "tests.hostile.import_canary"


async def hitl(address: str, *args: str, timeout: float = 60) -> Any:
    """The `hitl` CLI, in a thread: the worker serving the runs lives in this event loop."""
    return await asyncio.to_thread(hitl_cli, address, *args, timeout=timeout)


async def cli(*args: str, address: str) -> Any:
    """The `temporal` CLI, in a thread (see `hitl`)."""
    return await asyncio.to_thread(temporal_cli, *args, address=address)


async def failure_of(handle: WorkflowHandle[Any, Any]) -> tuple[str | None, str]:
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    cause: Any = failed.value.cause
    return getattr(cause, "type", None), str(getattr(cause, "message", ""))


def model_calls(hist: Any) -> int:
    """Model calls a run made (scripted models run as local activities: markers)."""
    return sum(
        1 for m in local_markers(hist) if b"call_model" in m.details["data"].payloads[0].data
    )


# ----------------------------------------------------------------------------- 1. code execution


async def test_a_start_input_cannot_make_the_worker_run_code(desk: Desk, tmp_path: Path) -> None:
    pwned = tmp_path / "pwned.txt"
    imported = tmp_path / "imported.txt"
    os.environ["HITL_IMPORT_CANARY"] = str(imported)
    try:
        for field, value in (
            ("context_deserializer", "os:system"),
            ("context_type", f"{CANARY_MODULE}:Anything"),
            ("tool_error_formatter", "os:system"),
            ("call_model_input_filter", "builtins:exec"),
            ("error_handlers", {"max_turns": "os:system"}),
        ):
            wid = f"rce-{uuid.uuid4().hex[:8]}"
            start = await cli(
                "workflow",
                "start",
                "--type",
                "AgentRun",
                "--task-queue",
                desk.task_queue,
                "-w",
                wid,
                "--input",
                json.dumps(
                    {
                        "agent": "Gate desk",
                        "input": "x",
                        "context": f"id > {pwned}",
                        "run_config": {field: value},
                    }
                ),
                address=desk.server.address,
            )
            assert start.returncode == 0, start.stderr
            handle = desk.client.get_workflow_handle(wid)
            kind, message = await failure_of(handle)
            assert kind == "UserError" and "is not allowed on this worker" in message, message
            assert model_calls(await history(handle)) == 0, "it failed before doing anything"
        assert not pwned.exists(), "a shell command ran on the worker"
        assert not imported.exists(), "a module was imported because a payload named it"
        assert CANARY_MODULE not in sys.modules
    finally:
        os.environ.pop("HITL_IMPORT_CANARY", None)


async def test_a_decision_cannot_swap_in_a_context_deserializer(desk: Desk, tmp_path: Path) -> None:
    pwned = tmp_path / "pwned.txt"
    handle, call_id = await desk.park()
    payload = {
        "decisions": [],
        "context": {"value": f"id > {pwned}", "deserializer": "os:system"},
    }
    answer = await raw.update(desk.client, handle.id, "decide", [raw.json_payload(payload)])
    assert (answer.ok, answer.type) == (False, "InvalidDecision")
    assert "context deserializer" in answer.message
    await desk.still_healthy(handle, call_id)
    await desk.approve_and_finish(handle, call_id)
    assert not pwned.exists()


# ----------------------------------------------------------------------------- 2. internal fields


async def test_internal_fields_in_a_start_input_are_refused(desk: Desk) -> None:
    """A copied graph with approval "never", carried state, rules or a parent link: refused."""
    handle, call_id = await desk.park()
    hist = await history(handle)
    resolved = json.loads(
        next(
            m.details["result"].payloads[0].data
            for m in local_markers(hist)
            if b"resolve_agent" in m.details["data"].payloads[0].data
        )
    )
    graph = resolved["graph"]
    for agent in graph["agents"].values():
        for tool in agent.get("tools", []):
            tool["approval"] = "never"  # what a forger would change
    base = {"agent": "Gate desk", "input": "wire the refund"}
    forged = [
        {**base, "graph": graph},
        {**base, "graph": graph, "start_agent": graph["root"]},
        {**base, "carried": {"graph": graph, "current_agent": graph["root"]}},
        {**base, "always_rules": {"wire": "approve"}},
        # a directory naming the forger as an approver with their own key
        {**base, "directory": {"approvers": {"mallory": {"keys": {"k": "A" * 43 + "="}}}}},
        {**base, "rules": [{"agent_id": "Gate desk", "tool_name": "wire", "kind": "approve"}]},
        {
            **base,
            "graph": graph,
            "parent": {"workflow_id": handle.id, "call_id": "c", "root_workflow_id": handle.id},
        },
    ]
    for payload in forged:
        wid = f"forged-{uuid.uuid4().hex[:8]}"
        assert (await raw.start(desk.client, wid, desk.task_queue, [raw.json_payload(payload)])).ok
        forged_run = desk.client.get_workflow_handle(wid)
        kind, message = await failure_of(forged_run)
        assert kind == "UserError" and "internal" in message, message
        assert tool_activity_count(await history(forged_run)) == 0
    assert desk.ledger.count() == 0, "nothing ran without a decision"
    await desk.approve_and_finish(handle, call_id)


# ----------------------------------------------------------------------------- 3. rules


async def test_an_always_rule_does_not_cross_an_approver_list(desk: Desk) -> None:
    """The intern approves their desk's `wire` with --always; the CFO desk's `wire` (same
    name, CFO only) still waits for the CFO."""
    handle, call_id = await desk.park("Intern desk")
    addr = desk.server.address
    done = await hitl(addr, "approve", handle.id, call_id, "--always", "--as", "intern")
    assert done.returncode == 0, done.stderr
    status: RunStatus = await handle.execute_update("wait", WaitInput(), result_type=RunStatus)
    assert status.phase == "awaiting_approval"
    [cfo_call] = status.pending
    assert (cfo_call.agent_name, cfo_call.tool_name, cfo_call.approvers) == (
        "CFO desk",
        "wire",
        ["cfo"],
    )
    assert desk.ledger.count("cfo_wire") == 0, "the CFO never decided"
    refused = await hitl(addr, "approve", handle.id, cfo_call.call_id, "--as", "intern")
    assert refused.returncode == 1 and "NotAuthorized" in refused.stderr
    approved = await hitl(addr, "approve", handle.id, cfo_call.call_id, "--as", "cfo")
    assert approved.returncode == 0, approved.stderr
    out: RunOutput = await handle.result()
    assert out.final_output == "CFO wired $90000"
    sources = [(d.tool_name, d.source, d.approver) for d in out.decisions]
    assert sources == [("wire", "person", "intern"), ("wire", "person", "cfo")]


# ----------------------------------------------------------------------------- 4. sizes


@pytest.mark.parametrize("size", [1_400_000, 1_900_000])
async def test_an_oversized_decision_is_refused_and_the_run_lives_on(
    desk: Desk, tmp_path: Path, size: int
) -> None:
    handle, call_id = await desk.park()
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"call_id": call_id, "approver": "x", "reason": "r" * size}))
    sent = await cli(
        "workflow",
        "update",
        "execute",
        "-w",
        handle.id,
        "--name",
        "approve",
        "--input-file",
        str(big),
        address=desk.server.address,
    )
    assert sent.returncode == 1
    assert "InvalidDecision" in sent.stderr and "the limit is" in sent.stderr, sent.stderr
    assert len(sent.stderr.splitlines()) == 1, sent.stderr
    await desk.still_healthy(handle, call_id)
    await desk.approve_and_finish(handle, call_id)


@pytest.mark.parametrize("size", [2_100_000, 3_000_000])
async def test_an_update_over_the_payload_limit_is_refused_and_the_run_lives_on(
    desk: Desk, size: int
) -> None:
    """Past 2 MB a rejected update cannot even be answered (the answer echoes the request):
    the server refuses it to the caller, and no workflow task fails."""
    handle, call_id = await desk.park()
    big = raw.json_payload({"call_id": call_id, "reason": "r" * size})
    for name in ("approve", "decide", "wait"):
        answer = await raw.update(desk.client, handle.id, name, [big])
        assert not answer.ok and answer.rpc is not None, answer
    await desk.still_healthy(handle, call_id)
    await desk.approve_and_finish(handle, call_id)


# ----------------------------------------------------------------------------- 5. jams


@pytest.mark.parametrize(
    "signal",
    ["approve", "__hitl_child_report", "__hitl_from_root", "__temporal_workflow_stream_publish"],
)
async def test_a_signal_with_two_inputs_does_not_jam_the_run(desk: Desk, signal: str) -> None:
    handle, call_id = await desk.park()
    sent = await cli(
        "workflow",
        "signal",
        "-w",
        handle.id,
        "--name",
        signal,
        "--input",
        json.dumps({"call_id": "a"}),
        "--input",
        json.dumps({"call_id": "b"}),
        address=desk.server.address,
    )
    assert sent.returncode == 0, sent.stderr
    # The run handled it (an approve signal leaves a record), and still answers.
    if signal == "approve":
        await wait_for(
            lambda: _refused(handle), what="the two-input signal to be recorded as refused"
        )
        status: RunStatus = await handle.query("status", result_type=RunStatus)
        assert "takes one JSON object, got 2 inputs" in status.refused[-1].message
    else:
        await _a_task_after_the_signal(handle)
    await desk.still_healthy(handle, call_id)
    await desk.approve_and_finish(handle, call_id)


async def _refused(handle: WorkflowHandle[Any, Any]) -> bool:
    status: RunStatus = await handle.query("status", result_type=RunStatus)
    return bool(status.refused)


async def _a_task_after_the_signal(handle: WorkflowHandle[Any, Any]) -> None:
    """Wait until a workflow task completed after the last signal (the run processed it)."""

    async def processed() -> bool:
        events = (await history(handle)).events
        last_signal = max(
            i
            for i, e in enumerate(events)
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        )
        return any(
            e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
            for e in events[last_signal:]
        )

    await wait_for(processed, what="the run to process the signal")


@pytest.mark.parametrize("inputs", [[], ["{}", "{}"]], ids=["no-input", "two-inputs"])
async def test_a_start_with_no_input_or_two_fails_typed(desk: Desk, inputs: list[str]) -> None:
    wid = f"arity-{uuid.uuid4().hex[:8]}"
    args = [a for i in inputs for a in ("--input", i)]
    start = await cli(
        "workflow",
        "start",
        "--type",
        "AgentRun",
        "--task-queue",
        desk.task_queue,
        "-w",
        wid,
        *args,
        address=desk.server.address,
    )
    assert start.returncode == 0, start.stderr
    handle = desk.client.get_workflow_handle(wid)
    kind, message = await failure_of(handle)
    assert kind == "UserError" and "takes one JSON object" in message, message
    assert raw.task_failures(await history(handle)) == []


# ----------------------------------------------------------------------------- 6. deadlines


async def test_a_queued_decision_that_misses_its_deadline_is_reported_and_recorded(
    dev_client: Any, dev_server: Any, ledger: Any
) -> None:
    """A decision queued while no worker runs says until when it can apply; when it arrives
    after the deadline it is refused, recorded on the run, and re-running the same command says
    so."""
    client = dev_client
    async with serving(client, *AGENTS) as tq:
        desk = Desk(client, dev_server, tq, ledger)
        handle, call_id = await desk.park("Deadline desk")
        status: RunStatus = await handle.query("status", result_type=RunStatus)
        deadline = status.pending[0].deadline
        assert deadline is not None
    # No worker runs now: the decision is queued.
    addr = dev_server.address
    cmd = ["--task-queue", tq, "approve", handle.id, call_id, "--as", "ops", "--timeout", "1"]
    queued = await hitl(addr, *cmd)
    assert queued.returncode == 1
    assert "queued" in queued.stderr and deadline.isoformat()[:19] in queued.stderr, queued.stderr
    await wait_for(lambda: datetime.now(UTC) > deadline, timeout=30, what="the deadline to pass")
    async with serving(client, *AGENTS, task_queue=tq):
        out: RunOutput = await handle.result()
        assert "expired" in str(out.final_output) or out.decisions[0].source == "deadline"
        assert [(d.source, d.kind) for d in out.decisions] == [("deadline", "expired")]
        again = await hitl(addr, *cmd)
        assert again.returncode == 1 and "DeadlinePassed" in again.stderr, again.stderr
        assert "expired at" in again.stderr and "nothing ran" in again.stderr, again.stderr
        status = await handle.query("status", result_type=RunStatus)
    [late] = status.refused
    assert (late.error_type, late.call_id, late.via) == ("DeadlinePassed", call_id, "update")
    assert late.approver == "ops", "a refused row keeps whom it named"
    assert ledger.count("wire_soon") == 0


# ----------------------------------------------------------------------------- 7-8. bounds, types


async def test_run_config_bounds_are_checked_by_the_run(desk: Desk) -> None:
    for run_config, problem in (
        ({"continue_as_new_after_events": 1}, "continue_as_new_after_events must be between"),
        ({"max_turns": 0}, "max_turns must be between"),
        ({"max_tool_output_bytes": 10**9}, "max_tool_output_bytes must be between"),
    ):
        wid = f"bounds-{uuid.uuid4().hex[:8]}"
        payload = {"agent": "Gate desk", "input": "x", "run_config": run_config}
        assert (await raw.start(desk.client, wid, desk.task_queue, [raw.json_payload(payload)])).ok
        handle = desk.client.get_workflow_handle(wid)
        kind, message = await failure_of(handle)
        assert kind == "UserError" and problem in message, message
        assert model_calls(await history(handle)) == 0


async def test_decisions_are_read_strictly_from_the_cli(desk: Desk) -> None:
    handle, call_id = await desk.park()
    addr = desk.server.address
    bad_utf8 = base64.b64encode(b'{"call_id": "\xff\xfe"}').decode()
    for args in (
        # The CLI checks JSON syntax itself; a lone surrogate passes it, and is not text.
        ["--input", '{"call_id": "\\ud800"}'],
        # Raw bytes under another encoding reach the run as they are.
        ["--input-meta", "encoding=binary/plain", "--input-base64", "--input", bad_utf8],
        ["--input", json.dumps({"call_id": call_id, "always": "yes"})],
        [],
    ):
        sent = await cli(
            "workflow",
            "update",
            "execute",
            "-w",
            handle.id,
            "--name",
            "approve",
            *args,
            address=addr,
        )
        assert sent.returncode == 1
        assert "InvalidDecision" in sent.stderr and "retryable: false" in sent.stderr, sent.stderr
        assert len(sent.stderr.strip().splitlines()) == 1, sent.stderr
    # The status payload holds lists, never nulls (the temporal CLI 1.9 prints an empty JSON
    # list as null; the payload itself is what other clients read).
    answer = await desk.client.workflow_service.query_workflow(
        QueryWorkflowRequest(
            namespace=desk.client.namespace,
            execution=WorkflowExecution(workflow_id=handle.id),
            query=WorkflowQuery(query_type="status"),
        )
    )
    status = json.loads(answer.query_result.payloads[0].data)
    assert (status["decisions"], status["refused"], status["pending"][0]["approvers"]) == (
        [],
        [],
        [],
    )
    await desk.still_healthy(handle, call_id)
    await desk.approve_and_finish(handle, call_id)


# ----------------------------------------------------------------------------- 9. visibility


async def test_a_start_cannot_plant_itself_in_the_approval_inbox(desk: Desk) -> None:
    wid = f"spoof-{uuid.uuid4().hex[:8]}"
    start = await cli(
        "workflow",
        "start",
        "--type",
        "AgentRun",
        "--task-queue",
        desk.task_queue,
        "-w",
        wid,
        "--input",
        json.dumps({"agent": "Gate desk", "input": "wire"}),
        "--search-attribute",
        'HitlStatus="awaiting_approval"',
        "--search-attribute",
        'HitlPendingTools=["transfer_everything"]',
        address=desk.server.address,
    )
    assert start.returncode == 0, start.stderr
    handle = desk.client.get_workflow_handle(wid)
    await handle.execute_update("wait", WaitInput(), result_type=RunStatus)

    async def own_values() -> bool:
        desc = await handle.describe()
        tools = desc.search_attributes.get("HitlPendingTools") or []
        return tools == ["wire"]

    await wait_for(own_values, what="the run to publish its own pending tools")
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
