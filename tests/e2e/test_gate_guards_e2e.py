"""Guards of the approval gate that a mutation run broke without the suite noticing.

On the real dev server: encryption configured the documented way (`HITL_ENCRYPTION_KEY` alone,
in a worker subprocess and a client built by `connect()`), and approver lists of nested calls,
which are decided at the root.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory, WorkflowUpdateFailedError

from hitl import (
    Agent,
    ModelReply,
    ModelRequest,
    NotAuthorizedError,
    Runner,
    ScriptedModel,
    ToolContext,
    function_tool,
)
from hitl.client import connect
from hitl.codec import ENCODING, KEY_ENV, EncryptionCodec, new_key
from hitl.wire import DecisionInput, RunOutput, RunStatus
from hitl.worker.devserver import DevServer
from tests.agents import support_agent
from tests.helpers import (
    Ledger,
    WorkerProcess,
    activity_count,
    payload_texts,
    queue_name,
    record_effect,
    serving,
    temporal_cli,
)

# ----------------------------------------------------------------------------- encryption by env


def _payloads_by_event(hist: WorkflowHistory) -> dict[str, list[Payload]]:
    """The payloads of the events that carry a run's data, by who wrote them."""
    out: dict[str, list[Payload]] = {
        "client": [],
        "workflow": [],
        "tool": [],
        "model": [],
    }
    execute_tool: set[int] = set()
    for e in hist.events:
        t = e.event_type
        if t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            out["client"] += e.workflow_execution_started_event_attributes.input.payloads
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            accepted = e.workflow_execution_update_accepted_event_attributes
            out["client"] += accepted.accepted_request.input.args.payloads
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = e.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "execute_tool":
                execute_tool.add(e.event_id)
                out["workflow"] += attrs.input.payloads
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = e.activity_task_completed_event_attributes
            if attrs.scheduled_event_id in execute_tool:
                out["tool"] += attrs.result.payloads
        elif (
            t == EventType.EVENT_TYPE_MARKER_RECORDED
            and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
        ):
            # Local activities (the scripted model): their results, recorded by the worker. (The
            # marker's `data` is the SDK's own bookkeeping: activity id and type, in clear.)
            out["model"] += e.marker_recorded_event_attributes.details["result"].payloads
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            out["workflow"] += e.workflow_execution_completed_event_attributes.result.payloads
    return out


def _encodings(payloads: Iterable[Payload]) -> set[bytes]:
    return {p.metadata.get("encoding", b"") for p in payloads}


async def test_encryption_key_from_the_environment_alone_encrypts_worker_and_client(
    dev_server: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches the codec built from `HITL_ENCRYPTION_KEY` being dropped (the documented set-up:
    the variable on the worker and the client, no codec passed in code). Every other encryption
    test passes a codec explicitly, so without this one the run would quietly store tool
    arguments and outputs in clear."""
    key = new_key()
    monkeypatch.setenv(KEY_ENV, key)  # the client below reads it, as `hitl` and scripts do
    canary = f"CANARY-{uuid.uuid4().hex}"
    tq = queue_name("enc-env")
    # A worker process configured only through its environment.
    with WorkerProcess(
        dev_server.address, tq, agents="tests.agents:support_agent", env={KEY_ENV: key}
    ):
        client = await connect(address=dev_server.address)
        result = await asyncio.wait_for(
            Runner.run(
                support_agent,
                f"email them a refund notice: card {canary}",
                client=client,
                task_queue=tq,
                serve=False,
            ),
            30,
        )
        [item] = result.interruptions
        assert item.name == "send_email" and canary in item.arguments, "the key holder reads it"
        state = result.to_state()
        state.approve(item, approver="ops")
        result = await asyncio.wait_for(
            Runner.run(support_agent, state, client=client, task_queue=tq, serve=False),
            30,
        )
    assert result.final_output == "send_email: Sent 'Refund for your order'"
    wid = result.workflow_id

    # What the server stores, read with no codec at all: the `temporal` CLI...
    shown = await asyncio.to_thread(
        temporal_cli,
        "workflow",
        "show",
        "-w",
        wid,
        "-o",
        "json",
        address=dev_server.address,
    )
    assert shown.returncode == 0, shown.stderr
    stored = payload_texts(shown.stdout)
    assert stored, "the history has payloads"
    assert canary not in shown.stdout and canary not in stored, "no tool argument in clear"
    assert "Refund for your order" not in stored, "no tool output in clear"

    # ...and a client with the default converter: each payload, by who wrote it.
    plain = await Client.connect(dev_server.address)
    hist = await plain.get_workflow_handle(wid).fetch_history()
    by_writer = _payloads_by_event(hist)
    for writer, payloads in by_writer.items():
        assert payloads, f"no {writer} payloads found"
        assert _encodings(payloads) == {ENCODING}, f"{writer} payloads are not all encrypted"
    # The worker's own writes hold the run's data, encrypted with the environment's key.
    codec = EncryptionCodec.from_env({KEY_ENV: key})
    assert codec is not None
    tool_input = await codec.decode(by_writer["workflow"][:1])
    assert canary in tool_input[0].data.decode(), "the worker encrypted the tool's arguments"
    tool_result = await codec.decode(by_writer["tool"])
    assert "Sent 'Refund for your order'" in tool_result[0].data.decode()
    with pytest.raises(Exception):  # noqa: B017 - without the key the output does not decode
        await plain.get_workflow_handle(wid, result_type=RunOutput).result()


# ----------------------------------------------------------------------------- nested approvers


@function_tool(needs_approval=True, approvers=["cfo"])
def wire_funds(ctx: ToolContext[object], amount: int) -> str:
    """Wire funds (only the CFO may decide).

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "wire_funds")
    return f"wired {amount}"


