"""`Runner.run` resuming a run asks for its result while the decisions travel."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.api.enums.v1 import HistoryEventFilterType
from temporalio.client import (
    Client,
    FetchWorkflowHistoryEventsInput,
    Interceptor,
    OutboundInterceptor,
    StartWorkflowUpdateInput,
    WorkflowHistoryEventAsyncIterator,
)
from temporalio.testing import WorkflowEnvironment

from hitl import Runner
from tests.agents import support_agent
from tests.helpers import Ledger, serving

CLOSE_EVENT = HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT


class Calls(Interceptor):
    """Records the client calls that matter here, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Recorder(next, self.log)


class _Recorder(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, log: list[tuple[str, str]]) -> None:
        super().__init__(next)
        self.log = log

    async def start_workflow_update(self, input: StartWorkflowUpdateInput) -> Any:
        handle = await super().start_workflow_update(input)
        self.log.append(("accepted", input.update))
        return handle

    def fetch_workflow_history_events(
        self, input: FetchWorkflowHistoryEventsInput
    ) -> WorkflowHistoryEventAsyncIterator:
        close = (
            input.event_filter_type == HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT
        )
        if input.wait_new_event and close:
            self.log.append(("result", input.id))
        return super().fetch_workflow_history_events(input)


def recording(client: Client, calls: Calls) -> Client:
    return Client(**{**client.config(), "interceptors": [calls]})


def result_waits() -> list[asyncio.Task[Any]]:
    """Tasks still waiting for a run's result (`hitl.run._result_of`)."""
    return [t for t in asyncio.all_tasks() if not t.done() and "_result_of" in repr(t.get_coro())]


async def test_the_result_is_asked_for_before_the_decision_is_answered(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    calls = Calls()
    client = recording(ts_env.client, calls)
    async with serving(ts_env.client, support_agent) as tq:
        paused = await Runner.run(
            support_agent, "Please cancel order 7", client=client, task_queue=tq, serve=False
        )
        state = paused.to_state()
        state.approve(paused.interruptions[0])
        calls.log.clear()
        done = await Runner.run(support_agent, state, client=client, serve=False)

    assert done.final_output == "cancel_order: Cancelled order 7"
    assert [r[1] for r in ledger.rows()] == ["cancel_order"]
    assert calls.log.count(("result", done.workflow_id)) == 1, "asked once"
    assert calls.log.index(("result", done.workflow_id)) < calls.log.index(
        ("accepted", "decide")
    ), "asked while the decision was on its way"
    assert result_waits() == []


async def test_a_run_that_pauses_again_leaves_no_result_waiting(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """Approving the email leaves the cancellation waiting: `Runner.run` returns the pause and
    stops asking for the result."""
    client = ts_env.client
    async with serving(client, support_agent) as tq:
        first = await Runner.run(
            support_agent,
            "cancel order 8 and email a refund notice",
            client=client,
            task_queue=tq,
            serve=False,
        )
        assert sorted(i.name for i in first.interruptions) == ["cancel_order", "send_email"]
        state = first.to_state()
        email = next(i for i in first.interruptions if i.name == "send_email")
        state.approve(email)
        again = await Runner.run(support_agent, state, client=client, serve=False)
        assert [i.name for i in again.interruptions] == ["cancel_order"]
        assert result_waits() == []
        state = again.to_state()
        state.reject(again.interruptions[0], message="Keep it.")
        done = await Runner.run(support_agent, state, client=client, serve=False)

    assert done.interruptions == [] and "Keep it." in str(done.final_output)
    assert [r[1] for r in ledger.rows()] == ["send_email"]
