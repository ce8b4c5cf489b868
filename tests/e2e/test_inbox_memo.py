"""The inbox without queries (dev server): a paused run keeps its pending calls in its memo, so
`hitl pending` lists every call of every paused run with no worker running and no replay, the
memo is encrypted with the payloads, and a run that goes on is no longer listed."""

from __future__ import annotations

import asyncio
import json

import pytest
from temporalio.client import Client

from hitl import Runner, connect
from hitl.codec import KEY_ENV, new_key
from hitl.wire import INBOX_MEMO, DecisionInput
from hitl.worker.devserver import DevServer
from tests.agents import support_agent
from tests.e2e.cli_support import hitl, pending_json
from tests.helpers import queue_name, serving, temporal_cli, wait_for

RUNS = 12


async def test_pending_reads_every_paused_call_from_memos_with_no_worker(
    dev_server: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, new_key())  # the memo is encrypted like every payload
    client: Client = await connect(address=dev_server.address)
    tq = queue_name("memo")
    expected: dict[str, str] = {}
    async with serving(client, support_agent) as queue:
        tq = queue

        async def park(i: int) -> None:
            result = await Runner.run(
                support_agent, f"cancel order {100 + i}", client=client, task_queue=tq, serve=False
            )
            expected[result.workflow_id] = result.interruptions[0].call_id

        await asyncio.gather(*(park(i) for i in range(RUNS)))
    # The worker is gone: nobody can answer a query. The inbox still has every call.
    rows = await pending_json(
        dev_server.address,
        "--queue",
        tq,
        until=lambda rows: len(rows) == RUNS,
        what="every paused run's call from its memo",
    )
    assert {r["workflow_id"]: r["call_id"] for r in rows} == expected
    assert all(r["unavailable"] is None and r["tool_name"] == "cancel_order" for r in rows)
    assert all(r["title"] == "Support agent wants to run cancel_order" for r in rows)

    # Stored encrypted: the plain `temporal` CLI sees the memo's field, not its content.
    wid = next(iter(expected))
    raw = await asyncio.to_thread(
        temporal_cli, "workflow", "describe", "-w", wid, "-o", "json", address=dev_server.address
    )
    described = json.loads(raw.stdout)
    memo = json.dumps(described.get("workflowExecutionInfo", described).get("memo", {}))
    assert INBOX_MEMO in memo and "cancel_order" not in memo, memo[:500]

    # A run that goes on leaves the inbox (its status changes with the memo, in one task).
    async with serving(client, support_agent, task_queue=tq):
        handle = client.get_workflow_handle(wid)
        await handle.execute_update("approve", DecisionInput(call_id=expected[wid], approver="ops"))
        await handle.result()

        async def gone() -> bool:
            out = await asyncio.to_thread(
                hitl, dev_server.address, "pending", "--queue", tq, "--json"
            )
            return wid not in {r["workflow_id"] for r in json.loads(out.stdout or "[]")}

        await wait_for(gone, what="the finished run to leave the inbox")
        for other in expected:
            if other != wid:
                await client.get_workflow_handle(other).terminate("test over")