def treasury_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("wire_funds")
    if not done:
        return ModelReply.call("wire_funds", {"amount": int(req.last_user_text())})
    return ModelReply.say(done[0].output or "")


treasury = Agent(
    name="Treasury",
    tools=[wire_funds],
    model=ScriptedModel(treasury_script, "tests.gate.treasury"),
)


def front_desk_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("ask_treasury")
    if not done:
        return ModelReply.call("ask_treasury", {"input": req.last_user_text()})
    return ModelReply.say(f"treasury says: {done[0].output}")


# The agent tool starts without approval; its `wire_funds` call is decided at the root.
front_desk = Agent(
    name="Front desk",
    tools=[treasury.as_tool(tool_name="ask_treasury")],
    model=ScriptedModel(front_desk_script, "tests.gate.front_desk"),
)


async def test_nested_call_approver_list_is_enforced_at_the_root(
    dev_client: Client, cache_size: int, ledger: Ledger
) -> None:
    """Catches the root skipping the approver check for nested calls (qualified ids
    `<outer call>/<inner call>`): an "intern" could then approve a call only the CFO may decide,
    and the nested tool would run."""
    client = dev_client
    async with serving(client, front_desk, cache=cache_size) as tq:
        result = await Runner.run(front_desk, "250", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        outer, inner = item.call_id.split("/")
        assert item.name == "wire_funds" and item.agent is treasury
        root = client.get_workflow_handle(result.workflow_id)
        [pending] = (await root.query("status", result_type=RunStatus)).pending
        assert pending.approvers == ["cfo"]
        assert pending.workflow_id and outer in pending.workflow_id, "the outer call's run"
        child = client.get_workflow_handle(pending.workflow_id)

        for kind in ("approve", "reject"):
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await root.execute_update(
                    kind, DecisionInput(call_id=item.call_id, approver="intern")
                )
            assert err.value.cause.type == "NotAuthorized"  # type: ignore[union-attr]
            assert "may not decide wire_funds calls (allowed: cfo)" in str(err.value.cause)
        state = result.to_state()
        state.approve(item, approver="intern")
        with pytest.raises(NotAuthorizedError, match="may not decide wire_funds calls"):
            await Runner.run(front_desk, state, client=client, task_queue=tq, serve=False)

        # Nothing was decided, at the root or in the nested run, and the tool did not run.
        root_status = await root.query("status", result_type=RunStatus)
        assert root_status.phase == "awaiting_approval" and root_status.decisions == []
        assert [p.call_id for p in root_status.pending] == [item.call_id]
        child_status = await child.query("status", result_type=RunStatus)
        assert child_status.decisions == []
        assert [p.call_id for p in child_status.pending] == [inner]
        assert activity_count(await child.fetch_history(), "execute_tool") == 0
        assert ledger.count() == 0

        state = result.to_state()
        state.approve(item, approver="cfo")
        result = await Runner.run(front_desk, state, client=client, task_queue=tq, serve=False)

    assert result.final_output == "treasury says: wired 250"
    assert [(d.call_id, d.approver) for d in result.decisions] == [(item.call_id, "cfo")]
    child_out = await client.get_workflow_handle(
        pending.workflow_id, result_type=RunOutput
    ).result()
    assert [(d.call_id, d.approver, d.via) for d in child_out.decisions] == [(inner, "cfo", "root")]
    assert activity_count(await child.fetch_history(), "execute_tool") == 1
    assert [r[1] for r in ledger.rows()] == ["wire_funds"]
