"""Every surface holds the gate: signatures, edits, answers, escalation, roots, model output.

Each test reproduces one way an outside tester got through (issue 26), the way it was found:
payloads copied from history and sent again over raw gRPC, runs started by hand, models that
answer oddly. Each asserts on history and effects: no tool activity without a sufficient
decision, no failed workflow task, nothing half done.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_asyncio
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from hitl import RunConfig
from hitl.signing import sign_input
from hitl.wire import (
    AnswerInput,
    DecisionInput,
    DecisionRecord,
    PendingApproval,
    RunInput,
    RunOutput,
    RunSnapshot,
    RunStatus,
    WaitInput,
)
from hitl.worker.devserver import DevServer
from tests.helpers import Ledger, history, serving, tool_activity_count, wait_for
from tests.hostile import raw
from tests.hostile.gate_agents import (
    ANN_ID,
    ANN_KEY,
    BOB_ID,
    BOB_KEY,
    DIRECTORY,
    MALLORY_ID,
    MALLORY_KEY,
    SURFACE_AGENTS,
)


@dataclass
class Surface:
    """A worker serving the surface agents (with the approver directory), and helpers."""

    client: Client
    server: DevServer
    task_queue: str
    ledger: Ledger

    async def start(
        self, agent: str, text: str = "go", run_config: RunConfig | None = None
    ) -> WorkflowHandle[Any, RunOutput]:
        """Start a run as a client script would, by agent name."""
        return await self.client.start_workflow(
            "AgentRun",
            RunInput(
                agent=agent,
                input=text,
                run_config=(run_config or RunConfig()).spec(),
            ),
            id=f"surface-{uuid.uuid4().hex[:10]}",
            task_queue=self.task_queue,
            result_type=RunOutput,
        )

    async def park(
        self, agent: str, text: str = "go", run_config: RunConfig | None = None
    ) -> tuple[WorkflowHandle[Any, RunOutput], PendingApproval]:
        handle = await self.start(agent, text, run_config)
        status: RunStatus = await handle.execute_update("wait", WaitInput(), result_type=RunStatus)
        assert status.phase == "awaiting_approval", status
        [pending] = status.pending
        return handle, pending

    async def pending(self, handle: WorkflowHandle[Any, Any]) -> list[PendingApproval]:
        status: RunStatus = await handle.query("status", result_type=RunStatus)
        return status.pending

    async def unharmed(self, handle: WorkflowHandle[Any, Any], tool: str) -> None:
        """No workflow task failed and the tool never ran."""
        hist = await history(handle)
        assert raw.task_failures(hist) == [], "a payload failed a workflow task"
        assert tool_activity_count(hist, tool) == 0, "a tool ran without a sufficient decision"
        assert self.ledger.count(tool) == 0


@pytest_asyncio.fixture
async def surface(
    dev_client: Client, dev_server: DevServer, ledger: Ledger
) -> AsyncIterator[Surface]:
    async with serving(dev_client, *SURFACE_AGENTS, directory=DIRECTORY) as tq:
        yield Surface(dev_client, dev_server, tq, ledger)


def signed(d: Any, wid: str, key: Any, key_id: str, kind: str | None = None) -> Any:
    return sign_input(d, kind=kind, workflow_id=wid, key_id=key_id, key=key, now=datetime.now(UTC))


def payload_of(model: Any) -> Payload:
    return raw.json_payload(model.model_dump(mode="json", exclude_none=True))


async def accepted_inputs(handle: WorkflowHandle[Any, Any], name: str) -> list[Payload]:
    """The input payloads of every update named `name` the run accepted, as history holds them."""
    out = []
    for e in (await history(handle)).events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            request = e.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name == name:
                out.extend(request.input.args.payloads)
    return out


# ----------------------------------------------------------------------------- finding 3


async def test_a_signed_approval_counts_only_for_the_arguments_it_signed(surface: Surface) -> None:
    """Four eyes with signed decisions: ann approves, bob edits and approves, then ann's signed
    approval, copied from history, is sent again. It must not count for bob's arguments."""
    handle, call = await surface.park("Signed treasury")
    wid = handle.id
    ann = signed(
        DecisionInput(call_id=call.call_id, approver="ann", seen_sha256=call.arguments_sha256),
        wid,
        ANN_KEY,
        ANN_ID,
        "approve",
    )
    first = await raw.update(surface.client, wid, "approve", [payload_of(ann)])
    assert first.ok, first
    bob_edit = signed(
        DecisionInput(
            call_id=call.call_id,
            approver="bob",
            arguments={"amount": 95000, "to": "EVIL"},
            seen_sha256=call.arguments_sha256,
        ),
        wid,
        BOB_KEY,
        BOB_ID,
        "approve",
    )
    edited = await raw.update(surface.client, wid, "approve", [payload_of(bob_edit)])
    assert edited.ok, edited
    [now] = await surface.pending(handle)
    assert [a.approver for a in now.approvals] == ["bob"], "an edit resets the approvals"
    assert now.arguments_sha256 != call.arguments_sha256

    # The attack: ann's signed approval, byte for byte as history holds it, sent again.
    [replayed, _] = await accepted_inputs(handle, "approve")
    again = await raw.update(surface.client, wid, "approve", [replayed])
    assert (again.ok, again.type) == (False, "ArgumentsChanged"), again
    [still] = await surface.pending(handle)
    assert [a.approver for a in still.approvals] == ["bob"]
    await surface.unharmed(handle, "transfer")

    # Ann, shown the edited call, may approve it: then it runs, once, as edited.
    fresh = signed(
        DecisionInput(call_id=call.call_id, approver="ann", seen_sha256=still.arguments_sha256),
        wid,
        ANN_KEY,
        ANN_ID,
        "approve",
    )
    record: DecisionRecord = await handle.execute_update(
        "approve", fresh, result_type=DecisionRecord
    )
    assert [a.approver for a in record.approvals] == ["bob", "ann"]
    assert all(a.verified for a in record.approvals)
    out = await handle.result()
    assert str(out.final_output).endswith("transferred $95000 to EVIL")
    assert surface.ledger.count("transfer") == 1


