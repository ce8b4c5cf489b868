"""The floor: a bare workflow whose `ping` update returns at once (no activities, no state).

`python -m bench.raw --address HOST:PORT --task-queue Q` serves it. Timing `ping` gives the raw
update round trip on the same server (client -> server -> workflow task -> worker -> back), and
an update-with-start of `ping` the raw start round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker


@workflow.defn(name="BenchRaw")
class BenchRaw:
    def __init__(self) -> None:
        self._done = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self._done)

    @workflow.update(name="ping")
    def ping(self) -> str:
        return "pong"

    @workflow.update(name="stop")
    def stop(self) -> None:
        self._done = True


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--task-queue", required=True)
    args = p.parse_args()
    client = await Client.connect(args.address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Worker(client, task_queue=args.task_queue, workflows=[BenchRaw]):
        print("worker ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
