"""`hitl verify`: proof from history alone, on the real dev server.

A four-eyes, signed call decided properly verifies OK (from Python and from the CLI); the same
history with one approval taken out, or with other arguments where the tool ran, fails that
call with a clear reason. Edits, nested runs, exit codes and `--approvers` too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory

from hitl import Agent, ModelReply, ModelRequest, Runner, ScriptedModel, ToolContext, function_tool
from hitl.cli.history import Report, load_tree, prove_tree
from hitl.cli.verify import render, verify_run
from hitl.client import data_converter
from hitl.codec import KEY_ENV, EncryptionCodec, new_key
from hitl.converter import hitl_data_converter
from hitl.signing import key_id_for, new_key_pair, sign_input
from hitl.wire import (
    ApproverDirectory,
    ApproverEntry,
    DecisionInput,
    DecisionRecord,
    ExtendInput,
    RunOutput,
    RunStatus,
    text_digest,
)
from hitl.worker.devserver import DevServer
from tests.e2e.cli_support import hitl
from tests.helpers import ROOT, Ledger, record_effect, serving

ANN_KEY, ANN_PUBLIC = new_key_pair()
BOB_KEY, BOB_PUBLIC = new_key_pair()
ANN_ID, BOB_ID = key_id_for(ANN_PUBLIC), key_id_for(BOB_PUBLIC)
DIRECTORY = ApproverDirectory(
    approvers={
        "ann": ApproverEntry(groups=["finance"], keys={ANN_ID: ANN_PUBLIC}),
        "bob": ApproverEntry(groups=["finance"], keys={BOB_ID: BOB_PUBLIC}),
    }
)


@function_tool(
    needs_approval=True, required_approvals=2, signed_decisions=True, approvers=["group:finance"]
)
def vault_pay(ctx: ToolContext[object], amount: int) -> str:
    """Pay from the vault (two people of finance, signed).

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "vault_pay")
    return f"paid ${amount}"


def vault_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("vault_pay")
    if done:
        return ModelReply.say(done[0].output or "")
    return ModelReply.call("vault_pay", {"amount": 1500})


vault = Agent(name="Vault", tools=[vault_pay], model=ScriptedModel(vault_script, "t.verify.vault"))


def desk_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("keep")
    if done:
        return ModelReply.say(done[0].output or "")
    return ModelReply.call("keep", {"input": "pay"})


vault_desk = Agent(
    name="Vault desk",
    tools=[vault.as_tool(tool_name="keep")],
    model=ScriptedModel(desk_script, "t.verify.desk"),
)


@function_tool
def look(ctx: ToolContext[object], n: int) -> str:
    """Look something up (no approval).

    Args:
        n: Which.
    """
    return f"looked {n}"


@function_tool(needs_approval=True)
def act(ctx: ToolContext[object], n: int) -> str:
    """Act (approval).

    Args:
        n: Which.
    """
    return f"acted {n}"


def busy_script(req: ModelRequest) -> ModelReply:
    """Ten turns of three calls each (two lookups and an act), then a summary."""
    turns = len(req.results_for("act"))
    if turns < 10:
        return ModelReply.calls(
            ("look", {"n": 2 * turns}), ("look", {"n": 2 * turns + 1}), ("act", {"n": turns})
        )
    return ModelReply.say("done")


busy = Agent(name="Busy", tools=[look, act], model=ScriptedModel(busy_script, "t.verify.busy"))


@function_tool(needs_approval=True, approval_timeout=3600)
def hold(ctx: ToolContext[object], order: int) -> str:
    """Hold an order (decide within the hour).

    Args:
        order: The order.
    """
    return f"held {order}"


def hold_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("hold")
    if done:
        return ModelReply.say(done[0].output or "")
    return ModelReply.call("hold", {"order": 3})


holder = Agent(name="Holder", tools=[hold], model=ScriptedModel(hold_script, "t.verify.hold"))


def signed(wid: str, d: DecisionInput, key: Any, key_id: str) -> DecisionInput:
    return sign_input(
        d, kind="approve", workflow_id=wid, key_id=key_id, key=key, now=datetime.now(UTC)
    )


