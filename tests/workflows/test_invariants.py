"""Invariants that must survive deploys, bad input and races (time-skipping server).

- A run stays pinned to the approval policy it started with (a deploy cannot relax it).
- A malformed start input fails the run with a typed error instead of a stuck task loop.
- A person's repeated decision is idempotent only when it is the same decision.
- Two decisions racing for one call: exactly one wins.
- `always_approve` travels with the run across a handoff.
- A guardrail's refusal is a policy answer, not a model mistake.
- A new context given on resume is still rebuilt by the run's `context_deserializer`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from hitl import (
    Agent,
    MaxTurnsExceeded,
    ModelReply,
    ModelRequest,
    RunConfig,
    RunContextWrapper,
    Runner,
    RunState,
    ScriptedModel,
    ToolContext,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    allow,
    function_tool,
    tool_input_guardrail,
)
from hitl.wire import DecisionInput, DecisionRecord, RunStatus
from tests.agents import support_agent
from tests.helpers import Ledger, event_count, record_effect, serving

UPDATE_ACCEPTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED


def refused_type(err: pytest.ExceptionInfo[WorkflowUpdateFailedError]) -> str | None:
    cause = err.value.cause
    return cause.type if isinstance(cause, ApplicationError) else None


# ----------------------------------------------------------------------------- pinning


def archive_script(req: ModelRequest) -> ModelReply:
    """Archive each document named in the message, one per turn, then report."""
    docs = req.last_user_text().split()
    done = req.results_for("archive")
    if len(done) < len(docs):
        return ModelReply.call("archive", {"doc": docs[len(done)]})
    return ModelReply.say(" | ".join(r.output or "" for r in done))


@function_tool(name_override="archive", needs_approval=True)
def archive_guarded(ctx: ToolContext[object], doc: str) -> str:
    """Archive a document.

    Args:
        doc: The document.
    """
    record_effect(ctx, "archive")
    return f"archived {doc}"


@function_tool(name_override="archive", needs_approval=False)
def archive_relaxed(ctx: ToolContext[object], doc: str) -> str:
    """Archive a document (a later deploy dropped the approval).

    Args:
        doc: The document.
    """
    record_effect(ctx, "archive")
    return f"archived {doc}"


archivist_v1 = Agent(
    name="Archivist",
    tools=[archive_guarded],
    model=ScriptedModel(archive_script, "tests.invariants.archive"),
)
archivist_v2 = Agent(
    name="Archivist",
    tools=[archive_relaxed],
    model=ScriptedModel(archive_script, "tests.invariants.archive"),
)


async def test_a_deploy_cannot_relax_a_parked_runs_approval_policy(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    # (cache=0: the old worker holds no sticky copy of the run for the new one to wait out.)
    async with serving(client, archivist_v1, cache=0) as tq:
        result = await Runner.run(
            archivist_v1, "a.pdf b.pdf", client=client, task_queue=tq, serve=False
        )
        [first] = result.interruptions
    # A new deploy serves the same agent, whose tool no longer asks for approval.
    async with serving(client, archivist_v2, task_queue=tq):
        state = result.to_state()
        state.approve(first)
        result = await Runner.run(archivist_v2, state, client=client, task_queue=tq, serve=False)
        assert [i.arguments for i in result.interruptions] == ['{"doc": "b.pdf"}'], (
            "the run is pinned to the policy it started with: the second call still waits"
        )
        assert ledger.count("archive") == 1
        state = result.to_state()
        state.reject(result.interruptions[0], message="Keep b.pdf.")
        result = await Runner.run(archivist_v2, state, client=client, task_queue=tq, serve=False)
    assert result.final_output == "archived a.pdf | Keep b.pdf."
    assert ledger.count("archive") == 1
    assert [(d.kind, d.source) for d in result.decisions] == [
        ("approve", "person"),
        ("reject", "person"),
    ]


# ----------------------------------------------------------------------------- bad start input


async def test_a_malformed_start_input_fails_the_run_with_a_typed_error(
    ts_env: WorkflowEnvironment,
) -> None:
    client = ts_env.client
    async with serving(client, support_agent) as tq:
        # What `temporal workflow start --input '{"agnt": ...}'` sends: a typo in a field name.
        handle = await client.start_workflow(
            "AgentRun", {"agnt": "Support agent", "input": "hi"}, id=f"bad-{tq}", task_queue=tq
        )
        with pytest.raises(WorkflowFailureError) as err:
            await handle.result()
    cause = err.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "UserError"
    assert "agent: Field required" in cause.message
    assert cause.non_retryable
    hist = await handle.fetch_history()
    assert event_count(hist, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED) == 0, "not a stuck loop"


# ----------------------------------------------------------------------------- repeated decisions


async def _two_pending(ts_env: WorkflowEnvironment, tq: str) -> tuple[Any, str]:
    result = await Runner.run(
        support_agent,
        "cancel order 21 and email a refund notice",
        client=ts_env.client,
        task_queue=tq,
        serve=False,
    )
    cancel = next(i for i in result.interruptions if i.name == "cancel_order")
    return ts_env.client.get_workflow_handle(result.workflow_id), cancel.call_id


async def test_a_repeat_is_idempotent_only_when_it_is_the_same_decision(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    async with serving(ts_env.client, support_agent) as tq:
        handle, call_id = await _two_pending(ts_env, tq)
        first = await handle.execute_update(
            "approve",
            DecisionInput(call_id=call_id, approver="ann", reason="ok"),
            result_type=DecisionRecord,
        )
        again = await handle.execute_update(
            "approve",
            DecisionInput(call_id=call_id, approver="ann", reason="ok"),
            result_type=DecisionRecord,
        )
        assert again == first, "the same decision again is a retry"
        before = event_count(await handle.fetch_history(), UPDATE_ACCEPTED)
        for different in (
            DecisionInput(call_id=call_id, approver="ann", reason="ok", always=True),
            DecisionInput(call_id=call_id, approver="bob", reason="ok"),
            DecisionInput(call_id=call_id, approver="ann", reason="changed my mind"),
        ):
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await handle.execute_update("approve", different)
            assert refused_type(err) == "AlreadyDecided"
            assert "already decided: approve by ann" in str(err.value.cause)
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await handle.execute_update("reject", DecisionInput(call_id=call_id, approver="ann"))
        assert refused_type(err) == "AlreadyDecided"
        hist = await handle.fetch_history()
        assert event_count(hist, UPDATE_ACCEPTED) == before, "refusals leave no trace"
        status = await handle.query("status", result_type=RunStatus)
    assert [(d.call_id, d.approver, d.always) for d in status.decisions] == [
        (call_id, "ann", False)
    ]
    assert status.phase == "awaiting_approval", "the email still waits for its own decision"


async def test_racing_decisions_for_one_call_have_exactly_one_winner(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, support_agent, cache=0) as tq:
        handle, call_id = await _two_pending(ts_env, tq)
    # No worker now: both decisions wait on the server and reach the run together.
    approve = asyncio.create_task(
        handle.execute_update(
            "approve", DecisionInput(call_id=call_id, approver="ann"), result_type=DecisionRecord
        )
    )
    reject = asyncio.create_task(
        handle.execute_update(
            "reject", DecisionInput(call_id=call_id, approver="bob"), result_type=DecisionRecord
        )
    )
    async with serving(client, support_agent, task_queue=tq):
        outcomes = await asyncio.gather(approve, reject, return_exceptions=True)
        status = await handle.query("status", result_type=RunStatus)
    won = [o for o in outcomes if isinstance(o, DecisionRecord)]
    lost = [o for o in outcomes if isinstance(o, WorkflowUpdateFailedError)]
    assert len(won) == 1 and len(lost) == 1, outcomes
    assert isinstance(lost[0].cause, ApplicationError)
    assert lost[0].cause.type == "AlreadyDecided"
    [recorded] = [d for d in status.decisions if d.call_id == call_id]
    assert (recorded.kind, recorded.approver) == (won[0].kind, won[0].approver)


# ----------------------------------------------------------------------------- handoffs


@function_tool(name_override="purge", needs_approval=True)
def purge_front(ctx: ToolContext[object], what: str) -> str:
    """Purge something (front desk).

    Args:
        what: What to purge.
    """
    record_effect(ctx, "purge")
    return f"front purged {what}"


@function_tool(name_override="purge", needs_approval=True)
def purge_back(ctx: ToolContext[object], what: str) -> str:
    """Purge something (back office).

    Args:
        what: What to purge.
    """
    record_effect(ctx, "purge")
    return f"back purged {what}"


def back_script(req: ModelRequest) -> ModelReply:
    if len(req.results_for("purge")) < 2:  # the front desk's purge is in the transcript too
        return ModelReply.call("purge", {"what": "archive"})
    return ModelReply.say(req.results_for("purge")[-1].output or "")


def front_script(req: ModelRequest) -> ModelReply:
    if not req.results_for("purge"):
        return ModelReply.call("purge", {"what": "cache"})
    return ModelReply.call("transfer_to_back_office")


back_office = Agent(
    name="Back office",
    handoff_description="Purges archives",
    tools=[purge_back],
    model=ScriptedModel(back_script, "tests.invariants.back"),
)
front_desk = Agent(
    name="Front desk",
    tools=[purge_front],
    handoffs=[back_office],
    model=ScriptedModel(front_script, "tests.invariants.front"),
)


async def test_always_approve_stays_with_the_agent_it_was_granted_on(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """A rule made on the front desk's `purge` does not approve the back office's `purge`.

    Two agents may give the same name to different tools (and different people may be allowed
    to approve them): a standing rule is scoped to the agent and tool it was granted on.
    """
    client = ts_env.client
    async with serving(client, front_desk) as tq:
        result = await Runner.run(front_desk, "clean up", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        assert item.agent is front_desk
        state = result.to_state()
        state.approve(item, always_approve=True)
        result = await Runner.run(front_desk, state, client=client, task_queue=tq, serve=False)
        [back] = result.interruptions
        assert back.agent is back_office, "the handed-off agent's purge waits for a person"
        assert ledger.count("purge") == 1, "only the front desk's purge ran"
        state = result.to_state()
        state.approve(back)
        result = await Runner.run(front_desk, state, client=client, task_queue=tq, serve=False)
    assert result.final_output == "back purged archive"
    assert result.last_agent is back_office
    assert [(d.source, d.tool_name) for d in result.decisions] == [
        ("person", "purge"),
        ("person", "purge"),
    ]
    assert ledger.count("purge") == 2


# ----------------------------------------------------------------------------- guardrail refusals


@tool_input_guardrail
def never_transfer(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
    """Refuses every transfer."""
    return ToolGuardrailFunctionOutput.reject_content("Transfers are blocked by policy.")


@function_tool(needs_approval=True, tool_input_guardrails=[never_transfer])
def transfer(ctx: ToolContext[object], amount: int) -> str:
    """Transfer money.

    Args:
        amount: Dollars.
    """
    record_effect(ctx, "transfer")
    return f"transferred {amount}"


def insist(req: ModelRequest) -> ModelReply:
    """A model that keeps asking for the transfer however often it is refused."""
    return ModelReply.call("transfer", {"amount": 10 + len(req.results_for("transfer"))})


insistent = Agent(
    name="Insistent", tools=[transfer], model=ScriptedModel(insist, "tests.invariants.insist")
)


async def test_guardrail_refusals_are_not_counted_as_model_mistakes(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    cfg = RunConfig(pre_approval_tool_input_guardrails=True, max_turns=6)
    async with serving(client, insistent) as tq:
        with pytest.raises(MaxTurnsExceeded):
            await Runner.run(
                insistent, "pay", run_config=cfg, client=client, task_queue=tq, serve=False
            )
    # Six refusals in a row (max_consecutive_bad_turns is 3): the run ran out of turns, it was
    # not failed as a misbehaving model, and nothing was executed or put to a person.
    assert ledger.count() == 0


# ----------------------------------------------------------------------------- context on resume


class Box:
    """A context that is not JSON by itself."""

    def __init__(self, name: str) -> None:
        self.name = name


def box_to_json(box: Box) -> dict[str, str]:
    return {"name": box.name}


@allow  # a RunConfig names it: workers must allow it (hitl.refs)
def box_from_json(data: dict[str, str]) -> Box:
    return Box(data["name"])


@function_tool(needs_approval=True)
def label(ctx: RunContextWrapper[Any]) -> str:
    """Label the parcel with the context's name."""
    return f"{type(ctx.context).__name__}:{ctx.context.name}"


def label_once(req: ModelRequest) -> ModelReply:
    if not req.results_for("label"):
        return ModelReply.call("label")
    return ModelReply.say(req.results_for("label")[0].output or "")


labeller = Agent(name="Labeller", tools=[label], model=ScriptedModel(label_once, "t.labeller"))
BOXED = RunConfig(context_serializer=box_to_json, context_deserializer=box_from_json)


async def test_a_new_context_on_resume_keeps_the_runs_deserializer(
    ts_env: WorkflowEnvironment,
) -> None:
    client = ts_env.client
    async with serving(client, labeller) as tq:
        result = await Runner.run(
            labeller,
            "go",
            context=Box("Ada"),
            run_config=BOXED,
            client=client,
            task_queue=tq,
            serve=False,
        )
        state = await RunState.from_string_with_context(
            labeller, result.to_state().to_string(), Box("Bob"), context_serializer=box_to_json
        )
        state.approve(state.interruptions[0])
        result = await Runner.run(labeller, state, client=client, task_queue=tq, serve=False)
    assert result.final_output == "Box:Bob"
