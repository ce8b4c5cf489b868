"""RunConfig parity: guardrails, hooks, context, tool timeouts (time-skipping server)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.converter import PayloadConverter
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
    ToolContext,
    ToolTimeoutError,
    UserError,
    allow,
    connect,
    function_tool,
    handoff,
)
from hitl.activities.model import input_digest
from hitl.agent import HandoffInputData
from hitl.connection import WORKER_GRACE_SECONDS
from hitl.errors import (
    AgentsException,
    InputGuardrailTripwireTriggered,
    OutputGuardrailTripwireTriggered,
    ToolInputGuardrailTripwireTriggered,
)
from hitl.guardrails import (
    GuardrailFunctionOutput,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    input_guardrail,
    output_guardrail,
    tool_input_guardrail,
)
from hitl.run_config import CallModelData, ModelInputData
from hitl.wire import ModelResponse, RunStatus
from tests.helpers import (
    Ledger,
    activity_count,
    event_count,
    local_markers,
    record_effect,
    serving,
    tool_started,
)


def echo_script(req: ModelRequest) -> ModelReply:
    return ModelReply.say(f"saw {len(req.input)} items: {req.last_user_text()}")


# ----------------------------------------------------------------------------- input/output


@allow  # a RunConfig names it: workers must allow it (hitl.refs)
@input_guardrail
def no_passwords(
    ctx: RunContextWrapper[object], agent: object, text: object
) -> GuardrailFunctionOutput:
    found = "password" in str(text).lower()
    return GuardrailFunctionOutput(
        output_info={"reason": "secret" if found else "ok"}, tripwire_triggered=found
    )


@allow  # a RunConfig names it: workers must allow it (hitl.refs)
@output_guardrail
def no_refunds_promised(
    ctx: RunContextWrapper[object], agent: object, out: object
) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(
        output_info={"len": len(str(out))}, tripwire_triggered="refund" in str(out)
    )


guarded = Agent(
    name="Guarded",
    model=ScriptedModel(echo_script, "tests.config.echo"),
    input_guardrails=[no_passwords],
)


async def test_input_guardrail_tripwire_stops_before_the_model(
    ts_env: WorkflowEnvironment,
) -> None:
    async with serving(ts_env.client, guarded) as tq:
        ok = await Runner.run(guarded, "hello", client=ts_env.client, task_queue=tq, serve=False)
        assert ok.final_output == "saw 1 items: hello"
        with pytest.raises(InputGuardrailTripwireTriggered) as err:
            await Runner.run(
                guarded,
                "my password is hunter2",
                client=ts_env.client,
                task_queue=tq,
                serve=False,
                workflow_id=f"{tq}-tripped",
            )
        status = await ts_env.client.get_workflow_handle(f"{tq}-tripped").query(
            "status", result_type=RunStatus
        )
    assert err.value.guardrail_name == "no_passwords"
    assert err.value.output_info == {"reason": "secret"}
    assert status.usage.requests == 0, "the model was never called"


async def test_run_level_output_guardrail_tripwire(ts_env: WorkflowEnvironment) -> None:
    plain = Agent(name="Plain", model=ScriptedModel(echo_script, "tests.config.echo2"))
    async with serving(ts_env.client, plain) as tq:
        cfg = RunConfig(output_guardrails=[no_refunds_promised])
        with pytest.raises(OutputGuardrailTripwireTriggered) as err:
            await Runner.run(
                plain,
                "promise a refund",
                run_config=cfg,
                client=ts_env.client,
                task_queue=tq,
                serve=False,
            )
        ok = await Runner.run(
            plain, "hi", run_config=cfg, client=ts_env.client, task_queue=tq, serve=False
        )
    assert err.value.guardrail_name == "no_refunds_promised"
    assert err.value.output_info == {"len": len("saw 1 items: promise a refund")}
    assert ok.final_output == "saw 1 items: hi"


# ----------------------------------------------------------------------------- tool guardrails


@tool_input_guardrail
def verdict_from_file(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
    """Reads the verdict from HITL_TEST_VERDICT: allow, deny or stop."""
    verdict = Path(os.environ["HITL_TEST_VERDICT"]).read_text().strip()
    if verdict == "deny":
        return ToolGuardrailFunctionOutput.reject_content(
            f"Blocked by policy at {data.stage}: amounts over 100 need a manager."
        )
    if verdict == "stop":
        return ToolGuardrailFunctionOutput.raise_exception(output_info={"stage": data.stage})
    return ToolGuardrailFunctionOutput.allow()


@function_tool(needs_approval=True, tool_input_guardrails=[verdict_from_file])
def pay(ctx: ToolContext[object], amount: int) -> str:
    """Pay an amount.

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "pay")
    return f"paid {amount}"


