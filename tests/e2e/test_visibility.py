"""Search attributes after a run ends early: the approval inbox lists only live waits."""

from __future__ import annotations

import pytest
from temporalio.client import Client, WorkflowFailureError

from hitl import Runner
from hitl.wire import RunOutput
from tests.agents import support_agent
from tests.helpers import Ledger, serving, wait_for
from tests.hostile.agents import deadline_desk


async def test_a_cancelled_paused_run_leaves_the_approval_inbox(
    dev_client: Client, cache_size: int, ledger: Ledger
) -> None:
    client = dev_client
    async with serving(client, support_agent, cache=cache_size) as tq:
        paused = await Runner.run(
            support_agent, "cancel order 77", client=client, task_queue=tq, serve=False
        )
        kept = await Runner.run(
            support_agent, "cancel order 78", client=client, task_queue=tq, serve=False
        )
        inbox = f"HitlStatus = 'awaiting_approval' AND TaskQueue = '{tq}'"

        async def listed(query: str) -> set[str]:
            return {w.id async for w in client.list_workflows(query)}

        both = {paused.workflow_id, kept.workflow_id}
        await wait_for(lambda: _eq(listed(inbox), both), what="both runs in the inbox")

        handle = client.get_workflow_handle(paused.workflow_id)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        await wait_for(
            lambda: _eq(listed(inbox), {kept.workflow_id}), what="the cancelled run to leave"
        )
        cancelled = f"HitlStatus = 'cancelled' AND TaskQueue = '{tq}'"
        assert await listed(cancelled) == {paused.workflow_id}
        desc = await handle.describe()
        assert desc.search_attributes.get("HitlPendingTools") in (None, [])
    assert ledger.count() == 0


async def _eq(value: object, expected: object) -> bool:
    return await value == expected  # type: ignore[misc]


async def test_outcomes_are_searchable_an_expired_call_apart_from_a_rejected_one(
    dev_client: Client, ledger: Ledger
) -> None:
    """`HitlOutcomes` lists what a run's calls came to: `expired` is its own outcome."""
    client = dev_client
    async with serving(client, deadline_desk) as tq:
        expired = await Runner.run(deadline_desk, "go", client=client, task_queue=tq, serve=False)
        approved = await Runner.run(deadline_desk, "go", client=client, task_queue=tq, serve=False)
        state = approved.to_state()
        state.approve(state.get_interruptions()[0], approver="ops")
        await Runner.run(deadline_desk, state, client=client, task_queue=tq, serve=False)
        out = await client.get_workflow_handle(expired.workflow_id, result_type=RunOutput).result()

        async def listed(outcome: str) -> set[str]:
            query = f"HitlOutcomes = '{outcome}' AND TaskQueue = '{tq}'"
            return {w.id async for w in client.list_workflows(query)}

        await wait_for(lambda: _eq(listed("expired"), {expired.workflow_id}), what="expired")
        await wait_for(lambda: _eq(listed("approved"), {approved.workflow_id}), what="approved")
        assert await listed("rejected") == set(), "an expiry is not a rejection"
    assert out.decisions[0].expired and ledger.count("wire_soon") == 1


async def test_later_upserts_carry_only_what_changed_and_the_attributes_stay_whole(
    dev_client: Client, ledger: Ledger
) -> None:
    """A run's first publish sets every attribute; later ones send only the changed keys, and
    the server's merged view is what a person would see at each stage."""
    import json

    from temporalio.api.enums.v1 import EventType

    client = dev_client
    async with serving(client, support_agent) as tq:
        paused = await Runner.run(
            support_agent, "cancel order 79", client=client, task_queue=tq, serve=False
        )
        handle = client.get_workflow_handle(paused.workflow_id)
        sa = (await handle.describe()).search_attributes
        assert sa["HitlStatus"] == ["awaiting_approval"]
        assert sa["HitlPendingTools"] == ["cancel_order"] and sa["HitlAgent"]
        state = paused.to_state()
        state.approve(state.get_interruptions()[0])
        await Runner.run(support_agent, state, client=client, task_queue=tq, serve=False)
        done = (await handle.describe()).search_attributes
        hist = await handle.fetch_history()
    assert done["HitlStatus"] == ["completed"] and done["HitlOutcomes"] == ["approved"]
    assert done["HitlAgent"] == sa["HitlAgent"], "kept from the first publish"
    assert done.get("HitlPendingTools") in (None, []) and done.get("HitlPendingSince") is None
    sent = [
        set(e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields)
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
    ]
    assert len(sent) == 3 and "HitlAgent" in sent[0]
    assert all("HitlAgent" not in keys for keys in sent[1:])
    assert sent[2] == {"HitlStatus"}, json.dumps([sorted(k) for k in sent])
    assert ledger.count() == 1
