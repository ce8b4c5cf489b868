"""Checks that mutation testing found unguarded, on the real dev server.

Each test fails when the check it names is taken out of the code:

- a nested run keeps its parent link when it continues as new while parked
  (`parent=inp.parent` in `AgentRun._continue_as_new`);
- a second `resolve` in the same workflow task is refused (`or rec.uncertain.resolution is not
  None` in `workflows/uncertain.py` `check`);
- a store failing with something other than an OSError gives the run a stand-in
  (`BlobStore._read` catching any exception, and `HitlDataConverter` behind it).

Note on the first: a parked nested run that continues as new while it is reading the root's
mail (its `read_run` activity in flight) starts its next run without reading it again, and the
root does not signal again: the decision never reaches it. The test keeps the threshold high
enough that the continued run does not continue again when the decision arrives.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowUpdateFailedError

from hitl import (
    Agent,
    ModelReply,
    ModelRequest,
    RunConfig,
    Runner,
    ScriptedModel,
    ToolContext,
    function_tool,
)
from hitl.client import data_converter
from hitl.storage import BlobStore, external_storage
from hitl.wire import (
    DecisionInput,
    DecisionRecord,
    Resolution,
    ResolveInput,
    RunOutput,
    RunStatus,
    WaitInput,
)
from hitl.worker.devserver import DevServer
from tests.helpers import (
    Ledger,
    WorkerProcess,
    history,
    queue_name,
    record_effect,
    serving,
    tool_activity_count,
    wait_for,
)
from tests.hostile import raw
from tests.hostile.agents import gate
from tests.workflows.test_invariants import refused_type
from tests.workflows.test_uncertain import payer

PAYER = "tests.workflows.test_uncertain:payer"

# ----------------------------------------------------------------------------- nested compaction


@function_tool(needs_approval=True)
def stamp(ctx: ToolContext[object], doc: str) -> str:
    """Stamp a document.

    Args:
        doc: The document.
    """
    record_effect(ctx, "stamp")
    return f"stamped {doc}"


def stamper_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("stamp")
    if done:
        return ModelReply.say(done[0].output or "")
    return ModelReply.call("stamp", {"doc": req.last_user_text()})


def office_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("stamping")
    if done:
        return ModelReply.say(done[0].output or "")
    return ModelReply.call("stamping", {"input": "lease"})


stamper = Agent(name="Stamper", tools=[stamp], model=ScriptedModel(stamper_script, "t.g.stamp"))
stamp_office = Agent(
    name="Stamp office",
    tools=[stamper.as_tool(tool_name="stamping")],
    model=ScriptedModel(office_script, "t.g.office"),
)


@pytest.mark.parametrize("threshold", [30, 10])
async def test_a_nested_run_that_continues_as_new_while_parked_keeps_its_root(
    dev_client: Client, ledger: Ledger, threshold: int
) -> None:
    """With 10, the lowest threshold, the nested run also wants to continue as new while it
    reads the root's decision: it does not, and a continued run reads its mail at start (the
    decision was once lost)."""
    client = dev_client
    async with serving(client, stamp_office) as tq:
        result = await Runner.run(
            stamp_office,
            "go",
            client=client,
            task_queue=tq,
            serve=False,
            # Low enough for a few refused signals to push the parked nested run over it, high
            # enough that the run it continues as does not continue again when the root's
            # decision reaches it (see the note in the module docstring).
            run_config=RunConfig(continue_as_new_after_events=threshold),
        )
        [item] = result.interruptions
        root = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        head, nested_call = item.call_id.split("/")
        child_id = f"{result.workflow_id}--{head}"
        child = client.get_workflow_handle(child_id)
        first = (await child.describe()).run_id
        # Refused signals grow the parked nested run's history until it continues as new.
        for _ in range(30):
            await child.signal("approve", DecisionInput(call_id="no-such-call"))
            await asyncio.sleep(0.2)
            if (await child.describe()).run_id != first:
                break
        await wait_for(
            lambda: _continued(client, child_id, first), what="the nested run to continue as new"
        )
        # Its new run still answers to the root: it refuses a decision sent to it...
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await child.execute_update("approve", DecisionInput(call_id=nested_call))
        assert refused_type(err) == "NotRoot"

        async def listed_at_the_root() -> bool:
            status = await root.query("status", result_type=RunStatus)
            return [p.call_id for p in status.pending] == [item.call_id]

        await wait_for(listed_at_the_root, what="the pending call to be listed at the root")
        # ...and takes the root's decision.
        await root.execute_update(
            "approve",
            DecisionInput(call_id=item.call_id, approver="ops"),
            result_type=DecisionRecord,
        )
        # The decision reaches the nested run: its call runs (it was once lost on the way).
        await wait_for(lambda: ledger.count("stamp") == 1, what="the nested call to run")
        try:
            out = await asyncio.wait_for(root.result(), 30)
        except TimeoutError:  # seen once in CI: say what each history holds
            raise AssertionError(await _histories(client, [root.id, child_id])) from None
    assert out.final_output == "stamped lease" and ledger.count("stamp") == 1


async def _histories(client: Client, workflow_ids: list[str]) -> str:
    """Each run's events (type names, with each workflow task failure's message)."""
    lines = []
    for wid in workflow_ids:
        async for w in client.list_workflows(f"WorkflowId = '{wid}'"):
            hist = await client.get_workflow_handle(wid, run_id=w.run_id).fetch_history()
            names = [EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in hist.events]
            status = w.status.name if w.status else "?"
            lines.append(f"{wid} {w.run_id} {status}: {' '.join(names)}")
            lines += [f"  task failed: {m}" for m in raw.task_failures(hist)]
    return "the root did not finish in 30 s\n" + "\n".join(lines)


async def _continued(client: Client, workflow_id: str, first: str) -> bool:
    latest = (await client.get_workflow_handle(workflow_id).describe()).run_id
    return latest != first


# ----------------------------------------------------------------------------- two resolves


async def test_two_resolves_in_one_workflow_task_one_wins(
    dev_client: Client, dev_server: DevServer, ledger: Ledger
) -> None:
    """Both arrive while the worker is down, so the next workflow task takes both: the first
    settles the call, the second is refused (`NotPending`), though the call's state moves on
    only later in that task (RELIABILITY.md, item 4)."""
    client = dev_client
    tq = queue_name("resolve2")
    worker = WorkerProcess(dev_server.address, tq, agents=PAYER).start()
    try:
        result = await Runner.run(payer, "pay", client=client, task_queue=tq, serve=False)
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        call_id = result.interruptions[0].call_id
        await handle.execute_update("approve", DecisionInput(call_id=call_id, approver="ann"))

        async def uncertain() -> bool:
            status = await handle.query("status", result_type=RunStatus)
            return [p.kind for p in status.pending] == ["uncertain"]

        await wait_for(uncertain, what="the call to become uncertain")
    finally:
        worker.kill()
    sends = [
        asyncio.create_task(
            handle.execute_update(
                "resolve",
                ResolveInput(call_id=call_id, outcome=outcome, approver="ops", output=text),
                id=f"resolve-{outcome}",
                result_type=Resolution,
            )
        )
        for outcome, text in (("happened", "paid (ref 1)"), ("give_up", None))
    ]
    await asyncio.sleep(1.0)  # both wait at the server
    with WorkerProcess(dev_server.address, tq, agents=PAYER):
        answers = await asyncio.wait_for(asyncio.gather(*sends, return_exceptions=True), 60)
        out = await asyncio.wait_for(handle.result(), 60)
    taken = [a for a in answers if isinstance(a, Resolution)]
    refused = [a for a in answers if isinstance(a, WorkflowUpdateFailedError)]
    assert len(taken) == 1 and len(refused) == 1, answers
    assert getattr(refused[0].cause, "type", None) == "NotPending"
    hist = await history(handle)
    resolves = [
        e
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        and e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        == "resolve"
    ]
    assert len(resolves) == 1, "one resolution in history"
    expected = "paid (ref 1)" if taken[0].outcome == "happened" else "pay could not be"
    assert out.final_output.startswith(expected)
    assert tool_activity_count(hist) == 1
    assert ledger.count("pay") == 1


# ----------------------------------------------------------------------------- a broken store


class ConfusedStore(BlobStore):
    """A store whose client fails with something other than an OSError."""

    def name(self) -> str:
        return "hitl-file"

    def where(self) -> str:
        return "confused://"

    async def put(self, digest: str, data: bytes) -> None:
        raise RuntimeError("the client library is confused")

    async def get(self, digest: str) -> bytes | None:
        raise RuntimeError("the client library is confused")


async def test_a_store_that_raises_gives_the_run_a_stand_in(
    dev_server: DevServer, ledger: Ledger, tmp_path: Path
) -> None:
    client = await Client.connect(
        dev_server.address,
        data_converter=data_converter(storage=external_storage(ConfusedStore(), 1 << 20)),
    )
    async with serving(client, gate) as tq:
        handle = await client.start_workflow(
            "AgentRun",
            {"agent": "Gate desk", "input": "wire"},
            id=f"confused-{tq}",
            task_queue=tq,
            result_type=RunOutput,
        )
        status: Any = await handle.execute_update("wait", WaitInput(), result_type=RunStatus)
        [pending] = status.pending
        ref = raw.storage_reference("hitl-file", {"sha256": "1" * 64})
        answer = await raw.update(client, handle.id, "approve", [ref])
        assert not answer.ok and answer.type == "InvalidDecision", answer
        assert "RuntimeError" in answer.message
        assert (await raw.signal(client, handle.id, "approve", [ref])).ok
        status = await handle.query("status", result_type=RunStatus)
        assert [r.error_type for r in status.refused] == ["InvalidDecision"]
        assert raw.task_failures(await history(handle)) == [], "no workflow task failed"
        await handle.execute_update("approve", DecisionInput(call_id=pending.call_id))
        out = await handle.result()
    assert out.final_output == "wired $250" and ledger.count("wire") == 1
