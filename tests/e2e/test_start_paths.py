"""`Runner.run`, `Runner.run_streamed` and `hitl run` start runs one way (`hitl.starting`).

A business id names one run for good: once its run has closed, none of the three starts a
second one; each reports the first run's outcome.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid

import pytest
from temporalio.client import Client

from hitl import Agent, ModelReply, ModelRequest, Runner, ScriptedModel
from tests.helpers import ROOT, serving


def count_script(req: ModelRequest) -> ModelReply:
    return ModelReply.say(f"counted: {req.last_user_text()}")


counter = Agent(
    name="Counter",
    instructions="Count.",
    model=ScriptedModel(count_script, "tests.e2e.start_paths.count"),
)


async def runs_named(client: Client, workflow_id: str) -> int:
    return len([w async for w in client.list_workflows(f"WorkflowId = '{workflow_id}'")])


async def test_every_start_path_refuses_a_second_run_under_a_closed_business_id(
    dev_client: Client, dev_server: object
) -> None:
    bid = f"order-{uuid.uuid4().hex[:8]}"
    address = dev_server.address  # type: ignore[attr-defined]
    async with serving(dev_client, counter) as tq:
        opts = {"client": dev_client, "task_queue": tq, "serve": False}
        first = await Runner.run(counter, "one", workflow_id=bid, **opts)  # type: ignore[arg-type]
        assert first.final_output == "counted: one"

        again = await Runner.run(counter, "two", workflow_id=bid, **opts)  # type: ignore[arg-type]
        assert (again.final_output, again.run_id) == ("counted: one", first.run_id)

        streamed = Runner.run_streamed(counter, "three", workflow_id=bid, **opts)  # type: ignore[arg-type]
        events = [e async for e in streamed.stream_events()]
        assert events == [] and streamed.final_output == "counted: one"

        cli = await asyncio.to_thread(
            subprocess.run,
            [
                sys.executable,
                "-m",
                "hitl.cli",
                "--address",
                address,
                "--task-queue",
                tq,
                "run",
                "Counter",
                "four",
                "--id",
                bid,
                "--wait",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert cli.returncode == 0, cli.stderr
        assert "already exists and has closed; nothing was started" in cli.stdout
        assert "completed: counted: one" in cli.stdout
    assert await runs_named(dev_client, bid) == 1, "one run under the business id, ever"


def test_run_streamed_takes_the_same_keywords_as_run() -> None:
    with pytest.raises(TypeError, match="contxt"):
        Runner.run_streamed(counter, "x", contxt={"a": 1})  # type: ignore[call-arg]


async def test_hitl_run_reads_a_dash_as_its_input_from_stdin(
    dev_client: Client, dev_server: object
) -> None:
    """A text too long for an argument, or piped from another command: `hitl run AGENT -`.
    Its lines reach the model as they were, and an output of several lines prints indented."""
    text = "line one\n  line two: 'quoted' $HOME \\n\n" + "x" * 200_000
    address: str = dev_server.address  # type: ignore[attr-defined]
    command = [sys.executable, "-m", "hitl.cli", "--address", address, "--task-queue"]
    async with serving(dev_client, counter) as tq:
        cli = await asyncio.to_thread(
            subprocess.run,
            [*command, tq, "run", "Counter", "-", "--wait"],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert cli.returncode == 0, cli.stderr
        [started, *shown] = cli.stdout.splitlines()
        out = await dev_client.get_workflow_handle(started.removeprefix("started ")).result()
    assert out["final_output"] == f"counted: {text}", "the text as it was piped"
    line_two = "      line two: 'quoted' $HOME \\n"  # a backslash and an n, as typed
    assert shown == ["completed:", "    counted: line one", line_two, "    " + "x" * 200_000]


async def test_the_sdk_cores_own_warnings_go_to_stderr_never_into_the_output(
    dev_client: Client, dev_server: object
) -> None:
    """A 700 KB input is over the SDK core's payload warning size (512 KiB): the core's
    warning (TMPRL1103) once came out on standard output, colour codes and all, mixed into
    what the command printed. Now standard output holds the command's line alone."""
    address: str = dev_server.address  # type: ignore[attr-defined]
    tq = f"big-input-{uuid.uuid4().hex[:8]}"  # no worker: the run waits, which is enough
    command = [sys.executable, "-m", "hitl.cli", "--address", address, "--task-queue", tq]
    cli = await asyncio.to_thread(
        subprocess.run,
        [*command, "run", "Counter", "-"],
        input="y" * 700_000,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert cli.returncode == 0, cli.stderr
    [line] = cli.stdout.splitlines()
    assert line.startswith("started run-counter-"), cli.stdout[:300]
    assert "[TMPRL1103]" in cli.stderr, cli.stderr[:300]
    assert "\x1b" not in cli.stderr and "\\u001b" not in cli.stderr, "no colour codes"
    await dev_client.get_workflow_handle(line.removeprefix("started ")).terminate("test over")


async def test_hitl_run_refuses_an_input_that_is_not_utf8_and_starts_nothing(
    dev_client: Client, dev_server: object
) -> None:
    """Bytes no payload can carry, piped or as the argument: one line, exit 1, no run."""
    address: str = dev_server.address  # type: ignore[attr-defined]
    tq = f"not-utf8-{uuid.uuid4().hex[:8]}"
    command = [sys.executable, "-m", "hitl.cli", "--address", address, "--task-queue", tq, "run"]
    cases = [
        (["Counter", "-"], b"refund \xff order", "standard input is not UTF-8 text (byte 7)"),
        ([b"Counter", b"\xfe"], b"", "the input is not UTF-8 text (byte 0)"),
    ]
    for args, piped, said in cases:
        cli = await asyncio.to_thread(
            subprocess.run,
            [*command, *args],
            input=piped,
            capture_output=True,
            timeout=60,
            cwd=ROOT,
        )
        assert cli.returncode == 1, cli.stderr
        assert cli.stderr.decode() == f"hitl: {said}; nothing started\n"
        assert cli.stdout == b"", "nothing started"
    assert [w async for w in dev_client.list_workflows(f"TaskQueue = '{tq}'")] == []
