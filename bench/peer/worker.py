"""The peer's worker (run with `bench/.peer-venv/bin/python -m bench.peer.worker`).

`OpenAIAgentsPlugin` with its default model provider (the OpenAI Responses model through the
real `openai` client, pointed by `OPENAI_BASE_URL` at `bench.wire`), or with `--scripted` the
scripted provider; the plugin's default model activity parameters (a regular activity) unless
`--local-model`, and the SDK's default worker settings unless `--max-cached-workflows` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.worker import Worker

from bench.peer.model import ScriptedPeerProvider
from bench.peer.workflow import ACTIVITIES, PeerAgentRun

MODEL_TIMEOUT = timedelta(seconds=180)  # the same as our model calls


def plugin(local_model: bool, scripted: bool) -> OpenAIAgentsPlugin:
    return OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(
            start_to_close_timeout=MODEL_TIMEOUT, use_local_activity=local_model
        ),
        model_provider=ScriptedPeerProvider() if scripted else None,
    )


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--task-queue", required=True)
    p.add_argument("--max-cached-workflows", type=int, default=None)
    p.add_argument("--local-model", action="store_true")
    p.add_argument("--scripted", action="store_true", help="the scripted model provider")
    args = p.parse_args()
    client = await Client.connect(args.address, plugins=[plugin(args.local_model, args.scripted)])
    kwargs: dict[str, Any] = {}
    if args.max_cached_workflows is not None:
        kwargs["max_cached_workflows"] = args.max_cached_workflows
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    worker = Worker(
        client,
        task_queue=args.task_queue,
        workflows=[PeerAgentRun],
        activities=ACTIVITIES,
        **kwargs,
    )
    async with worker:
        print("worker ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
