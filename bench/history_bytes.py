"""Bytes by event of one one-approval run per path: `python -m bench.history_bytes`.

Starts a tuned dev server, the wire (`bench.wire`) and our worker as `bench.run` does, runs one
one-approval run on the real model path by the operator path (update-with-start `wait`,
`approve`, result) and one by `Runner.run`, and prints each history's events and protobuf bytes,
the bytes by event type and every event's size. About 40 s; not part of `make bench`.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from temporalio.api.enums.v1 import EventType

from bench import proto
from bench.stack import Stack


async def main() -> None:
    """Run the two paths once and print their histories' sizes."""
    from hitl import connect
    from hitl.worker.devserver import DevServer

    with tempfile.TemporaryDirectory() as tmp:
        st = Stack("tuned", Path(tmp), Path(tmp) / "logs")
        st.logs.mkdir()
        server = DevServer(db_filename=st.db, tuned=True, log_file=st.logs / "server.log")
        st.server = server.start()
        try:
            st.start_wire()
            st.start_workers([("ours", "ours", "ours", None)])
            import bench.ours.driver as driver

            driver.client = await connect(address=st.address)
            for api in ("client", "runner"):
                *_, wid = await driver.one_run("openai", "ours", api)
                handle = driver.client.get_workflow_handle(wid)
                events = list((await handle.fetch_history()).events)
                sizes = proto.history_sizes(events)
                print(api, "events", len(events), "bytes", sum(e.ByteSize() for e in events))
                print(json.dumps(sizes["bytes_by_type"], indent=0))
                for e in events:
                    print(e.event_id, EventType.Name(e.event_type), e.ByteSize())
        finally:
            await st.close()
            st.server.stop()


if __name__ == "__main__":
    asyncio.run(main())