def pay_once(req: ModelRequest) -> ModelReply:
    if not req.tool_results():
        return ModelReply.call("pay", {"amount": 500})
    return ModelReply.say(req.tool_results()[0].output or "")


payer = Agent(name="Payer", tools=[pay], model=ScriptedModel(pay_once, "tests.config.pay"))
PRE = RunConfig(pre_approval_tool_input_guardrails=True)


@pytest.fixture
def verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "verdict"
    monkeypatch.setenv("HITL_TEST_VERDICT", str(path))
    return path


async def test_pre_approval_guardrail_refusal_creates_no_approval(
    ts_env: WorkflowEnvironment, verdict: Path, ledger: Ledger
) -> None:
    verdict.write_text("deny")
    async with serving(ts_env.client, payer) as tq:
        result = await Runner.run(
            payer, "pay", run_config=PRE, client=ts_env.client, task_queue=tq, serve=False
        )
    assert result.interruptions == [] and result.decisions == []
    assert result.final_output == (
        "Blocked by policy at pre_approval: amounts over 100 need a manager."
    )
    hist = await ts_env.client.get_workflow_handle(result.workflow_id).fetch_history()
    assert activity_count(hist, "execute_tool") == 0 and ledger.count() == 0


async def test_pre_approval_guardrail_allows_then_runs_again_after_approval(
    ts_env: WorkflowEnvironment, verdict: Path, ledger: Ledger
) -> None:
    verdict.write_text("allow")
    async with serving(ts_env.client, payer) as tq:
        result = await Runner.run(
            payer, "pay", run_config=PRE, client=ts_env.client, task_queue=tq, serve=False
        )
        assert [i.name for i in result.interruptions] == ["pay"], "allowed: it still pauses"
        verdict.write_text("deny")  # the call became unsafe while waiting
        state = result.to_state()
        state.approve(result.interruptions[0])
        result = await Runner.run(payer, state, client=ts_env.client, task_queue=tq, serve=False)
    assert result.final_output == (
        "Blocked by policy at execution: amounts over 100 need a manager."
    )
    assert ledger.count() == 0, "the approved call was still blocked before running"


async def test_tool_guardrail_can_stop_the_run(
    ts_env: WorkflowEnvironment, verdict: Path, ledger: Ledger
) -> None:
    verdict.write_text("stop")
    async with serving(ts_env.client, payer) as tq:
        with pytest.raises(ToolInputGuardrailTripwireTriggered) as err:
            await Runner.run(
                payer, "pay", run_config=PRE, client=ts_env.client, task_queue=tq, serve=False
            )
    assert err.value.output_info == {"stage": "pre_approval"}
    assert ledger.count() == 0


async def test_tool_guardrail_can_stop_the_run_when_the_call_executes(
    ts_env: WorkflowEnvironment, verdict: Path, ledger: Ledger
) -> None:
    verdict.write_text("allow")
    async with serving(ts_env.client, payer) as tq:
        result = await Runner.run(payer, "pay", client=ts_env.client, task_queue=tq, serve=False)
        verdict.write_text("stop")  # it became unsafe while it waited
        state = result.to_state()
        state.approve(result.interruptions[0])
        with pytest.raises(ToolInputGuardrailTripwireTriggered) as err:
            await Runner.run(payer, state, client=ts_env.client, task_queue=tq, serve=False)
    assert err.value.output_info == {"stage": "execution"}
    assert ledger.count() == 0


GUARD_CALLS: list[str] = []


