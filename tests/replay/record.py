"""Record representative histories for the replay tests (`make histories`).

Runs a fresh dev server and worker, drives a few runs to interesting points (completed,
parked, rejected after a handoff, continued-as-new, continued-as-new while parked), and saves
each history as JSON. Commit the files: CI replays them against the current workflow code, so
an incompatible change to `AgentRun` fails the build instead of breaking parked runs in
production. `--only NAME` records one scenario and leaves the other files as they are (older
histories must keep replaying: re-record them only when no such runs can exist).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from temporalio.client import Client

from hitl import RunConfig, Runner
from hitl.client import data_converter
from hitl.wire import DecisionInput
from hitl.worker.devserver import DevServer
from tests.agents import local_support_agent, support_agent, weather_agent
from tests.helpers import serving
from tests.workflows.test_approvals import sequential_agent
from tests.workflows.test_compaction import desk, grow_until_continued, park_on_the_wire

OUT = Path(__file__).parent / "histories"


SCENARIOS = (
    "completed_approved",
    "parked_after_handoff",
    "completed_rejected",
    "continued_as_new",
    "continued_while_parked",
    "completed_local_tools",
)


async def record(address: str, only: str | None = None) -> None:
    client = await Client.connect(address, data_converter=data_converter())
    OUT.mkdir(exist_ok=True)

    async def save(name: str, workflow_id: str, run_id: str | None = None) -> None:
        hist = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        (OUT / f"{name}.json").write_text(hist.to_json())
        print(f"saved {name}: {len(hist.events)} events")

    agents = (support_agent, local_support_agent, weather_agent, sequential_agent, desk)
    async with serving(client, *agents) as tq:
        opts = {"client": client, "task_queue": tq, "serve": False}
        if only == "continued_while_parked":
            await record_parked_compaction(client, tq, save)
            return
        if only == "completed_local_tools":
            await record_local_tools(opts, save)
            return
        r = await Runner.run(
            support_agent, "cancel order 7", workflow_id="replay-completed", **opts
        )
        state = r.to_state()
        state.approve(r.interruptions[0])
        await Runner.run(support_agent, state, **opts)
        await save("completed_approved", "replay-completed")

        await Runner.run(
            weather_agent,
            "What is the weather in Oakland and San Francisco?",
            workflow_id="replay-parked",
            **opts,
        )
        await save("parked_after_handoff", "replay-parked")

        r = await Runner.run(
            support_agent,
            "cancel order 8 and email a refund notice",
            workflow_id="replay-rejected",
            **opts,
        )
        state = r.to_state()
        for item in r.interruptions:
            state.reject(item, message="not today")
        await Runner.run(support_agent, state, **opts)
        await save("completed_rejected", "replay-rejected")

        r = await Runner.run(
            sequential_agent,
            "cancel 1, 2 and 3",
            workflow_id="replay-can",
            run_config=RunConfig(continue_as_new_after_events=12),
            **opts,
        )
        state = r.to_state()
        state.approve(r.interruptions[0], always_approve=True)
        await Runner.run(sequential_agent, state, **opts)
        # The first run of the chain: it ended by continuing as new.
        first = [e async for e in client.list_workflows("WorkflowId = 'replay-can'")]
        oldest = min(first, key=lambda w: w.start_time)
        hist = await client.get_workflow_handle("replay-can", run_id=oldest.run_id).fetch_history()
        (OUT / "continued_as_new.json").write_text(hist.to_json())
        print(f"saved continued_as_new: {len(hist.events)} events")
        await record_parked_compaction(client, tq, save)
        await record_local_tools(opts, save)


async def record_local_tools(opts: dict[str, Any], save: Any) -> None:
    """Both tools as local activities: an approved call, and one retried after a failure."""
    r = await Runner.run(
        local_support_agent,
        "cancel order 7 and email the customer",
        workflow_id="replay-local-tools",
        **opts,
    )
    state = r.to_state()
    state.approve(r.interruptions[0])
    await Runner.run(local_support_agent, state, **opts)
    await save("completed_local_tools", "replay-local-tools")


async def record_parked_compaction(client: Client, tq: str, save: Any) -> None:
    """A run that continued as new while it waited for a person, and the run that carried on:
    the first ends parked (pending call, deadline, standing rule), the second finishes it."""
    wid, _, wire_call = await park_on_the_wire(client, tq)
    first = (await client.get_workflow_handle(wid).describe()).run_id
    await grow_until_continued(client, wid)
    handle = client.get_workflow_handle(wid)
    second = (await handle.describe()).run_id
    await handle.execute_update("approve", DecisionInput(call_id=wire_call, approver="cfo"))
    await handle.result()
    await save("continued_while_parked", wid, first)
    await save("carried_on_after_parked_compaction", wid, second)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=SCENARIOS, help="record one scenario")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = DevServer(db_filename=Path(tmp) / "record.db").start()
        try:
            asyncio.run(record(server.address, args.only))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
