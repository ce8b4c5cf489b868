"""The run context: typed, resumed with a new one (merge or replace), strict, custom
serializers; guardrails and instructions that read it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio.testing import WorkflowEnvironment

from hitl import (
    Agent,
    ModelReply,
    ModelRequest,
    RunConfig,
    RunContextWrapper,
    Runner,
    RunState,
    ScriptedModel,
    UserError,
    allow,
    function_tool,
)
from hitl.errors import (
    InputGuardrailTripwireTriggered,
)
from hitl.guardrails import (
    GuardrailFunctionOutput,
    input_guardrail,
)
from tests.helpers import (
    ROOT,
    serving,
)

# ----------------------------------------------------------------------------- context


class Ticket(BaseModel):
    customer: str
    visits: int = 0


@function_tool(needs_approval=True)
def greet(ctx: RunContextWrapper[Ticket]) -> str:
    """Greet the ticket's customer and count the visit."""
    ctx.context.visits += 1
    return f"Hello {ctx.context.customer} (visit {ctx.context.visits})"


def greet_twice(req: ModelRequest) -> ModelReply:
    done = req.results_for("greet")
    if len(done) < 2:
        return ModelReply.call("greet")
    return ModelReply.say(" / ".join(r.output or "" for r in done))


greeter = Agent(name="Greeter", tools=[greet], model=ScriptedModel(greet_twice, "t.greeter"))

RESUME = """
import asyncio, pathlib, sys
from hitl import Runner, RunState, connect
from tests.workflows.test_run_context import Ticket, greeter
async def main():
    client = await connect(address=sys.argv[1])
    text = pathlib.Path(sys.argv[2]).read_text()
    state = await RunState.from_string_with_context(
        greeter, text, Ticket(customer="Bob"), context_strategy=sys.argv[4])
    result = await Runner.run(greeter, state, client=client, task_queue=sys.argv[3], serve=False)
    print(result.final_output if not result.interruptions else "PAUSED")
asyncio.run(main())
"""


