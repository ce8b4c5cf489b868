"""An admin applies a new policy version to parked runs (real dev server, `hitl policy apply`).

Each run re-evaluates its pending calls, durably, and says per call why it changed; a refused
apply (not an admin, unsigned, altered, signed for another run, a publication replayed as an
apply, malformed) leaves nothing in history; a run it was not applied to keeps its version.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowUpdateFailedError

from hitl import Runner
from hitl.cli.policy_admin import apply_update
from hitl.policy import canonical, digest_of, parse_policy
from hitl.policy_signing import sign_publication
from hitl.signing import key_id_for, local_directory, new_key_pair, private_key_pem
from hitl.wire import (
    POLICY_REGISTRY_ID,
    UPDATE_APPLY_POLICY,
    ApproverDirectory,
    ApproverEntry,
    DecisionInput,
    DecisionRecord,
    PolicyChange,
    RunOutput,
    RunStatus,
)
from hitl.worker.devserver import DevServer
from hitl.worker.policy_watch import RegistryWatch
from tests.helpers import (
    Ledger,
    WorkerProcess,
    hitl_cli,
    queue_name,
    serving,
    tool_activity_count,
    wait_for,
)
from tests.workflows.test_invariants import refused_type
from tests.workflows.test_policy_registry import ready
from tests.workflows.test_policy_runs import EVERYTHING_DENIED, POLICY, desk

ADA_KEY, ADA_PUBLIC = new_key_pair()
BOB_KEY, BOB_PUBLIC = new_key_pair()
ADA_ID, BOB_ID = key_id_for(ADA_PUBLIC), key_id_for(BOB_PUBLIC)
DIRECTORY = ApproverDirectory(
    approvers={
        "ada": ApproverEntry(groups=["admins"], keys={ADA_ID: ADA_PUBLIC}),
        "bob": ApproverEntry(groups=["finance"], keys={BOB_ID: BOB_PUBLIC}),
    }
)

NEW = """
policy: desk
version: "3"
rules:
  - id: no-refunds-above-20k
    tools: [refund]
    when: [{arg: amount, gt: 20000}]
    effect: deny
    message: Refunds above $20,000 now go to the finance director.
  - id: managers-decide
    categories: [payments]
    when: [{arg: amount, gt: 1000}]
    effect: ask
    approvers: [bob, dee, eve]
    required_approvals: 2
