"""The floor: bare workflows on the same server, with no state and no payloads to speak of.

`python -m bench.raw --address HOST:PORT --task-queue Q` serves two of them:

- `BenchRaw`, whose `ping` update returns at once. Timing `ping` gives the raw update round
  trip (client -> server -> workflow task -> worker -> back); an update-with-start of `ping`,
  the raw start round trip.
- `BenchRawSteps`, the one-approval run's steps and nothing else: a no-op activity (the first
  model call), a pause answered through the `wait` update, then after the `approve` update a
  no-op tool activity (regular or local) and a no-op activity (the second model call). Any
  implementation with a model as a regular activity takes at least these steps, so its times
  are the floor of start -> pending and decision -> completed on this server.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from datetime import timedelta

from temporalio import activity, workflow
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


@activity.defn(name="bench_noop")
async def noop(step: str) -> str:
    return step


STEP = timedelta(seconds=30)


@workflow.defn(name="BenchRawSteps")
class BenchRawSteps:
    def __init__(self) -> None:
        self._pending = False
        self._approved = False

    @workflow.run
    async def run(self, local_tool: bool) -> str:
        await workflow.execute_activity(noop, "model", start_to_close_timeout=STEP)
        self._pending = True
        await workflow.wait_condition(lambda: self._approved)
        self._pending = False
        if local_tool:
            await workflow.execute_local_activity(noop, "tool", start_to_close_timeout=STEP)
        else:
            await workflow.execute_activity(noop, "tool", start_to_close_timeout=STEP)
        return await workflow.execute_activity(noop, "done", start_to_close_timeout=STEP)

    @workflow.update(name="wait")
    async def wait(self) -> bool:
        await workflow.wait_condition(lambda: self._pending)
        return True

    @workflow.update(name="approve")
    def approve(self) -> None:
        self._approved = True


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
    async with Worker(
        client, task_queue=args.task_queue, workflows=[BenchRaw, BenchRawSteps], activities=[noop]
    ):
        print("worker ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