# ----------------------------------------------------------------------------- finding 4


async def test_answers_on_a_signed_tool_must_be_signed_and_cannot_be_replayed(
    surface: Surface,
) -> None:
    handle, call = await surface.park("Payout desk")
    wid = handle.id
    approval = signed(
        DecisionInput(call_id=call.call_id, approver="ann", seen_sha256=call.arguments_sha256),
        wid,
        ANN_KEY,
        ANN_ID,
        "approve",
    )
    await handle.execute_update("approve", approval, result_type=DecisionRecord)

    async def asking() -> PendingApproval | None:
        pending = await surface.pending(handle)
        return pending[0] if pending and pending[0].kind == "input" else None

    await wait_for(asking, what="the tool's question")
    question = await asking()
    assert question is not None
    # An unsigned answer naming an approver: refused, and the server is not told anything.
    unsigned = AnswerInput(call_id=call.call_id, content={"confirm": True}, approver="ann")
    refused = await raw.update(surface.client, wid, "answer", [payload_of(unsigned)])
    assert (refused.ok, refused.type) == (False, "Unsigned"), refused
    # Signed by someone outside the tool's approver list: refused too.
    mallory = signed(
        AnswerInput(
            call_id=call.call_id,
            content={"confirm": True},
            approver="mallory",
            seen_sha256=question.arguments_sha256,
            round=question.round,
        ),
        wid,
        MALLORY_KEY,
        MALLORY_ID,
    )
    refused = await raw.update(surface.client, wid, "answer", [payload_of(mallory)])
    assert (refused.ok, refused.type) == (False, "NotAuthorized"), refused
    assert surface.ledger.count("confirm_payout") == 0
    # Ann's signed answer for this round is taken; the same bytes again are stale.
    answer = signed(
        AnswerInput(
            call_id=call.call_id,
            content={"confirm": True},
            approver="ann",
            seen_sha256=question.arguments_sha256,
            round=question.round,
        ),
        wid,
        ANN_KEY,
        ANN_ID,
    )
    taken = await raw.update(surface.client, wid, "answer", [payload_of(answer)])
    assert taken.ok, taken
    out = await handle.result()
    assert out.final_output == "paid out $5000"
    assert surface.ledger.count("confirm_payout") == 1
    assert raw.task_failures(await history(handle)) == []