"""


def apply_events(hist: Any) -> int:
    return sum(
        1
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        and e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        == UPDATE_APPLY_POLICY
    )


async def _status(client: Client, wid: str) -> RunStatus:
    status: RunStatus = await client.get_workflow_handle(wid).query("status", result_type=RunStatus)
    return status


async def _refused(client: Client, wid: str, payload: Any) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as err:
        await client.get_workflow_handle(wid).execute_update(
            UPDATE_APPLY_POLICY, payload, result_type=PolicyChange
        )
    return refused_type(err)


async def _hostile_applies(client: Client, a: str, c: str, path: Path) -> None:
    """Every one is refused by the validator (nothing reaches history: checked after)."""
    assert await _refused(client, a, apply_update(BOB_KEY, BOB_ID, "bob", a, str(path), None)) == (
        "NotAdmin"
    )
    unsigned = apply_update(ADA_KEY, ADA_ID, "ada", a, str(path), None)
    unsigned.signature = ""
    assert await _refused(client, a, unsigned) == "BadSignature"
    altered = apply_update(ADA_KEY, ADA_ID, "ada", a, str(path), None)
    altered.document = canonical(parse_policy(EVERYTHING_DENIED))
    assert await _refused(client, a, altered) == "BadSignature"
    for_c = apply_update(ADA_KEY, ADA_ID, "ada", c, str(path), None)
    assert await _refused(client, a, for_c) == "BadSignature"
    doc = parse_policy(NEW)
    publication = sign_publication(
        ADA_KEY, key_id=ADA_ID, admin="ada", registry_id=a, document=canonical(doc),
        digest=digest_of(doc), now=datetime.now(UTC),
    )  # fmt: skip
    assert await _refused(client, a, publication.model_dump(mode="json")) == "BadSignature"
    assert await _refused(client, a, {"policy": "desk", "version": "3"}) == "InvalidApply"
    assert await _refused(client, a, [1, 2]) == "InvalidApply"


async def test_an_admin_applies_a_version_to_parked_runs(
    dev_client: Client, dev_server: DevServer, ledger: Ledger, tmp_path: Path
) -> None:
    """A (refund $5,000, one approval given by ann) now waits for two of bob, dee and eve, and
    ann's approval no longer counts; B (refund $30,000) is rejected with the new rule's message
    and no tool runs; C, not named, keeps version 1. Applied with `hitl policy apply`."""
    client, tq = dev_client, queue_name("apply")
    path = tmp_path / "desk-3.yaml"
    path.write_text(NEW)
    keyfile = tmp_path / "ada.key"
    keyfile.write_bytes(private_key_pem(ADA_KEY))
    async with serving(
        client, desk, task_queue=tq, directory=DIRECTORY, policy=parse_policy(POLICY)
    ):
        runs = {}
        for name, text in (("a", "refund:7:5000"), ("b", "refund:8:30000"), ("c", "refund:9:5000")):
            result = await Runner.run(desk, text, client=client, task_queue=tq, serve=False)
            runs[name] = (result.workflow_id, result.interruptions[0].call_id)
        a, a_call = runs["a"]
        b, c = runs["b"][0], runs["c"][0]
        handle_a = client.get_workflow_handle(a, result_type=RunOutput)
        await handle_a.execute_update(
            "approve", DecisionInput(call_id=a_call, approver="ann"), result_type=DecisionRecord
        )
        await _hostile_applies(client, a, c, path)
        assert apply_events(await handle_a.fetch_history()) == 0
        out = await asyncio.to_thread(  # (the worker shares this event loop)
            hitl_cli,
            dev_server.address, "policy", "apply", str(path), a, b, "--as", "ada",
            "--reason", "the director's new limits",
            env={"HITL_SIGNING_KEY": str(keyfile)},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr + out.stdout
        assert "desk@1 sha256:" in out.stdout and "-> desk@3 sha256:" in out.stdout
        assert f"{a_call} refund: asked: policy desk@3" in out.stdout
        assert "rejected: policy desk@3" in out.stdout and "denies it" in out.stdout
        again = await asyncio.to_thread(
            hitl_cli,
            dev_server.address, "policy", "apply", str(path), a, "--as", "ada",
            env={"HITL_SIGNING_KEY": str(keyfile)},
        )  # fmt: skip
        assert again.returncode == 1 and "AlreadyPinned" in again.stdout
        await _check_a(client, a, a_call)
        b_out = await client.get_workflow_handle(b, result_type=RunOutput).result()
        b_hist = await client.get_workflow_handle(b).fetch_history()
        c_status = await _status(client, c)
        await client.get_workflow_handle(c).terminate("test over")
    assert b_out.final_output == "Refunds above $20,000 now go to the finance director."
    assert tool_activity_count(b_hist) == 0 and apply_events(b_hist) == 1
    [d] = b_out.decisions
    assert (d.kind, d.source, d.approver, d.policy_rule) == (
        "reject", "policy", "ada", "no-refunds-above-20k"
    )  # fmt: skip
    assert d.policy_version is not None and d.policy_version.startswith("desk@3 sha256:")
    assert c_status.policy is not None and c_status.policy.version == "1"
    assert c_status.policy_changes == [] and c_status.pending[0].approvers == ["ann", "bob", "cy"]
    assert ledger.count("refund") == 1


async def _check_a(client: Client, a: str, call_id: str) -> None:
    handle = client.get_workflow_handle(a, result_type=RunOutput)
    status = await _status(client, a)
    [change] = status.policy_changes
    assert (change.admin, change.reason, change.after[:7]) == (
        "ada", "the director's new limits", "desk@3 "
    )  # fmt: skip
    [call] = change.calls
    assert (call.change, call.rule, call.dropped_approvals) == ("asked", "managers-decide", ["ann"])
    [pending] = status.pending
    assert (pending.approvers, pending.required_approvals) == (["bob", "dee", "eve"], 2)
    assert status.policy is not None and status.policy.version == "3"
    with pytest.raises(WorkflowUpdateFailedError) as err:
        await handle.execute_update(
            "approve", DecisionInput(call_id=call_id, approver="cy"), result_type=DecisionRecord
        )
    assert refused_type(err) == "NotAuthorized"
    for who in ("dee", "eve"):
        await handle.execute_update(
            "approve", DecisionInput(call_id=call_id, approver=who), result_type=DecisionRecord
        )
    out = await handle.result()
    assert out.final_output == "refunded $5000.0 on order 7"
    [d] = out.decisions
    assert [x.approver for x in d.approvals] == ["dee", "eve"]
    assert d.policy_rule == "managers-decide"
    assert apply_events(await handle.fetch_history()) == 1


async def test_hitl_policy_publish_reaches_new_runs(
    dev_client: Client, dev_server: DevServer, ledger: Ledger, tmp_path: Path
) -> None:
    """`hitl policy publish` (signed by an admin) makes a version the registry's; the worker's
    watch reads it and the next run pins it, while a run started before keeps the file's."""
    client, tq = dev_client, queue_name("publish")
    path, keyfile = tmp_path / "closed.yaml", tmp_path / "ada.key"
    path.write_text(EVERYTHING_DENIED)
    keyfile.write_bytes(private_key_pem(ADA_KEY))
    watch = RegistryWatch(f"hitl-policy-registry-{tq}", interval=0.1)
    async with serving(
        client, desk, task_queue=tq, directory=DIRECTORY, policy=parse_policy(POLICY),
        policy_registry=watch,
    ):  # fmt: skip
        await watch.wait_for(None)
        before = await Runner.run(desk, "refund:7:5000", client=client, task_queue=tq, serve=False)
        registry = client.get_workflow_handle(watch.registry_id)
        await wait_for(lambda: ready(registry), what="the registry read its directory")
        out = await asyncio.to_thread(
            hitl_cli, dev_server.address, "policy", "publish", str(path), "--registry",
            watch.registry_id, "--as", "ada", "--reason", "closing",
            env={"HITL_SIGNING_KEY": str(keyfile)},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr + out.stdout
        assert out.stdout.startswith("published desk@2 sha256:")
        await watch.wait_for(digest_of(parse_policy(EVERYTHING_DENIED)))
        after = await Runner.run(desk, "refund:8:20", client=client, task_queue=tq, serve=False)
        before_status = await _status(client, before.workflow_id)
        after_status = await _status(client, after.workflow_id)
        await client.get_workflow_handle(before.workflow_id).terminate("test over")
        await registry.terminate("test over")
    assert after.final_output == "The desk is closed."
    assert after_status.policy is not None and after_status.policy.version == "2"
    assert before_status.policy is not None and before_status.policy.version == "1"
    assert ledger.count() == 0


async def test_a_worker_process_pins_the_registrys_policy(
    dev_client: Client, dev_server: DevServer, ledger: Ledger, tmp_path: Path
) -> None:
    """`python -m hitl.worker --policy FILE --policy-registry`: runs pin the file's version
    until an admin publishes another (`hitl policy publish`), then that one."""
    client, tq, address = dev_client, queue_name("registry"), dev_server.address
    directory = local_directory(tmp_path, people={"ada": ["admins"]}, gateway=None)
    first, closed = tmp_path / "desk-1.yaml", tmp_path / "closed.yaml"
    first.write_text(POLICY)
    closed.write_text(EVERYTHING_DENIED)
    worker = WorkerProcess(
        address,
        tq,
        agents="tests.workflows.test_policy_runs:desk",
        env={"HITL_APPROVERS": str(directory)},
        extra_args=["--policy", str(first), "--policy-registry"],
    ).start()
    registry = client.get_workflow_handle(POLICY_REGISTRY_ID)
    try:
        before = await Runner.run(desk, "lookup:1", client=client, task_queue=tq, serve=False)

        async def registry_ready() -> bool:
            try:
                return bool(await ready(registry))
            except Exception:
                return False

        await wait_for(registry_ready, what="the worker started the registry")
        out = await asyncio.to_thread(
            hitl_cli, address, "policy", "publish", str(closed), "--as", "ada",
            env={"HITL_SIGNING_KEY": str(tmp_path / "keys" / "ada.key")},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr + out.stdout

        async def pins_the_new_version() -> bool:
            run = await Runner.run(desk, "lookup:2", client=client, task_queue=tq, serve=False)
            return run.final_output == "The desk is closed."

        await wait_for(pins_the_new_version, what="a new run pins the published version")
        pinned = (await _status(client, before.workflow_id)).policy
    finally:
        worker.stop()
        with contextlib.suppress(Exception):
            await registry.terminate("test over")
    assert before.final_output == "order 1: shipped", "the file's version (lookups are free)"
    assert pinned is not None and pinned.version == "1"