async def offline(hist: WorkflowHistory, client: Client) -> Report:
    """Verify one history as it is given (nothing else fetched)."""

    async def fetch(workflow_id: str, run_id: str | None) -> tuple[str, WorkflowHistory]:
        if workflow_id == hist.workflow_id and run_id is None:
            return "run", hist
        raise LookupError(workflow_id)

    return prove_tree(await load_tree(fetch, hist.workflow_id, client.data_converter))


def without(hist: WorkflowHistory, drop: set[int]) -> WorkflowHistory:
    return WorkflowHistory(hist.workflow_id, [e for e in hist.events if e.event_id not in drop])


def update_events(hist: WorkflowHistory, approver: str) -> set[int]:
    """The acceptance and completion events of the updates an approver sent."""
    out: set[int] = set()
    ids: set[str] = set()
    for e in hist.events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            request = e.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name in ("approve", "decide"):
                payload = json.loads(request.input.args.payloads[0].data)
                if payload.get("approver") == approver:
                    out.add(e.event_id)
                    ids.add(request.meta.update_id)
    for e in hist.events:
        completed = e.workflow_execution_update_completed_event_attributes
        if (
            e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
            and completed.meta.update_id in ids
        ):
            out.add(e.event_id)
    return out


def with_tool_arguments(hist: WorkflowHistory, arguments: str) -> WorkflowHistory:
    """The history with other arguments where the tool was scheduled."""
    events = []
    for e in hist.events:
        copy = HistoryEvent()
        copy.CopyFrom(e)
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            a = copy.activity_task_scheduled_event_attributes
            if a.activity_type.name == "execute_tool":
                value = json.loads(a.input.payloads[0].data)
                value["arguments"] = arguments
                a.input.payloads[0].data = json.dumps(value).encode()
        events.append(copy)
    return WorkflowHistory(hist.workflow_id, events)


async def park_vault(client: Client, tq: str, agent: Agent[Any] = vault) -> tuple[str, Any]:
    result = await Runner.run(agent, "pay", client=client, task_queue=tq, serve=False)
    [item] = result.interruptions
    return result.workflow_id, item


async def test_a_signed_four_eyes_call_verifies_and_a_forged_history_does_not(
    dev_client: Client, dev_server: DevServer, ledger: Ledger, tmp_path: Path
) -> None:
    client = dev_client
    async with serving(client, vault, directory=DIRECTORY) as tq:
        wid, item = await park_vault(client, tq)
        handle = client.get_workflow_handle(wid, result_type=RunOutput)
        seen = text_digest(item.arguments)
        for who, key, key_id in (("ann", ANN_KEY, ANN_ID), ("bob", BOB_KEY, BOB_ID)):
            d = DecisionInput(call_id=item.call_id, approver=who, seen_sha256=seen)
            await handle.execute_update("approve", signed(wid, d, key, key_id))
        out = await handle.result()
    assert out.final_output == "paid $1500" and ledger.count("vault_pay") == 1

    report = await verify_run(client, wid)
    assert report.ok, render([report])
    [call] = report.calls
    assert (call.call_id, call.tool, call.kind) == ("t1.1", "vault_pay", "activity")
    assert [(a.approver, a.verified, a.key_id) for a in call.verdict.approvals] == [
        ("ann", True, ANN_ID),
        ("bob", True, BOB_ID),
    ]

    # The CLI says the same, one line per call, exit 0.
    cli = hitl(dev_server.address, "verify", wid)
    assert cli.returncode == 0, cli.stderr
    lines = cli.stdout.splitlines()
    assert lines[0] == f"run {wid}: 1 run(s) read, 1 executed call(s)"
    assert lines[1].startswith(
        f"OK   t1.1  vault_pay (Vault)  approved by ann (signed key {ANN_ID[:8]}...), "
        f"bob (signed key {BOB_ID[:8]}...) for arguments sha256:{seen[:12]}..  [2 of 2]"
    ), lines[1]
    doc = json.loads(hitl(dev_server.address, "verify", wid, "--json").stdout)
    assert doc["ok"] and doc["runs"][0]["calls"][0]["approvals"][1]["signed"] is True

    # Forged: bob's approval taken out of history.
    hist = await client.get_workflow_handle(wid).fetch_history()
    forged = await offline(without(hist, update_events(hist, "bob")), client)
    [call] = forged.calls
    assert not call.verdict.ok
    assert call.verdict.reason == "only 1 valid approval(s) of 2 for the arguments that ran"
    assert [a.approver for a in call.verdict.approvals] == ["ann"]
    # Forged: the tool ran with other arguments than the two approved.
    forged = await offline(with_tool_arguments(hist, '{"amount": 99999}'), client)
    [call] = forged.calls
    assert not call.verdict.ok
    assert call.verdict.reason.startswith("the arguments that ran are not the ones approved")
    # The untouched history still proves (the forgeries above are what failed).
    assert (await offline(hist, client)).ok

    # Another directory (an operator's file): bob's key is not in it, so his signature
    # cannot be checked, and the pinned key it lacks is named. Exit 1.
    only_ann = tmp_path / "approvers.json"
    only_ann.write_text(json.dumps({"ann": {"groups": ["finance"], "keys": {ANN_ID: ANN_PUBLIC}}}))
    cli = hitl(dev_server.address, "verify", wid, "--approvers", str(only_ann))
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert "FAIL t1.1  vault_pay (Vault)  only 1 valid approval(s) of 2" in cli.stdout
    assert "UnknownKey" in cli.stdout
    assert f"note: pinned key bob: {BOB_ID} is not in the --approvers file" in cli.stdout