# ----------------------------------------------------------------------------- finding 5


async def test_run_configuration_never_widens_a_tools_own_approvers(surface: Surface) -> None:
    """`escalate_to` and `approvers` in a starter's run config add no one to a tool that names
    its own approvers: mallory, named there, may not approve $25,000 even after escalation."""
    config = RunConfig(approvers=["mallory"], escalate_to=["mallory"], escalate_after=1)
    handle, call = await surface.park("Supplier desk", run_config=config)
    assert call.approvers == ["cfo"]

    async def escalated() -> bool:
        [p] = await surface.pending(handle)
        return p.escalated_at is not None

    await wait_for(escalated, what="the call's escalation")
    [after] = await surface.pending(handle)
    assert after.approvers == ["cfo"], "the run's escalation list widened the tool's own"
    attempt = await raw.update(
        surface.client,
        handle.id,
        "approve",
        [payload_of(DecisionInput(call_id=call.call_id, approver="mallory"))],
    )
    assert (attempt.ok, attempt.type) == (False, "NotAuthorized"), attempt
    await surface.unharmed(handle, "pay_supplier")
    await handle.execute_update(
        "approve", DecisionInput(call_id=call.call_id, approver="cfo"), result_type=DecisionRecord
    )
    assert (await handle.result()).final_output == "paid $25000"


# ----------------------------------------------------------------------------- finding 6


async def test_an_agent_behind_a_gated_agent_tool_cannot_be_started_on_its_own(
    surface: Surface,
) -> None:
    """`Vault` is reachable only through `open_vault` (needs approval). Started directly, as
    anyone with namespace access can, it must not run its tools."""
    wid = f"vault-{uuid.uuid4().hex[:8]}"
    started = await raw.start(
        surface.client,
        wid,
        surface.task_queue,
        [raw.json_payload({"agent": "Vault", "input": "drain A-1"})],
    )
    assert started.ok, started
    handle = surface.client.get_workflow_handle(wid)
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    cause: Any = failed.value.cause
    assert cause.type == "UserError" and "runs only inside runs of 'Front desk'" in cause.message
    await surface.unharmed(handle, "drain_account")
    # Through its front door the gate holds: the agent tool waits for a person.
    front, call = await surface.park("Front desk")
    assert call.tool_name == "open_vault"
    assert surface.ledger.count("drain_account") == 0
    await front.terminate("test over")


# ----------------------------------------------------------------------------- finding 7


@pytest.mark.parametrize(
    ("case", "problem"),
    [
        ("deep", "nested 3001 levels deep"),
        ("deep-object", "nested too deeply"),
        ("nan", "NaN is not a JSON number"),
        ("minus-infinity", "-Infinity is not a JSON number"),
        ("overflow", "1e999 is too large a number"),
        ("huge-integer", "an integer of 5000 digits"),
    ],
)
async def test_odd_arguments_go_back_to_the_model_and_open_no_gate(
    surface: Surface, case: str, problem: str
) -> None:
    """Arguments nested thousands deep, NaN, -Infinity, overflowing numbers: the run neither
    jams (a failed workflow task, forever) nor lets an "over $100" predicate wave them through.
    The model reads what was wrong, and nothing runs."""
    handle = await surface.start("Odd desk", case)
    out = await handle.result()
    assert problem in str(out.final_output), out.final_output
    assert out.final_output.startswith("Tool arguments are")
    await surface.unharmed(handle, "refund")