@tool_input_guardrail
async def slow_check(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
    """Takes longer than the tool's heartbeat timeout (a policy service that answers slowly)."""
    GUARD_CALLS.append(data.call_id)
    await asyncio.sleep(3.5)
    return ToolGuardrailFunctionOutput.allow()


@function_tool(heartbeat_timeout=1.5, max_attempts=3, tool_input_guardrails=[slow_check])
def archive(ctx: ToolContext[object], ticket: int) -> str:
    """Archive a ticket.

    Args:
        ticket: The ticket.
    """
    record_effect(ctx, "archive")
    return f"archived {ticket}"


def archive_once(req: ModelRequest) -> ModelReply:
    if not req.tool_results():
        return ModelReply.call("archive", {"ticket": 7})
    return ModelReply.say(req.tool_results()[0].output or "")


async def test_a_slow_tool_guardrail_is_covered_by_the_tools_heartbeats(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """The heartbeat timeout runs from the activity's start: the guardrail's 3.5 s count too."""
    archiver = Agent(
        name="Archiver", tools=[archive], model=ScriptedModel(archive_once, "tests.config.arch")
    )
    GUARD_CALLS.clear()
    async with serving(ts_env.client, archiver) as tq:
        result = await Runner.run(
            archiver, "archive", client=ts_env.client, task_queue=tq, serve=False
        )
    assert result.final_output == "archived 7"
    assert len(GUARD_CALLS) == 1, "one attempt: the guardrail ran once"
    assert ledger.count() == 1
    hist = await ts_env.client.get_workflow_handle(result.workflow_id).fetch_history()
    _, started = tool_started(hist)
    assert started.attempt == 1, started.last_failure


# ----------------------------------------------------------------------------- handoff hooks


def second_script(req: ModelRequest) -> ModelReply:
    roles = ",".join(str(i.get("role") or i.get("type")) for i in req.input)
    return ModelReply.say(f"second saw [{roles}]: {req.input[0].get('content', '')!s:.60}")


def first_script(req: ModelRequest) -> ModelReply:
    return ModelReply.call(req.tool_names()[0])


@allow  # a RunConfig names it: workers must allow it (hitl.refs)
def keep_only_handoff(data: HandoffInputData) -> HandoffInputData:
    """A handoff filter that drops the history: the next agent sees only the handoff."""
    return data.clone(input_history=[], pre_handoff_items=[])


def make_pair(name: str, **handoff_kwargs: object) -> Agent[None]:
    second = Agent(name=f"{name} second", model=ScriptedModel(second_script, f"t.{name}.2"))
    return Agent(
        name=name,
        handoffs=[handoff(second, **handoff_kwargs)],  # type: ignore[arg-type]
        model=ScriptedModel(first_script, f"t.{name}.1"),
    )


plain_pair = make_pair("PlainPair")
filtered_pair = make_pair("FilteredPair", input_filter=keep_only_handoff)
nested_pair = make_pair("NestedPair", nest_handoff_history=True)


async def test_handoff_input_filters_and_nested_history(ts_env: WorkflowEnvironment) -> None:
    async with serving(ts_env.client, plain_pair, filtered_pair, nested_pair) as tq:
        run = {"client": ts_env.client, "task_queue": tq, "serve": False}
        plain = await Runner.run(plain_pair, "hello there", **run)  # type: ignore[arg-type]
        dropped = await Runner.run(filtered_pair, "hello there", **run)  # type: ignore[arg-type]
        nested = await Runner.run(nested_pair, "hello there", **run)  # type: ignore[arg-type]
        globally = await Runner.run(
            plain_pair,
            "hello there",
            run_config=RunConfig(handoff_input_filter=keep_only_handoff),
            **run,  # type: ignore[arg-type]
        )
    assert plain.final_output.startswith(
        "second saw [user,function_call,function_call_output]: hello there"
    )
    assert dropped.final_output.startswith("second saw [function_call,function_call_output]")
    assert globally.final_output == dropped.final_output
    assert nested.final_output.startswith(
        "second saw [assistant,function_call,function_call_output]: For context, here is"
    )


# ----------------------------------------------------------------------------- model input


@allow  # a RunConfig names it: workers must allow it (hitl.refs)
def keep_last_two(data: CallModelData[object]) -> ModelInputData:
    return ModelInputData(input=data.model_data.input[-2:], instructions="trimmed")


def count_script(req: ModelRequest) -> ModelReply:
    if req.turn < 2:
        return ModelReply.call("note", {"text": f"n{req.turn}"})
    return ModelReply.say(f"{len(req.input)} items, instructions={req.instructions}")


@function_tool
def note(text: str) -> str:
    """Take a note.

    Args:
        text: The note.
    """
    return text


counter = Agent(
    name="Counter",
    instructions="original",
    tools=[note],
    model=ScriptedModel(count_script, "tests.config.counter"),
)


# The same agent with its model as a regular activity: the transcript is fetched by query.
remote_counter = Agent(
    name="Remote counter",
    instructions="original",
    tools=[note],
    model=ScriptedModel(count_script, "tests.config.counter.remote", local_activity=False),
)


def model_responses(hist: WorkflowHistory, conv: PayloadConverter) -> list[ModelResponse]:
    """Every `call_model` result recorded in a history (local activity markers included)."""
    scheduled: dict[int, str] = {}
    found = []
    for e in hist.events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = e.activity_task_completed_event_attributes
            if scheduled.get(done.scheduled_event_id) == "call_model":
                found.append(conv.from_payload(done.result.payloads[0], ModelResponse))
        elif e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = e.marker_recorded_event_attributes
            if marker.marker_name != "core_local_activity" or "result" not in marker.details:
                continue
            data = json.loads(marker.details["data"].payloads[0].data)
            if data["activity_type"] == "call_model":
                result = marker.details["result"].payloads[0]
                found.append(conv.from_payload(result, ModelResponse))
    return found


@pytest.mark.parametrize("agent", [counter, remote_counter], ids=["local", "remote"])
async def test_call_model_input_filter_trims_what_the_model_receives(
    ts_env: WorkflowEnvironment, agent: Agent[None]
) -> None:
    client = ts_env.client
    async with serving(client, agent) as tq:
        full = await Runner.run(agent, "go", client=client, task_queue=tq, serve=False)
        trimmed = await Runner.run(
            agent,
            "go",
            run_config=RunConfig(call_model_input_filter=keep_last_two),
            client=client,
            task_queue=tq,
            serve=False,
        )
    assert full.final_output == "5 items, instructions=original"
    assert trimmed.final_output == "2 items, instructions=trimmed"
    transcript = trimmed.to_input_list()
    assert len(transcript) == 6, "the run's own transcript is not trimmed"

    # The filter's effect is in history, with each model response: counts, whether the
    # instructions changed, and a digest of exactly what the model received.
    conv = client.data_converter.payload_converter
    unfiltered = model_responses(
        await client.get_workflow_handle(full.workflow_id).fetch_history(), conv
    )
    assert [r.input_filter for r in unfiltered] == [None, None, None]
    hist = await client.get_workflow_handle(trimmed.workflow_id).fetch_history()
    records = [r.input_filter for r in model_responses(hist, conv)]
    assert all(r is not None for r in records) and len(records) == 3
    seen = [transcript[: 1 + 2 * turn][-2:] for turn in range(3)]  # what keep_last_two left
    assert [(r.items_before, r.items, r.instructions_changed) for r in records if r] == [
        (1, 1, True),
        (3, 2, True),
        (5, 2, True),
    ]
    assert [r.digest for r in records if r] == [input_digest(i, "trimmed") for i in seen]
    assert records[2] and records[2].digest != input_digest(transcript[:5], "trimmed")


# ----------------------------------------------------------------------------- tool timeouts


@function_tool(timeout=1.0, max_attempts=1, heartbeat_timeout=None)
async def slow_lookup(seconds: float) -> str:
    """Look something up slowly.

    Args:
        seconds: How long it takes.
    """
    await asyncio.sleep(seconds)
    return "found"


def lookup_script(req: ModelRequest) -> ModelReply:
    if not req.tool_results():
        return ModelReply.call(req.tool_names()[0], {"seconds": 5})
    return ModelReply.say(req.tool_results()[0].output or "")


async def test_tool_timeout_as_message_or_as_failure(ts_env: WorkflowEnvironment) -> None:
    import dataclasses

    soft = Agent(
        name="SoftTimeout",
        tools=[slow_lookup],
        model=ScriptedModel(lookup_script, "t.timeout.soft"),
    )
    hard_tool = dataclasses.replace(slow_lookup, timeout_behavior="raise_exception")
    hard = Agent(
        name="HardTimeout", tools=[hard_tool], model=ScriptedModel(lookup_script, "t.timeout.hard")
    )
    async with serving(ts_env.client, soft, hard) as tq:
        result = await Runner.run(soft, "go", client=ts_env.client, task_queue=tq, serve=False)
        assert result.final_output == "Tool 'slow_lookup' timed out after 1 seconds."
        with pytest.raises(ToolTimeoutError, match="timed out after 1 seconds"):
            await Runner.run(hard, "go", client=ts_env.client, task_queue=tq, serve=False)


# ----------------------------------------------------------------------------- more hooks


@allow  # a RunConfig names it: workers must allow it (hitl.refs)
def mapped_history(transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A `handoff_history_mapper`: the transcript as one user message listing its texts."""
    texts = [str(i.get("content") or i.get("name") or i.get("type")) for i in transcript]
    return [{"role": "user", "content": f"mapped {len(transcript)}: {' | '.join(texts)}"}]


async def test_handoff_history_mapper_builds_what_the_next_agent_receives(
    ts_env: WorkflowEnvironment,
) -> None:
    async with serving(ts_env.client, plain_pair) as tq:
        result = await Runner.run(
            plain_pair,
            "hello there",
            run_config=RunConfig(nest_handoff_history=True, handoff_history_mapper=mapped_history),
            client=ts_env.client,
            task_queue=tq,
            serve=False,
        )
    # Not the default nested summary ("assistant: For context, here is..."): the mapper's
    # items, then the handoff turn itself.
    assert result.final_output == (
        "second saw [user,function_call,function_call_output]: mapped 1: hello there"
    )
    assert result.last_agent.name == "PlainPair second"


async def test_run_level_input_guardrail_tripwire(ts_env: WorkflowEnvironment) -> None:
    plain = Agent(name="Unguarded", model=ScriptedModel(echo_script, "tests.config.echo3"))
    cfg = RunConfig(input_guardrails=[no_passwords])
    async with serving(ts_env.client, plain) as tq:
        ok = await Runner.run(
            plain, "hello", run_config=cfg, client=ts_env.client, task_queue=tq, serve=False
        )
        with pytest.raises(InputGuardrailTripwireTriggered) as err:
            await Runner.run(
                plain,
                "my password is hunter2",
                run_config=cfg,
                client=ts_env.client,
                task_queue=tq,
                serve=False,
                workflow_id=f"{tq}-tripped",
            )
        status = await ts_env.client.get_workflow_handle(f"{tq}-tripped").query(
            "status", result_type=RunStatus
        )
    assert ok.final_output == "saw 1 items: hello"
    assert err.value.guardrail_name == "no_passwords"
    assert err.value.output_info == {"reason": "secret"}
    assert status.usage.requests == 0, "the model was never called"


async def test_agent_level_output_guardrail_tripwire(ts_env: WorkflowEnvironment) -> None:
    careful = Agent(
        name="Careful",
        model=ScriptedModel(echo_script, "tests.config.echo4"),
        output_guardrails=[no_refunds_promised],
    )
    async with serving(ts_env.client, careful) as tq:
        ok = await Runner.run(careful, "hi", client=ts_env.client, task_queue=tq, serve=False)
        with pytest.raises(OutputGuardrailTripwireTriggered) as err:
            await Runner.run(
                careful, "promise a refund", client=ts_env.client, task_queue=tq, serve=False
            )
    assert ok.final_output == "saw 1 items: hi"
    assert err.value.guardrail_name == "no_refunds_promised"
    assert err.value.output_info == {"len": len("saw 1 items: promise a refund")}


# ----------------------------------------------------------------------------- UserError


async def test_an_agent_no_worker_serves_is_a_user_error_at_run_start(
    ts_env: WorkflowEnvironment,
) -> None:
    stranger = Agent(name="Stranger", model=ScriptedModel(echo_script, "tests.config.echo5"))
    started = time.monotonic()
    async with serving(ts_env.client, guarded, plain_pair) as tq:  # polling, for other agents
        with pytest.raises(UserError) as err:
            await Runner.run(
                stranger,
                "hi",
                client=ts_env.client,
                task_queue=tq,
                serve=False,
                workflow_id=f"{tq}-stranger",
            )
        hist = await ts_env.client.get_workflow_handle(f"{tq}-stranger").fetch_history()
    elapsed = time.monotonic() - started
    assert err.value.message == (
        "no agent named 'Stranger' is registered on this worker (it serves: 'Guarded', 'PlainPair')"
    )
    # Said at once, by the run (not `NoWorkerError` after the grace period, not retried).
    assert elapsed < WORKER_GRACE_SECONDS
    assert event_count(hist, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED) == 1
    assert len(local_markers(hist)) == 1, "one resolve attempt"
    assert activity_count(hist, "call_model") == 0


# ----------------------------------------------------------------------------- typed at any client


@function_tool(needs_approval=True, timeout=1.0, max_attempts=1, timeout_behavior="raise_exception")
async def slow_wire(seconds: float) -> str:
    """Wire money slowly (needs approval).

    Args:
        seconds: How long it takes.
    """
    await asyncio.sleep(seconds)
    return "wired"


@function_tool(needs_approval=True)
def promise(text: str) -> str:
    """Make a promise to the customer (needs approval).

    Args:
        text: The promise.
    """
    return text


def call_then_repeat(req: ModelRequest) -> ModelReply:
    if not req.tool_results():
        name = req.tool_names()[0]
        args = {"seconds": 5} if name == "slow_wire" else {"text": "a refund, for sure"}
        return ModelReply.call(name, args)
    return ModelReply.say(f"done: {req.tool_results()[0].output}")


wirer = Agent(
    name="Wirer", tools=[slow_wire], model=ScriptedModel(call_then_repeat, "tests.config.wire")
)
promiser = Agent(
    name="Promiser",
    tools=[promise],
    output_guardrails=[no_refunds_promised],
    model=ScriptedModel(call_then_repeat, "tests.config.promise"),
)


@pytest.mark.parametrize(
    ("agent", "error"),
    [(wirer, ToolTimeoutError), (promiser, OutputGuardrailTripwireTriggered)],
    ids=["tool-timeout", "output-guardrail"],
)
async def test_another_client_awaiting_a_failed_run_gets_the_typed_exception(
    ts_env: WorkflowEnvironment, agent: Agent[None], error: type[AgentsException]
) -> None:
    address = ts_env.client.service_client.config.target_host
    async with serving(ts_env.client, agent) as tq:
        paused = await Runner.run(
            agent, "go", client=ts_env.client, task_queue=tq, serve=False, workflow_id=f"{tq}-run"
        )
        saved = paused.to_state().to_string()  # the run's handle, as another process gets it

        # A second client approves; the run then fails, and that client sees why, typed.
        approver = await connect(address=address)
        state = await RunState.from_string(agent, saved)
        state.approve(state.interruptions[0])
        with pytest.raises(error) as first:
            await Runner.run(agent, state, client=approver, task_queue=tq, serve=False)

        # A third client only awaits the (already failed) run: by its state, or by its id.
        watcher = await connect(address=address)
        with pytest.raises(error) as by_state:
            await Runner.run(
                agent, await RunState.from_string(agent, saved), client=watcher, serve=False
            )
        with pytest.raises(error) as by_id:
            await Runner.run(
                agent, "go", client=watcher, task_queue=tq, serve=False, workflow_id=f"{tq}-run"
            )
    for caught in (first, by_state, by_id):
        assert type(caught.value) is error
        assert caught.value.details == first.value.details
    if error is ToolTimeoutError:
        assert first.value.details == {"tool": "slow_wire", "timeout": 1.0}
    else:
        assert first.value.details == {
            "guardrail": "no_refunds_promised",
            "output_info": {"len": len("done: a refund, for sure")},
        }