async def test_an_approval_counts_only_for_the_arguments_it_approved(
    dev_client: Client, ledger: Ledger
) -> None:
    """ann approves, bob edits and approves, ann approves the edit: proven for the edit. Without
    ann's second approval, the call would have run on one valid approval: FAIL, saying why."""
    client = dev_client
    async with serving(client, vault, directory=DIRECTORY) as tq:
        wid, item = await park_vault(client, tq)
        handle = client.get_workflow_handle(wid, result_type=RunOutput)
        seen = text_digest(item.arguments)
        ann = DecisionInput(call_id=item.call_id, approver="ann", seen_sha256=seen)
        await handle.execute_update("approve", signed(wid, ann, ANN_KEY, ANN_ID))
        edit = DecisionInput(
            call_id=item.call_id, approver="bob", seen_sha256=seen, arguments={"amount": 1200}
        )
        rec: DecisionRecord = await handle.execute_update(
            "approve", signed(wid, edit, BOB_KEY, BOB_ID), result_type=DecisionRecord
        )
        assert rec.still_needed == 1 and [a.approver for a in rec.approvals] == ["bob"]
        again = DecisionInput(
            call_id=item.call_id, approver="ann", seen_sha256=text_digest('{"amount":1200}')
        )
        await handle.execute_update("approve", signed(wid, again, ANN_KEY, ANN_ID))
        out = await handle.result()
    assert out.final_output.endswith("paid $1200")
    report = await verify_run(client, wid)
    assert report.ok, render([report])
    assert [a.approver for a in report.calls[0].verdict.approvals] == ["bob", "ann"]

    hist = await client.get_workflow_handle(wid).fetch_history()
    last_ann = max(update_events(hist, "ann"))
    accepted = {
        e.event_id
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        and e.event_id < last_ann
    }
    second = {max(i for i in update_events(hist, "ann") if i in accepted), last_ann}
    [call] = (await offline(without(hist, second), client)).calls
    assert not call.verdict.ok
    assert call.verdict.reason == "only 1 valid approval(s) of 2 for the arguments that ran"
    assert "ann's approval was for earlier arguments" in call.verdict.notes


async def test_a_nested_call_is_proven_by_the_decisions_made_at_the_root(
    dev_client: Client, ledger: Ledger
) -> None:
    client = dev_client
    async with serving(client, vault_desk, directory=DIRECTORY) as tq:
        wid, item = await park_vault(client, tq, vault_desk)
        assert "/" in item.call_id
        handle = client.get_workflow_handle(wid, result_type=RunOutput)
        seen = text_digest(item.arguments)
        for who, key, key_id in (("ann", ANN_KEY, ANN_ID), ("bob", BOB_KEY, BOB_ID)):
            d = DecisionInput(call_id=item.call_id, approver=who, seen_sha256=seen)
            await handle.execute_update("approve", signed(wid, d, key, key_id))
        out = await handle.result()
    assert out.final_output == "paid $1500" and ledger.count("vault_pay") == 1
    report = await verify_run(client, wid)
    assert report.ok, render([report])
    assert [(c.call_id, c.kind, c.workflow_id) for c in report.calls] == [
        ("t1.1", "agent tool", wid),
        ("t1.1/t1.1", "activity", f"{wid}--t1.1"),
    ]
    assert report.runs == 2
    # Asked about the nested run, verify proves its root.
    cli = hitl_env(dev_server_address(client), "verify", f"{wid}--t1.1")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert f"run {wid}: 2 run(s) read, 2 executed call(s)" in cli.stdout