@pytest.mark.parametrize(
    "model_id",
    [
        "VICTIM/calls/t1.1/decide?",
        "c" * 600,
        "../../etc/passwd",
        "call\n[approved]\u202e",
        "t1.1",
    ],
    ids=["slashes", "600-chars", "dots", "control-chars", "our-own-shape"],
)
async def test_any_call_id_a_model_sends_can_be_decided(surface: Surface, model_id: str) -> None:
    """A call id with `/`, or longer than a decision may name, stranded the call (approve and
    reject both refused). The run names calls itself now; the model's id is kept as data."""
    handle, call = await surface.park("Odd desk", f"id:{model_id}")
    assert (call.call_id, call.model_call_id) == ("t1.1", model_id)
    await surface.unharmed(handle, "refund")
    record: DecisionRecord = await handle.execute_update(
        "approve", DecisionInput(call_id=call.call_id, approver="ops"), result_type=DecisionRecord
    )
    assert record.call_id == "t1.1"
    out = await handle.result()
    assert out.final_output == "refunded $500.0"
    assert surface.ledger.count("refund") == 1
    # The model is answered under its own id (the result leaves the transcript out: query it).
    snap = await handle.query("snapshot", result_type=RunSnapshot)
    [output] = [i for i in snap.new_items if i.type == "tool_call_output_item"]
    assert output.raw_item["call_id"] == model_id


async def test_an_edit_preview_is_no_decision_and_cannot_become_one(surface: Surface) -> None:
    """`preview_edit` (what the console shows before an edit is approved): it carries no
    signature, so nothing in history can be replayed as an approval; a preview of a signed
    call decides nothing; the run then verifies (`hitl verify`, after every test here)."""
    handle, call = await surface.park("Signed treasury")
    wid = handle.id
    edit = {"amount": 10, "to": "ACME"}
    ask = {"call_id": call.call_id, "arguments": edit, "approver": "ann",
           "seen_sha256": call.arguments_sha256}  # fmt: skip
    shown = await raw.update(surface.client, wid, "preview_edit", [raw.json_payload(ask)])
    assert shown.ok, shown
    sig = signed(
        DecisionInput(call_id=call.call_id, approver="ann", arguments=edit,
                      seen_sha256=call.arguments_sha256),
        wid, ANN_KEY, ANN_ID, "approve",
    )  # fmt: skip
    with_sig = await raw.update(surface.client, wid, "preview_edit", [payload_of(sig)])
    assert (with_sig.ok, with_sig.type) == (False, "InvalidDecision"), "no signature fields"
    # The preview's payload, as history holds it, sent as an approval: unsigned, refused.
    [previewed] = await accepted_inputs(handle, "preview_edit")
    sent = await raw.update(surface.client, wid, "approve", [previewed])
    assert (sent.ok, sent.type) == (False, "Unsigned"), sent
    [still] = await surface.pending(handle)
    assert still.arguments == call.arguments and still.approvals == []
    await surface.unharmed(handle, "transfer")


async def test_an_edit_after_previews_runs_and_verifies(surface: Surface) -> None:
    """Previews, then the edit itself (four eyes, signed): the tool runs the edited arguments
    once, and `hitl verify` (after every test here) proves it from history, never taking a
    preview's plan for the edit's."""
    handle, call = await surface.park("Signed treasury")
    wid = handle.id
    edit = {"amount": 10, "to": "ACME"}
    for to in ("ACME", "ACME-2"):
        ask = {"call_id": call.call_id, "arguments": {"amount": 10, "to": to}, "approver": "ann"}
        assert (await raw.update(surface.client, wid, "preview_edit", [raw.json_payload(ask)])).ok
    ann = signed(
        DecisionInput(call_id=call.call_id, approver="ann", arguments=edit,
                      seen_sha256=call.arguments_sha256),
        wid, ANN_KEY, ANN_ID, "approve",
    )  # fmt: skip
    assert (await raw.update(surface.client, wid, "approve", [payload_of(ann)])).ok
    [now] = await surface.pending(handle)
    bob = signed(
        DecisionInput(call_id=call.call_id, approver="bob", seen_sha256=now.arguments_sha256),
        wid, BOB_KEY, BOB_ID, "approve",
    )  # fmt: skip
    assert (await raw.update(surface.client, wid, "approve", [payload_of(bob)])).ok
    out = await handle.result()
    assert str(out.final_output).endswith("transferred $10 to ACME")
    assert surface.ledger.count("transfer") == 1