async def _resume_elsewhere(address: str, saved: Path, tq: str, strategy: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        RESUME,
        address,
        str(saved),
        tq,
        strategy,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode().strip().splitlines()[-1]


@pytest.mark.parametrize("strategy", ["merge", "replace"])
async def test_resume_with_a_new_context_merge_or_replace(
    ts_env: WorkflowEnvironment, tmp_path: Path, strategy: str
) -> None:
    client = ts_env.client
    address = client.service_client.config.target_host
    async with serving(client, greeter) as tq:
        result = await Runner.run(
            greeter, "hi", context=Ticket(customer="Ada"), client=client, task_queue=tq, serve=False
        )
        state = result.to_state()
        state.approve(result.interruptions[0], always_approve=True)
        saved = tmp_path / "state.json"
        saved.write_text(state.to_string())
        outcome = await _resume_elsewhere(address, saved, tq, strategy)
        if strategy == "replace":
            # The decision made before saving was dropped with the old context: still paused.
            assert outcome == "PAUSED"
            state = await RunState.from_string(greeter, saved.read_text())
            state.decisions = {}
            state.approve(state.interruptions[0], always_approve=True)
            outcome = (
                await Runner.run(greeter, state, client=client, task_queue=tq, serve=False)
            ).final_output
    # The new context reached the tools, and the tool's own change (visits) persisted.
    assert outcome == "Hello Bob (visit 1) / Hello Bob (visit 2)"


@pytest.mark.parametrize("override", [False, True])
async def test_a_saved_state_carries_its_context_with_the_sdks_options(
    ts_env: WorkflowEnvironment, override: bool
) -> None:
    """`result.to_state().to_string()` keeps the context it started with; `from_string` gets it
    back through the caller's `context_deserializer`, or replaces it with `context_override`
    (which the run's tools then see)."""
    client = ts_env.client
    async with serving(client, greeter) as tq:
        result = await Runner.run(
            greeter, "hi", context=Ticket(customer="Ada"), client=client, task_queue=tq, serve=False
        )
        text = result.to_state().to_string()
        with pytest.raises(UserError, match="context_deserializer="):
            await RunState.from_string(greeter, text, strict_context=True)
        if override:
            state = await RunState.from_string(
                greeter, text, context_override=Ticket(customer="Bob"), strict_context=True
            )
        else:
            state = await RunState.from_string(
                greeter, text, context_deserializer=Ticket.model_validate, strict_context=True
            )
            assert state.context == Ticket(customer="Ada")
        state.approve(state.interruptions[0], always_approve=True)
        done = await Runner.run(greeter, state, client=client, task_queue=tq, serve=False)
    who = "Bob" if override else "Ada"
    assert done.final_output == f"Hello {who} (visit 1) / Hello {who} (visit 2)"


class Opaque:
    def __init__(self, secret: str) -> None:
        self.secret = secret


async def test_strict_context_refuses_what_it_cannot_serialize(
    ts_env: WorkflowEnvironment,
) -> None:
    with pytest.raises(UserError, match="JSON-serializable"):
        await Runner.run(
            greeter,
            "hi",
            context=Opaque("x"),
            run_config=RunConfig(strict_context=True),
            client=ts_env.client,
            task_queue="unused",
            serve=False,
        )


class Tally:
    """A context that is not JSON by itself."""

    def __init__(self, n: int) -> None:
        self.n = n


@allow  # a RunConfig names it: workers must allow it (hitl.refs)
def tally_from_json(value: dict[str, int]) -> Tally:
    return Tally(value["n"])


@function_tool
def bump(ctx: RunContextWrapper[Tally]) -> str:
    """Add one to the tally."""
    ctx.context.n += 1
    return f"n={ctx.context.n}"


def bump_twice(req: ModelRequest) -> ModelReply:
    done = req.results_for("bump")
    if len(done) < 2:
        return ModelReply.call("bump")
    return ModelReply.say(" / ".join(r.output or "" for r in done))


bumper = Agent(name="Bumper", tools=[bump], model=ScriptedModel(bump_twice, "tests.config.bump"))


async def test_a_context_with_a_custom_serializer_is_read_only_for_tools(
    ts_env: WorkflowEnvironment,
) -> None:
    cfg = RunConfig(context_serializer=lambda t: {"n": t.n}, context_deserializer=tally_from_json)
    async with serving(ts_env.client, bumper) as tq:
        result = await Runner.run(
            bumper,
            "go",
            context=Tally(1),
            run_config=cfg,
            client=ts_env.client,
            task_queue=tq,
            serve=False,
        )
    # Rebuilt by the deserializer for each call; the first call's change was not kept (the
    # docs/configuration.md says so: workers cannot serialize such a context back).
    assert result.final_output == "n=2 / n=2"


# ----------------------------------------------------------------------------- typed context


def ticket_instructions(ctx: RunContextWrapper[Ticket], agent: object) -> str:
    return (
        f"Help {ctx.context.customer} ({type(ctx.context).__name__}, visits {ctx.context.visits})"
    )


@allow  # a RunConfig names it: workers must allow it (hitl.refs)
@input_guardrail
def known_customers_only(
    ctx: RunContextWrapper[Ticket], agent: object, text: object
) -> GuardrailFunctionOutput:
    ticket = ctx.context
    return GuardrailFunctionOutput(
        output_info={"customer": ticket.customer, "type": type(ticket).__name__},
        tripwire_triggered=ticket.customer == "Mallory",
    )


def instructions_script(req: ModelRequest) -> ModelReply:
    return ModelReply.say(f"instructions: {req.instructions}")


desk = Agent(
    name="Ticket desk",
    instructions=ticket_instructions,
    input_guardrails=[known_customers_only],
    model=ScriptedModel(instructions_script, "tests.config.desk"),
)


async def test_guardrails_and_dynamic_instructions_read_the_typed_context(
    ts_env: WorkflowEnvironment,
) -> None:
    async with serving(ts_env.client, desk) as tq:
        run = {"client": ts_env.client, "task_queue": tq, "serve": False}
        ok = await Runner.run(desk, "hi", context=Ticket(customer="Ada", visits=3), **run)  # type: ignore[arg-type]
        with pytest.raises(InputGuardrailTripwireTriggered) as err:
            await Runner.run(desk, "hi", context=Ticket(customer="Mallory"), **run)  # type: ignore[arg-type]
    # Both were given the context rebuilt as a `Ticket` (not a dict) on the worker.
    assert ok.final_output == "instructions: Help Ada (Ticket, visits 3)"
    assert err.value.output_info == {"customer": "Mallory", "type": "Ticket"}
