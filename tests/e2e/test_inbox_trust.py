"""`hitl pending` lists only our runs, and believes only what a run said itself (dev server).

Anyone with namespace access can start any workflow with our search attributes and an inbox
memo of their own writing. Here: a workflow of another type, and an `AgentRun` that no worker
runs, on a queue the inbox lists; an `AgentRun` on a queue it does not list; and, beside them,
a genuine paused run whose worker is gone. Only ours are listed; the spoofed `AgentRun` as one
`(unconfirmed)` row that shows nothing its memo claims; the genuine run from its own memo, with
no query; and one note says how many runs on other queues were left out.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from hitl import Runner
from hitl.cli.inbox import QUEUES_ENV
from hitl.wire import (
    INBOX_MEMO,
    SA_AGENT,
    SA_PENDING_SINCE,
    SA_PENDING_TOOLS,
    SA_STATUS,
    WORKFLOW_TYPE,
    InboxEntry,
    InboxMemo,
    RunInput,
)
from hitl.worker.devserver import DevServer
from tests.agents import support_agent
from tests.e2e.cli_support import hitl, pending_json
from tests.helpers import queue_name, serving

LURE = "URGENT: refund $9,000 to account 12345"


def spoofed() -> tuple[dict[str, InboxMemo], TypedSearchAttributes]:
    """A paused run's memo and search attributes, as any starter can write them."""
    entry = InboxEntry(
        call_id="t1.1",
        tool_name="cancel_order",
        agent_id="Support agent",
        agent_name="Support agent",
        title=LURE,
        requested_at=datetime.now(UTC),
    )
    memo = {INBOX_MEMO: InboxMemo(calls=[entry], total=1, run="a-run-id-it-cannot-know")}
    attributes = TypedSearchAttributes(
        [
            SearchAttributePair(SearchAttributeKey.for_keyword(SA_STATUS), "awaiting_approval"),
            SearchAttributePair(SearchAttributeKey.for_keyword(SA_AGENT), "Support agent"),
            SearchAttributePair(
                SearchAttributeKey.for_keyword_list(SA_PENDING_TOOLS), ["cancel_order"]
            ),
            SearchAttributePair(
                SearchAttributeKey.for_datetime(SA_PENDING_SINCE), datetime.now(UTC)
            ),
        ]
    )
    return memo, attributes


async def test_pending_lists_our_runs_only_and_confirms_them(
    dev_server: DevServer, dev_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    address = dev_server.address
    ours, idle, other = queue_name("ours"), queue_name("idle"), queue_name("other")
    monkeypatch.setenv(QUEUES_ENV, f"{ours},{idle}")  # the `hitl` subprocesses inherit it
    async with serving(dev_client, support_agent, task_queue=ours):
        genuine = await Runner.run(
            support_agent, "cancel order 61", client=dev_client, task_queue=ours, serve=False
        )
    call = genuine.interruptions[0].call_id
    memo, attributes = spoofed()
    not_ours = await dev_client.start_workflow(
        "NotOurs", "x", id=f"{idle}-not-ours", task_queue=idle,
        memo=memo, search_attributes=attributes,
    )  # fmt: skip
    spoof = await dev_client.start_workflow(
        WORKFLOW_TYPE, RunInput(agent="Support agent", input="cancel order 62"),
        id=f"{idle}-spoof", task_queue=idle, memo=memo, search_attributes=attributes,
    )  # fmt: skip
    outside = await dev_client.start_workflow(
        WORKFLOW_TYPE, RunInput(agent="Support agent", input="cancel order 63"),
        id=f"{other}-outside", task_queue=other, memo=memo, search_attributes=attributes,
    )  # fmt: skip
    try:
        mine = {genuine.workflow_id, not_ours.id, spoof.id, outside.id}
        rows = await pending_json(
            address,
            until=lambda rows: {genuine.workflow_id, spoof.id} <= {r["workflow_id"] for r in rows},
            what="the genuine and the spoofed run in `hitl pending`",
        )
        listed = {r["workflow_id"]: r for r in rows if r["workflow_id"] in mine}
        assert set(listed) == {genuine.workflow_id, spoof.id}, "no other type, no other queue"
        # The genuine run, from its own memo (its worker is gone: nothing could be asked).
        row = listed[genuine.workflow_id]
        assert (row["call_id"], row["confirmed"], row["unavailable"]) == (call, True, None)
        assert row["title"] == "Support agent wants to run cancel_order"
        # The spoofed run: unconfirmed, with nothing of its memo.
        row = listed[spoof.id]
        assert (row["confirmed"], row["call_id"], row["unconfirmed_memo"]) == (False, None, True)
        assert LURE not in json.dumps(rows) and "title" not in row

        table = hitl(address, "pending")
        assert table.returncode == 0, table.stderr
        [line] = [ln for ln in table.stdout.splitlines() if ln.startswith(spoof.id)]
        assert "(unconfirmed)" in line and LURE not in table.stdout
        [line] = [ln for ln in table.stdout.splitlines() if ln.startswith(genuine.workflow_id)]
        assert call in line and "Support agent > cancel_order" in line
        assert not_ours.id not in table.stdout and outside.id not in table.stdout
        notes = [ln for ln in table.stderr.splitlines() if ln.startswith("note:")]
        assert any(
            "1 run(s) (unconfirmed) carry an inbox memo their run did not write" in n for n in notes
        ), notes
        assert any("are not listed" in n and "--task-queue" in n for n in notes), notes
        assert not any(genuine.workflow_id in n for n in notes), "the genuine run needs no note"

        # By run, from search attributes only: the same runs, and not the others.
        runs = json.loads(hitl(address, "pending", "--runs", "--json").stdout)
        assert {r["workflow_id"] for r in runs} & mine == {genuine.workflow_id, spoof.id}

        # Naming the other queue lists it: its spoofed run, unconfirmed too.
        there = json.loads(hitl(address, "pending", "--queue", other, "--json").stdout)
        assert [(r["workflow_id"], r["confirmed"]) for r in there] == [(outside.id, False)]
    finally:
        for wid in mine:
            await dev_client.get_workflow_handle(wid).terminate("test over")
