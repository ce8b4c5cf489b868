"""One one-approval run per path (operator, `Runner.run`) on the real model path: history bytes.

`python -m bench.history_bytes` starts a tuned dev server, the fake OpenAI wire and our worker,
runs one approval per path and prints the run's events and bytes (protobuf size of every event)
and each event's size. `--payloads` also prints the payloads of events over 300 bytes (the
operator path). About 30 s on a quiet 2-core machine; nothing else needs to run.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from temporalio.api.enums.v1 import EventType

from bench import proto
from bench.stack import Stack
from hitl.worker.devserver import DevServer


async def measure(show_payloads: bool) -> None:
    """Run and print (see the module docstring)."""
    import bench.ours.driver as driver
    from hitl import connect

    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack("tuned", Path(tmp), Path(tmp) / "logs")
        stack.logs.mkdir()
        log = stack.logs / "server.log"
        stack.server = DevServer(db_filename=stack.db, tuned=True, log_file=log).start()
        try:
            stack.start_wire()
            stack.start_workers([("ours", "ours", "ours", None)])
            driver.client = await connect(address=stack.address)
            for api in ("client", "runner"):
                *_, wid = await driver.one_run("openai", "ours", api)
                history = await driver.client.get_workflow_handle(wid).fetch_history()
                events = list(history.events)
                sizes = proto.history_sizes(events)
                print(api, "events", sizes["events"], "bytes", sizes["bytes"])
                for e in events:
                    print(" ", e.event_id, EventType.Name(e.event_type), e.ByteSize())
                    if show_payloads and api == "client" and e.ByteSize() > 300:
                        print("   ", str(e).replace("\n", "\n    "))
        finally:
            await stack.close()
            stack.server.stop()


if __name__ == "__main__":
    asyncio.run(measure("--payloads" in sys.argv))
