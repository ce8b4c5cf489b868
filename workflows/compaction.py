"""Continue-as-new: a long run (parked or not) starts over as a new run with its whole state.

Temporal suggests it as history grows (and a run config may force it, for tests); the run then
carries its state (`CarriedState`: transcript, decisions, rules, the turn in progress and its
pending calls) and its event stream into a new run of the same chain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from hitl.limits import MAX_RESULT_BYTES
    from hitl.wire import CarriedState, RunInput
    from hitl.workflows.failures import RunFailure
    from hitl.workflows.inputs import encoded_size

if TYPE_CHECKING:
    from hitl.workflows.events import Events

STREAM_EVENTS_KEPT = 2000
"""Events a run carries across continue-as-new (older ones are dropped from its stream)."""


class Carried(Protocol):
    """What continuing as new reads and changes of a run."""

    inp: RunInput
    state: CarriedState
    events: Events
    continuing: bool


def suggested(inp: RunInput) -> bool:
    """Whether the run should continue as new (Temporal suggests it, or the config forces it)."""
    info = workflow.info()
    limit = inp.run_config.continue_as_new_after_events
    if limit is not None and info.get_current_history_length() >= limit:
        return True
    return info.is_continue_as_new_suggested()


async def carry_on(run: Carried, memo: dict[str, Any] | None) -> NoReturn:
    """Continue as new with the run's whole state, once its handlers have finished.

    A state too large to carry fails the run (`RunTooLarge`) instead of every workflow task.
    """
    run.continuing = True
    stream = run.events.stream
    stream.detach_pollers()
    await workflow.wait_condition(workflow.all_handlers_finished)
    kept = stream.get_state()
    if len(kept.log) > STREAM_EVENTS_KEPT:
        stream.truncate(kept.base_offset + len(kept.log) - STREAM_EVENTS_KEPT)
        kept = stream.get_state()
    run.state.stream = kept
    size = encoded_size(run.state)
    if size > MAX_RESULT_BYTES:
        run.continuing = False
        raise RunFailure(
            "RunTooLarge",
            f"the run's state is {size} bytes, too large to carry on (the limit is "
            f"{MAX_RESULT_BYTES}); keep transcripts smaller (max_tool_output_bytes, "
            "call_model_input_filter) or start a new run",
        )
    inp = run.inp
    workflow.continue_as_new(
        RunInput(
            agent=inp.agent,
            context=run.state.context.value if run.state.context else None,
            max_turns=inp.max_turns,
            run_config=inp.run_config,
            carried=run.state,
            session=inp.session,
            parent=inp.parent,
        ),
        memo=memo,
    )