async def test_the_deadline_verify_derives_is_the_runs(dev_client: Client) -> None:
    """The request time (the run's clock when it planned the call), the timeout and a valid
    extension give the deadline the run itself holds."""
    client = dev_client
    async with serving(client, holder) as tq:
        wid, item = await park_vault(client, tq, holder)
        handle = client.get_workflow_handle(wid, result_type=RunOutput)
        await handle.execute_update(
            "extend", ExtendInput(call_id=item.call_id, seconds=600, approver="ops")
        )
        status: RunStatus = await handle.query("status", result_type=RunStatus)
        [pending] = status.pending
        await handle.execute_update("approve", DecisionInput(call_id=item.call_id, approver="ops"))
        await handle.result()
    report = await verify_run(client, wid)
    assert report.ok, render([report])
    [call] = report.calls
    assert call.verdict.requested_at == pending.requested_at
    assert call.verdict.deadline == pending.deadline
    assert pending.deadline is not None and pending.requested_at is not None
    assert (pending.deadline - pending.requested_at).total_seconds() == 3600 + 600


async def test_encrypted_histories_are_read_with_the_key(dev_server: DevServer) -> None:
    """Through a client with the codec, verify reads what the run encrypted; without the key
    it proves nothing and says why."""
    codec = EncryptionCodec.from_env({KEY_ENV: new_key()})
    assert codec is not None
    client = await Client.connect(dev_server.address, data_converter=data_converter(codec=codec))
    async with serving(client, holder) as tq:
        wid, item = await park_vault(client, tq, holder)
        handle = client.get_workflow_handle(wid, result_type=RunOutput)
        await handle.execute_update("approve", DecisionInput(call_id=item.call_id, approver="ops"))
        await handle.result()
    assert (await verify_run(client, wid)).ok
    plain = await Client.connect(dev_server.address, data_converter=hitl_data_converter)
    blind = await verify_run(plain, wid)
    assert not blind.ok
    assert any("could not be decoded" in note for note in blind.notes), blind.notes


async def test_exit_codes_and_timing(dev_client: Client, dev_server: DevServer) -> None:
    """2 for an unknown run and an unreachable server; how long verify takes for 30 calls."""
    cli = hitl(dev_server.address, "verify", "no-such-run-anywhere")
    assert cli.returncode == 2 and "no run 'no-such-run-anywhere'" in cli.stderr
    cli = hitl_env("127.0.0.1:1", "verify", "x", env={"HITL_CONNECT_TIMEOUT": "2"})
    assert cli.returncode == 2 and "cannot connect" in cli.stderr
    cli = hitl(dev_server.address, "verify")
    assert cli.returncode == 2 and "needs a RUN or --since" in cli.stderr

    client = dev_client
    async with serving(client, busy) as tq:
        opts: dict[str, Any] = {"client": client, "task_queue": tq, "serve": False}
        result = await Runner.run(busy, "go", max_turns=20, **opts)
        while result.interruptions:
            state = result.to_state()
            for i in result.interruptions:
                state.approve(i, approver="ops")
            result = await Runner.run(busy, state, max_turns=20, **opts)
    began = time.monotonic()
    report = await verify_run(client, result.workflow_id)
    took = time.monotonic() - began
    assert report.ok and len(report.calls) == 30, render([report])
    print(f"verify: {len(report.calls)} executed calls in {took * 1000:.0f} ms")
    assert took < 10
    cli = hitl(dev_server.address, "verify", "--since", "1h")
    assert cli.returncode in (0, 1), cli.stderr
    assert f"run {result.workflow_id}: 1 run(s) read, 30 executed call(s)" in cli.stdout


def dev_server_address(client: Client) -> str:
    return client.service_client.config.target_host


def hitl_env(
    address: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hitl.cli", "--address", address, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
