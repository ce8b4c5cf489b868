"""The namespace's policy registry (time-skipping server): only an admin's signed publication
is accepted; a refused one leaves nothing in history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from hitl import Runner
from hitl.activities.policy import pin
from hitl.policy import canonical, digest_of, parse_policy
from hitl.policy_signing import sign_publication
from hitl.signing import key_id_for, new_key_pair
from hitl.wire import (
    POLICY_REGISTRY_ID,
    POLICY_REGISTRY_TYPE,
    QUERY_CURRENT_POLICY,
    UPDATE_PUBLISH_POLICY,
    ApproverDirectory,
    ApproverEntry,
    CurrentPolicy,
    DecisionInput,
    DecisionRecord,
    PolicyPublication,
    RegistryInput,
    RegistryState,
    RunOutput,
    RunStatus,
)
from hitl.worker.policy_watch import RegistryWatch
from tests.helpers import Ledger, queue_name, serving, tool_activity_count, wait_for
from tests.workflows.test_invariants import refused_type
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

WATCH_INTERVAL = 1.0
"""Seconds between the watch's readings here. Not 0.1: on the Java time-skipping server, a
worker that caches nothing and answers a registry query every 0.1 s sometimes never completes
a run's next workflow task (it timed out again and again, 3 times in 13 tries; 0 in 15 at 1 s,
and 0 in 10 on the dev server at 0.1 s)."""


async def _publish(
    env: WorkflowEnvironment, wid: str, text: str, key: Any, kid: str, who: str
) -> Any:
    doc = parse_policy(text)
    now = datetime.fromtimestamp((await env.get_current_time()).timestamp(), UTC)  # its clock
    upd = sign_publication(
        key,
        key_id=kid,
        admin=who,
        registry_id=wid,
        document=canonical(doc),
        digest=digest_of(doc),
        now=now,
        reason="quarterly review",
    )
    handle = env.client.get_workflow_handle(wid)
    return await handle.execute_update(UPDATE_PUBLISH_POLICY, upd, result_type=PolicyPublication)


async def test_only_an_admins_signed_publication_counts(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """Refused before anything reaches history: a member of another group, a missing
    signature, a document that does not validate. An admin's publication becomes current and
    is logged with who, when and why."""
    client, tq = ts_env.client, queue_name()
    registry = await client.start_workflow(
        POLICY_REGISTRY_TYPE, RegistryInput(), id=f"{POLICY_REGISTRY_ID}-{tq}", task_queue=tq
    )
    try:
        async with serving(
            client, desk, task_queue=tq, directory=DIRECTORY, policy_registry=registry.id
        ):
            await _registry_checks(ts_env, registry)
            hist = await registry.fetch_history()
    finally:
        await registry.terminate("test over")
    accepted = [
        e for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]  # fmt: skip
    assert len(accepted) == 2, "only the admin's two publications reached history"


async def ready(registry: Any) -> bool:
    current = await registry.query(QUERY_CURRENT_POLICY, result_type=CurrentPolicy)
    return bool(current.ready)


async def _registry_checks(env: WorkflowEnvironment, registry: Any) -> None:
    await wait_for(lambda: ready(registry), what="the registry read the directory")
    wid = registry.id
    with pytest.raises(WorkflowUpdateFailedError) as err:
        await _publish(env, wid, EVERYTHING_DENIED, BOB_KEY, BOB_ID, "bob")
    assert refused_type(err) == "NotAdmin"
    with pytest.raises(WorkflowUpdateFailedError) as err:
        await registry.execute_update(
            UPDATE_PUBLISH_POLICY,
            {"document": canonical(parse_policy(POLICY)), "admin": "ada", "key_id": ADA_ID,
             "signature": "", "expires_at": "2030-01-01T00:00:00Z"},
        )  # fmt: skip
    assert refused_type(err) in ("BadSignature", "SignatureExpired")
    with pytest.raises(WorkflowUpdateFailedError) as err:
        await registry.execute_update(
            UPDATE_PUBLISH_POLICY,
            {"document": {"policy": "p", "version": "1", "rules": [{"id": "r"}]}, "admin": "ada",
             "key_id": ADA_ID, "signature": "", "expires_at": "2030-01-01T00:00:00Z"},
        )  # fmt: skip
    assert refused_type(err) == "PolicyError"
    current = await registry.query(QUERY_CURRENT_POLICY, result_type=CurrentPolicy)
    assert current.policy is None and current.log == []

    first = await _publish(env, wid, POLICY, ADA_KEY, ADA_ID, "ada")
    assert (first.admin, first.version, first.reason) == ("ada", "1", "quarterly review")
    await _publish(env, wid, EVERYTHING_DENIED, ADA_KEY, ADA_ID, "ada")
    current = await registry.query(QUERY_CURRENT_POLICY, result_type=CurrentPolicy)
    assert current.policy is not None and current.policy.version == "2"
    assert current.policy.digest == digest_of(parse_policy(EVERYTHING_DENIED))
    assert [(p.version, p.admin) for p in current.log] == [("1", "ada"), ("2", "ada")]


def test_a_publication_signed_for_another_document_does_not_verify() -> None:
    from hitl.policy_signing import verify_publication
    from hitl.signing import SignatureError

    doc, other = parse_policy(POLICY), parse_policy(EVERYTHING_DENIED)
    now = datetime(2026, 11, 26, tzinfo=UTC)
    upd = sign_publication(
        ADA_KEY, key_id=ADA_ID, admin="ada", registry_id=POLICY_REGISTRY_ID,
        document=canonical(doc), digest=digest_of(doc), now=now,
    )  # fmt: skip
    assert (
        verify_publication(
            DIRECTORY, upd, registry_id=POLICY_REGISTRY_ID, digest=digest_of(doc), now=now
        )
        == "ada"
    )
    with pytest.raises(SignatureError) as exc:
        verify_publication(
            DIRECTORY, upd, registry_id=POLICY_REGISTRY_ID, digest=digest_of(other), now=now
        )
    assert exc.value.type == "BadSignature"
    with pytest.raises(SignatureError) as exc:
        verify_publication(DIRECTORY, upd, registry_id="elsewhere", digest=digest_of(doc), now=now)
    assert exc.value.type == "BadSignature"
    from hitl.policy_signing import APPLY_DOMAIN

    as_apply = sign_publication(
        ADA_KEY, key_id=ADA_ID, admin="ada", registry_id=POLICY_REGISTRY_ID,
        document=canonical(doc), digest=digest_of(doc), now=now, domain=APPLY_DOMAIN,
    )  # fmt: skip
    for signed, domain in ((as_apply, None), (upd, APPLY_DOMAIN)):
        kw = {"domain": domain} if domain else {}
        with pytest.raises(SignatureError) as exc:  # an apply is never a publication, nor back
            verify_publication(
                DIRECTORY, signed, registry_id=POLICY_REGISTRY_ID, digest=digest_of(doc),
                now=now, **kw,
            )  # fmt: skip
        assert exc.value.type == "BadSignature"
    late = now + timedelta(hours=2)
    with pytest.raises(SignatureError) as exc:
        verify_publication(
            DIRECTORY, upd, registry_id=POLICY_REGISTRY_ID, digest=digest_of(doc), now=late
        )
    assert exc.value.type == "SignatureExpired"


async def test_a_starter_cannot_plant_a_policy_or_an_admin(ts_env: WorkflowEnvironment) -> None:
    """A fresh start carrying registry state (a current policy, a directory making mallory an
    admin) is not believed: only a continuation of the registry carries state."""
    mallory_key, mallory_public = new_key_pair()
    mallory_id = key_id_for(mallory_public)
    planted = RegistryState(
        current=pin(parse_policy(EVERYTHING_DENIED)),
        directory=ApproverDirectory(
            approvers={
                "mallory": ApproverEntry(groups=["admins"], keys={mallory_id: mallory_public})
            }
        ),
    )
    client, tq = ts_env.client, queue_name()
    registry = await client.start_workflow(
        POLICY_REGISTRY_TYPE,
        RegistryInput(state=planted),
        id=f"{POLICY_REGISTRY_ID}-{tq}",
        task_queue=tq,
    )
    watch = RegistryWatch(registry.id, interval=WATCH_INTERVAL)
    try:
        async with serving(client, desk, task_queue=tq, directory=DIRECTORY, policy_registry=watch):
            await wait_for(lambda: ready(registry), what="the registry read the directory")
            current = await registry.query(QUERY_CURRENT_POLICY, result_type=CurrentPolicy)
            assert current.policy is None
            await watch.wait_for(None)
            assert watch.policy() is None, "workers pin nothing planted either"
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await _publish(ts_env, registry.id, POLICY, mallory_key, mallory_id, "mallory")
            assert refused_type(err) == "UnknownKey"
    finally:
        await registry.terminate("test over")


async def test_runs_pin_the_registrys_version_when_they_start(
    ts_env: WorkflowEnvironment, ledger: Ledger, cache_size: int
) -> None:
    """Run A starts while the registry has no policy: it pins the worker's file (version 1) and
    parks. An admin publishes version 2 (everything denied); the worker's watch reads it; run B
    pins version 2 and is refused without a tool, while A keeps version 1 and runs once
    approved. Also with a worker that caches no workflow (the registry is read outside any
    workflow task, so nothing deadlocks)."""
    client, tq = ts_env.client, queue_name()
    watch = RegistryWatch(f"{POLICY_REGISTRY_ID}-{tq}", interval=WATCH_INTERVAL)
    async with serving(
        client,
        desk,
        task_queue=tq,
        cache=cache_size,
        directory=DIRECTORY,
        policy=parse_policy(POLICY),
        policy_registry=watch,
    ):
        await watch.wait_for(None)
        a = await Runner.run(desk, "refund:7:5000", client=client, task_queue=tq, serve=False)
        [item] = a.interruptions
        registry = client.get_workflow_handle(watch.registry_id)
        await wait_for(lambda: ready(registry), what="the registry read the directory")
        await _publish(ts_env, watch.registry_id, EVERYTHING_DENIED, ADA_KEY, ADA_ID, "ada")
        await watch.wait_for(digest_of(parse_policy(EVERYTHING_DENIED)))
        b = await Runner.run(desk, "refund:8:20", client=client, task_queue=tq, serve=False)
        b_handle = client.get_workflow_handle(b.workflow_id, result_type=RunOutput)
        b_status = await b_handle.query("status", result_type=RunStatus)
        a_handle = client.get_workflow_handle(a.workflow_id, result_type=RunOutput)
        for who in ("ann", "bob"):
            await a_handle.execute_update(
                "approve", DecisionInput(call_id=item.call_id, approver=who),
                result_type=DecisionRecord,
            )  # fmt: skip
        a_out = await a_handle.result()
        a_status = await a_handle.query("status", result_type=RunStatus)
        b_hist = await b_handle.fetch_history()
    await registry.terminate("test over")  # once the watch stopped (it would start another)
    assert b.final_output == "The desk is closed."
    assert tool_activity_count(b_hist) == 0
    assert b_status.policy is not None and b_status.policy.version == "2"
    assert a_status.policy is not None and a_status.policy.version == "1"
    assert a_out.final_output == "refunded $5000.0 on order 7"
    assert ledger.count("refund") == 1
