"""Nested runs wait for people as long as their root does (time-skipping server).

The rest of the nested-run tests are in `tests/e2e/test_nested.py` (dev server).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from hitl import Runner
from hitl.wire import RunStatus
from tests.conftest import time_skipping_server
from tests.e2e.test_nested import desk
from tests.helpers import Ledger, serving


@pytest_asyncio.fixture(scope="module")
async def ts_env() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping server of its own (not the session's): with child workflows the Java
    test server sometimes keeps its clock held after the runs closed (seen under CPU load),
    and a held clock would stall every later test's `sleep`."""
    async with time_skipping_server() as env:
        yield env


async def test_a_nested_approval_waits_for_days(
    ts_env: WorkflowEnvironment, worker_cache: int, ledger: Ledger
) -> None:
    if worker_cache == 0:
        pytest.skip(
            "the Java time-skipping server stalls child workflow tasks that run local "
            "activities when nothing is cached (a 10 s task timeout each); the replay variant "
            "of the nested tests runs on the dev server (tests/e2e/test_nested.py)"
        )
    client = ts_env.client
    async with serving(client, desk) as tq:
        result = await Runner.run(desk, "slow.org", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        await ts_env.sleep(timedelta(days=5))
        status = await client.get_workflow_handle(result.workflow_id).query(
            "status", result_type=RunStatus
        )
        assert status.phase == "awaiting_approval"
        assert [p.call_id for p in status.pending] == [item.call_id]
        state = result.to_state()
        state.approve(item)
        result = await Runner.run(desk, state, client=client, task_queue=tq, serve=False)
    assert result.final_output == "summary: content of slow.org"
    assert ledger.count("fetch") == 1
