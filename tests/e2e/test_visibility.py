"""Search attributes after a run ends early: the approval inbox lists only live waits."""

from __future__ import annotations

import pytest
from temporalio.client import Client, WorkflowFailureError

from hitl import Runner
from tests.agents import support_agent
from tests.helpers import Ledger, serving, wait_for


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
