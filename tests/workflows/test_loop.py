"""The agent loop's other paths: max_turns, structured output, errors the model must see."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from hitl import (
    Agent,
    MaxTurnsExceeded,
    ModelBehaviorError,
    ModelReply,
    ModelRequest,
    RunConfig,
    RunContextWrapper,
    RunErrorHandlerInput,
    RunErrorHandlerResult,
    Runner,
    ScriptedModel,
    ToolContext,
    ToolErrorFormatterArgs,
    UserError,
    allow,
    function_tool,
)
from hitl.wire import DecisionInput, RunOutput, RunStatus
from tests.helpers import Ledger, activity_count, event_count, serving


@function_tool
def echo(ctx: ToolContext[object], text: str) -> str:
    """Echo text back (records the idempotency key it was given).

    Args:
        text: What to echo.
    """
    import os

    path = os.environ.get("HITL_TEST_LEDGER")
    if path:
        Ledger(Path(path)).record(ctx.idempotency_key, "echo", ctx.tool_arguments)
    return f"echo: {text}"


@function_tool
def explode(reason: str) -> str:
    """Always fails.

    Args:
        reason: Why.
    """
    raise RuntimeError(f"boom ({reason})")


# ----------------------------------------------------------------------------- max_turns


def forever(req: ModelRequest) -> ModelReply:
    return ModelReply.call("echo", {"text": f"turn {req.turn}"})


looping_agent = Agent(
    name="Looper", tools=[echo], model=ScriptedModel(forever, "tests.loop.forever")
)


async def test_max_turns_raises_typed_error(ts_env: WorkflowEnvironment, cache_size: int) -> None:
    async with serving(ts_env.client, looping_agent, cache=cache_size) as tq:
        with pytest.raises(MaxTurnsExceeded, match=r"Max turns \(3\) exceeded"):
            await Runner.run(
                looping_agent, "go", max_turns=3, client=ts_env.client, task_queue=tq, serve=False
            )


@allow  # a RunConfig names it: workers must allow it (hitl.refs)
def on_max_turns(data: RunErrorHandlerInput[object]) -> RunErrorHandlerResult:
    """A module-level error handler (workers import it by name)."""
    return RunErrorHandlerResult(
        final_output=f"Stopped after {data.max_turns} turns ({len(data.new_items)} items).",
        include_in_history=False,
    )


@allow  # a RunConfig names it: workers must allow it (hitl.refs)
def on_max_turns_in_history(data: RunErrorHandlerInput[object]) -> RunErrorHandlerResult:
    return RunErrorHandlerResult(final_output="Gave up.", include_in_history=True)


async def test_max_turns_error_handler_supplies_final_output(
    ts_env: WorkflowEnvironment,
) -> None:
    async with serving(ts_env.client, looping_agent) as tq:
        result = await Runner.run(
            looping_agent,
            "go",
            max_turns=2,
            error_handlers={"max_turns": on_max_turns},
            client=ts_env.client,
            task_queue=tq,
            serve=False,
        )
        assert result.final_output == "Stopped after 2 turns (4 items)."
        assert all(i.type != "message_output_item" for i in result.new_items)

        result = await Runner.run(
            looping_agent,
            "go",
            run_config=RunConfig(
                max_turns=1, error_handlers={"max_turns": on_max_turns_in_history}
            ),
            client=ts_env.client,
            task_queue=tq,
            serve=False,
        )
        assert result.final_output == "Gave up."
        assert result.to_input_list()[-1]["content"][0]["text"] == "Gave up."


async def test_lambda_error_handler_is_refused_at_the_client(ts_env: WorkflowEnvironment) -> None:
    with pytest.raises(UserError, match="module-level function"):
        await Runner.run(
            looping_agent,
            "go",
            error_handlers={"max_turns": lambda d: "x"},
            client=ts_env.client,
            task_queue="unused",
            serve=False,
        )


# ----------------------------------------------------------------------------- structured output


class Verdict(BaseModel):
    approved: bool
    amount: float
    note: str | None = None


def verdict_script(req: ModelRequest) -> ModelReply:
    if "broken" in req.last_user_text():
        return ModelReply.say('{"approved": "maybe"}')
    return ModelReply.output(Verdict(approved=True, amount=12.5))


judge = Agent(
    name="Judge",
    output_type=Verdict,
    model=ScriptedModel(verdict_script, "tests.loop.verdict"),
)


async def test_structured_output_is_validated(ts_env: WorkflowEnvironment, cache_size: int) -> None:
    async with serving(ts_env.client, judge, cache=cache_size) as tq:
        result = await Runner.run(
            judge, "judge this", client=ts_env.client, task_queue=tq, serve=False
        )
        assert result.final_output == Verdict(approved=True, amount=12.5)
        assert isinstance(result.final_output, Verdict)
        with pytest.raises(ModelBehaviorError, match="does not validate as Verdict"):
            await Runner.run(judge, "broken", client=ts_env.client, task_queue=tq, serve=False)


def test_output_schema_is_strict() -> None:
    from hitl.agent import capture_graph

    schema = capture_graph(judge).graph.agents["Judge"].output_schema
    assert schema is not None
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["approved", "amount", "note"]


# ----------------------------------------------------------------------------- model mistakes


def clumsy(req: ModelRequest) -> ModelReply:
    """Turn 0: unknown tool; 1: malformed JSON; 2: wrong types; 3: a failing tool; 4: echo."""
    steps = [
        ModelReply.call("does_not_exist", {"x": 1}),
        ModelReply.call("echo", '{"text": '),
        ModelReply.call("echo", {"text": 5, "extra": True}),
        ModelReply.call("explode", {"reason": "test"}),
        ModelReply.call("echo", {"text": "finally"}),
    ]
    if req.turn < len(steps):
        return steps[req.turn]
    outputs = [r.output for r in req.tool_results()]
    return ModelReply.say(json.dumps(outputs))


clumsy_agent = Agent(
    name="Clumsy",
    tools=[echo, dataclasses.replace(explode, max_attempts=2)],
    model=ScriptedModel(clumsy, "tests.loop.clumsy"),
)


async def test_model_mistakes_become_messages_to_the_model(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    async with serving(ts_env.client, clumsy_agent, cache=cache_size) as tq:
        result = await Runner.run(
            clumsy_agent, "try things", client=ts_env.client, task_queue=tq, serve=False
        )
    outputs = json.loads(result.final_output)
    assert outputs[0] == "Tool does_not_exist not found. Available tools: echo, explode."
    assert outputs[1].startswith("Tool arguments are not valid JSON")
    assert "text: Input should be a valid string" in outputs[2]
    assert "extra: Extra inputs are not permitted" in outputs[2]
    assert outputs[3] == (
        "An error occurred while running the tool. Please try again. Error: boom (test)"
    )
    assert outputs[4] == "echo: finally"
    assert ledger.count("echo") == 1
    hist = await ts_env.client.get_workflow_handle(result.workflow_id).fetch_history()
    # Unknown tools and bad JSON never reach an activity. Schema errors of approval-free tools
    # are found by the tool activity (non-retryable); the failing tool is one activity retried.
    assert activity_count(hist, "execute_tool") == 3
    assert event_count(hist, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED) == 0


def hopeless(req: ModelRequest) -> ModelReply:
    return ModelReply.call("nope", {})


hopeless_agent = Agent(
    name="Hopeless", tools=[echo], model=ScriptedModel(hopeless, "tests.loop.hopeless")
)


async def test_consecutive_bad_turns_fail_the_run(ts_env: WorkflowEnvironment) -> None:
    async with serving(ts_env.client, hopeless_agent) as tq:
        with pytest.raises(ModelBehaviorError, match="3 unusable turns in a row"):
            await Runner.run(hopeless_agent, "go", client=ts_env.client, task_queue=tq, serve=False)


def huge_args(req: ModelRequest) -> ModelReply:
    if req.turn == 0:
        return ModelReply.call("echo", {"text": "x" * 300_000})
    return ModelReply.say(req.tool_results()[0].output or "")


huge_agent = Agent(name="Huge", tools=[echo], model=ScriptedModel(huge_args, "tests.loop.huge"))


async def test_oversized_arguments_are_refused_to_the_model(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    async with serving(ts_env.client, huge_agent) as tq:
        result = await Runner.run(
            huge_agent, "go", client=ts_env.client, task_queue=tq, serve=False
        )
    assert result.final_output.startswith("Tool arguments are too large (300012 bytes")
    assert ledger.count() == 0
    hist = await ts_env.client.get_workflow_handle(result.workflow_id).fetch_history()
    assert activity_count(hist, "execute_tool") == 0
    assert event_count(hist, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED) == 0
    size = sum(e.ByteSize() for e in hist.events)
    assert size < 50_000, "the oversized arguments were dropped before reaching history"


# ----------------------------------------------------------------------------- context & hooks


class Ticket(BaseModel):
    customer: str
    tier: str


@function_tool(needs_approval=lambda ctx, params, call_id: ctx.context.tier != "gold")
def greet(ctx: RunContextWrapper[Ticket], greeting: str) -> str:
    """Greet the customer of the ticket.

    Args:
        greeting: The greeting word.
    """
    assert isinstance(ctx.context, Ticket)
    return f"{greeting}, {ctx.context.customer}"


def greeter_instructions(ctx: RunContextWrapper[Ticket], agent: Agent[Ticket]) -> str:
    return f"Serve {ctx.context.customer} ({ctx.context.tier})."


def greeter_script(req: ModelRequest) -> ModelReply:
    if not req.tool_results():
        return ModelReply.call("greet", {"greeting": "Hello"})
    return ModelReply.say(f"{req.instructions} -> {req.tool_results()[0].output}")


greeter = Agent(
    name="Greeter",
    instructions=greeter_instructions,
    tools=[greet],
    model=ScriptedModel(greeter_script, "tests.loop.greeter"),
)


async def test_typed_context_reaches_instructions_predicates_and_tools(
    ts_env: WorkflowEnvironment, cache_size: int
) -> None:
    async with serving(ts_env.client, greeter, cache=cache_size) as tq:
        gold = await Runner.run(
            greeter,
            "hi",
            context=Ticket(customer="Ada", tier="gold"),
            client=ts_env.client,
            task_queue=tq,
            serve=False,
        )
        assert gold.final_output == "Serve Ada (gold). -> Hello, Ada"
        basic = await Runner.run(
            greeter,
            "hi",
            context=Ticket(customer="Bob", tier="basic"),
            client=ts_env.client,
            task_queue=tq,
            serve=False,
        )
        assert [i.name for i in basic.interruptions] == ["greet"], "predicate saw the context"


@allow  # a RunConfig names it: workers must allow it (hitl.refs)
def format_rejection(args: ToolErrorFormatterArgs[object]) -> str | None:
    if args.kind == "approval_rejected":
        return f"A reviewer said no to {args.tool_name} ({args.call_id}). Propose something safer."
    return None


async def test_tool_error_formatter_words_rejections(ts_env: WorkflowEnvironment) -> None:
    from tests.agents import support_agent

    async with serving(ts_env.client, support_agent) as tq:
        result = await Runner.run(
            support_agent,
            "cancel order 8",
            run_config=RunConfig(tool_error_formatter=format_rejection),
            client=ts_env.client,
            task_queue=tq,
            serve=False,
        )
        call_id = result.interruptions[0].call_id
        state = result.to_state()
        state.reject(result.interruptions[0])
        result = await Runner.run(
            support_agent, state, client=ts_env.client, task_queue=tq, serve=False
        )
    assert result.final_output == (
        f"cancel_order: A reviewer said no to cancel_order ({call_id}). Propose something safer."
    )


async def test_idempotency_key_is_workflow_and_call_id(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    def once(req: ModelRequest) -> ModelReply:
        if req.turn == 0:
            return ModelReply.call("echo", {"text": "a"})
        return ModelReply.say("ok")

    agent = Agent(name="Keyed", tools=[echo], model=ScriptedModel(once, "tests.loop.keyed"))
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(agent, "go", client=ts_env.client, task_queue=tq, serve=False)
    # The key names the run's own id of the call (`t<turn>.<n>`), not the model's, which is
    # anything the model sent; the transcript keeps the model's.
    model_id = next(i.raw_item["call_id"] for i in result.new_items if i.type == "tool_call_item")
    assert model_id != "t1.1"
    assert [r[0] for r in ledger.rows()] == [f"{result.workflow_id}:t1.1"]


async def test_the_result_leaves_the_transcript_in_history_once(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """A long run's completion does not repeat its transcript (it is in history already);
    Runner reads it from the closed run by query, and so would `hitl show`."""

    def chatty(req: ModelRequest) -> ModelReply:
        if req.turn < 3:
            return ModelReply.call("echo", {"text": f"note {req.turn} " + "x" * 6000})
        return ModelReply.say("done")

    agent = Agent(name="Chatty", tools=[echo], model=ScriptedModel(chatty, "tests.loop.chatty"))
    async with serving(ts_env.client, agent) as tq:
        result = await Runner.run(agent, "go", client=ts_env.client, task_queue=tq, serve=False)
        handle = ts_env.client.get_workflow_handle(result.workflow_id)
        hist = await handle.fetch_history()
    [done] = [
        e.workflow_execution_completed_event_attributes
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
    ]
    [payload] = done.result.payloads
    out = json.loads(payload.data)
    assert (out["new_items"], out["input_items"], out["transcript_omitted"]) == ([], [], True)
    assert len(payload.data) < 2000, "none of the three 6 KB tool outputs is repeated"
    assert [i.type for i in result.new_items].count("tool_call_output_item") == 3
    assert result.to_input_list()[0] == {"role": "user", "content": "go"}
    assert result.final_output == "done"


# ----------------------------------------------------------------------------- deadlines, signals


@function_tool(needs_approval=True, approval_timeout=timedelta(days=1).total_seconds())
def wire_money(amount: int) -> str:
    """Wire money.

    Args:
        amount: Amount in cents.
    """
    return f"wired {amount}"


def wire_script(req: ModelRequest) -> ModelReply:
    if not req.tool_results():
        return ModelReply.call("wire_money", {"amount": 100})
    return ModelReply.say(req.tool_results()[0].output or "")


wirer = Agent(name="Wirer", tools=[wire_money], model=ScriptedModel(wire_script, "tests.wire"))


async def test_an_approval_deadline_expires_the_call(
    ts_env: WorkflowEnvironment, cache_size: int
) -> None:
    async with serving(ts_env.client, wirer, cache=cache_size) as tq:
        result = await Runner.run(wirer, "pay", client=ts_env.client, task_queue=tq, serve=False)
        assert result.interruptions
        handle = ts_env.client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        await ts_env.sleep(timedelta(days=1, hours=1))
        out = await handle.result()
    assert out.final_output == "Approval for wire_money expired after 86400s without a decision."
    assert [(d.kind, d.source) for d in out.decisions] == [("expired", "deadline")]
    hist = await handle.fetch_history()
    assert activity_count(hist, "execute_tool") == 0


async def test_signals_decide_and_bad_signals_are_recorded_as_refused(
    ts_env: WorkflowEnvironment, cache_size: int
) -> None:
    async with serving(ts_env.client, wirer, cache=cache_size) as tq:
        result = await Runner.run(wirer, "pay", client=ts_env.client, task_queue=tq, serve=False)
        handle = ts_env.client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        call_id = result.interruptions[0].call_id
        await handle.signal("approve", {"call_id": 42})
        await handle.signal("approve", {"call_id": "nope"})
        await handle.signal("reject")
        status = await handle.query("status", result_type=RunStatus)
        assert [(r.name, r.error_type) for r in status.refused] == [
            ("approve", "InvalidDecision"),
            ("approve", "UnknownCall"),
            ("reject", "InvalidDecision"),
        ]
        assert status.phase == "awaiting_approval" and status.decisions == []
        await handle.signal("approve", DecisionInput(call_id=call_id, approver="ops"))
        out = await handle.result()
    assert out.final_output == "wired 100"
    assert [(d.via, d.approver) for d in out.decisions] == [("signal", "ops")]
