"""Record representative histories for the replay tests (`make histories`).

Runs a fresh dev server and worker, drives a few runs to interesting points (completed,
parked, rejected after a handoff, continued-as-new), and saves each history as JSON. Commit
the files: CI replays them against the current workflow code, so an incompatible change to
`AgentRun` fails the build instead of breaking parked runs in production.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from temporalio.client import Client

from hitl import RunConfig, Runner
from hitl.client import data_converter
from hitl.worker.devserver import DevServer
from tests.agents import support_agent, weather_agent
from tests.helpers import serving
from tests.workflows.test_approvals import sequential_agent

OUT = Path(__file__).parent / "histories"


async def record(address: str) -> None:
    client = await Client.connect(address, data_converter=data_converter())
    OUT.mkdir(exist_ok=True)

    async def save(name: str, workflow_id: str) -> None:
        hist = await client.get_workflow_handle(workflow_id).fetch_history()
        (OUT / f"{name}.json").write_text(hist.to_json())
        print(f"saved {name}: {len(hist.events)} events")

    async with serving(client, support_agent, weather_agent, sequential_agent) as tq:
        opts = {"client": client, "task_queue": tq, "serve": False}
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


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = DevServer(db_filename=Path(tmp) / "record.db").start()
        try:
            asyncio.run(record(server.address))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
