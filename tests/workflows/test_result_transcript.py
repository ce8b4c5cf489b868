"""A completed run's result leaves its transcript out (issue 31); every reader still gets it.

The transcript is in history already (model replies, tool outputs), so the result does not
repeat it. `Runner.run` gets it from the `wait` / `decide` answer that sees the run finish,
less what it holds from the pause; other readers use the `snapshot` query.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    WorkflowHistory,
    WorkflowUpdateFailedError,
)
from temporalio.testing import WorkflowEnvironment

from hitl import (
    Agent,
    ModelReply,
    ModelRequest,
    Runner,
    RunState,
    ScriptedModel,
    allow,
    function_tool,
    handoff,
)
from hitl.agent import HandoffInputData
from hitl.wire import (
    QUERY_SNAPSHOT,
    UPDATE_DECIDE,
    DecideInput,
    DecisionRequest,
    HeldTranscript,
    RunOutput,
    RunSnapshot,
    SettledStatus,
    WaitInput,
    transcript_digest,
)
from tests.agents import support_agent
from tests.helpers import Ledger, serving, state_events


class _Queries(Interceptor):
    """Counts the queries a client sends, by name."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        names = self.names

        class _Out(OutboundInterceptor):
            async def query_workflow(self, input: QueryWorkflowInput) -> Any:
                names.append(input.query)
                return await super().query_workflow(input)

        return _Out(next)


def _counting(client: Client) -> tuple[Client, list[str]]:
    """A client of the same server that records the queries sent through it."""
    queries = _Queries()
    config = client.config()
    config["interceptors"] = [*config["interceptors"], queries]
    return Client(**config), queries.names


def _completed(hist: WorkflowHistory) -> dict[str, Any]:
    [done] = [
        e.workflow_execution_completed_event_attributes
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
    ]
    out: dict[str, Any] = json.loads(done.result.payloads[0].data)
    return out


def _answers(hist: WorkflowHistory) -> list[dict[str, Any]]:
    return [
        json.loads(e.workflow_execution_update_completed_event_attributes.outcome.success
                   .payloads[0].data)
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
    ]  # fmt: skip


async def _snapshot(client: Client, workflow_id: str) -> RunSnapshot:
    snap: RunSnapshot = await client.get_workflow_handle(workflow_id).query(
        QUERY_SNAPSHOT, result_type=RunSnapshot
    )
    return snap


async def test_runner_run_reads_a_completed_run_without_its_transcript_in_the_result(
    ts_env: WorkflowEnvironment, cache_size: int, ledger: Ledger
) -> None:
    """Pause, approve, complete: the result in history has no transcript; the `decide` answer
    carries only the items after the pause; `Runner.run` has the whole transcript with no
    `snapshot` query."""
    client, queries = _counting(ts_env.client)
    async with serving(ts_env.client, support_agent, cache=cache_size) as tq:
        paused = await Runner.run(
            support_agent, "Please cancel order 7", client=client, task_queue=tq, serve=False
        )
        state = paused.to_state()
        state.approve(paused.interruptions[0])
        done = await Runner.run(support_agent, state, client=client, task_queue=tq, serve=False)
        assert queries == [], "no query: the answers carried the transcript"
        snap = await _snapshot(ts_env.client, done.workflow_id)
        hist = await ts_env.client.get_workflow_handle(done.workflow_id).fetch_history()

    assert done.final_output == "cancel_order: Cancelled order 7"
    assert [i.type for i in done.new_items] == [
        "tool_call_item",
        "tool_call_output_item",
        "message_output_item",
    ]
    assert done.to_input_list() == [*snap.input_items, *(i.raw_item for i in snap.new_items)]
    assert done.to_input_list()[0] == {"role": "user", "content": "Please cancel order 7"}
    assert done.status.items == 4 and [d.kind for d in done.decisions] == ["approve"]
    out = _completed(hist)
    assert (out["new_items"], out["input_items"], out["transcript_omitted"]) == ([], [], True)
    assert [d["kind"] for d in out["decisions"]] == ["approve"], "the audit reads them here"
    wait, decide = _answers(hist)
    assert wait["phase"] == "awaiting_approval" and len(wait["new_items"]) == 1
    assert decide["phase"] == "completed" and "input_items" not in decide
    assert decide["items_from"] == 1, "what the pause gave it is not sent again"
    assert [i["type"] for i in decide["new_items"]] == [
        "tool_call_output_item",
        "message_output_item",
    ]


async def test_a_run_with_no_pause_and_a_loaded_state_get_their_transcript_with_the_answer(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """No pause: the `wait` answer that sees the run complete carries the whole transcript. A
    state loaded from a string holds none: the `decide` answer carries it all."""
    client, queries = _counting(ts_env.client)
    async with serving(ts_env.client, support_agent) as tq:
        quick = await Runner.run(
            support_agent, "Please email me about my order", client=client, task_queue=tq,
            serve=False,
        )  # fmt: skip
        paused = await Runner.run(
            support_agent, "Please cancel order 8", client=client, task_queue=tq, serve=False
        )
        state = await RunState.from_string(support_agent, paused.to_state().to_string())
        state.approve(state.interruptions[0])
        done = await Runner.run(support_agent, state, client=client, task_queue=tq, serve=False)
        assert queries == []
        hists = [
            await ts_env.client.get_workflow_handle(r.workflow_id).fetch_history()
            for r in (quick, done)
        ]

    assert quick.final_output == "send_email: Sent 'About your order'"
    assert [i.type for i in quick.new_items] == [
        "tool_call_item",
        "tool_call_output_item",
        "message_output_item",
    ]
    assert quick.input == [{"role": "user", "content": "Please email me about my order"}]
    [answer] = _answers(hists[0])
    assert answer["phase"] == "completed" and len(answer["new_items"]) == 3
    assert len(done.new_items) == 3 and done.input[0]["content"] == "Please cancel order 8"
    decide = _answers(hists[1])[-1]
    assert decide["input_items"] and "items_from" not in decide and len(decide["new_items"]) == 3
    for hist in hists:
        assert _completed(hist)["transcript_omitted"] is True


async def test_an_answer_sends_the_whole_transcript_when_the_held_one_does_not_match(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """A `held` that names other items (a wrong digest, more items than the run has) is not
    believed: the answer carries the whole transcript. A malformed one is refused and leaves no
    event."""
    client = ts_env.client
    async with serving(client, support_agent) as tq:
        paused = await Runner.run(
            support_agent, "Please cancel order 9", client=client, task_queue=tq, serve=False
        )
        handle = client.get_workflow_handle(paused.workflow_id)
        before = state_events(await handle.fetch_history())
        for bad in ({"new_items": -1}, {"digest": "x" * 65}, {"new_items": "many"}):
            try:
                await handle.execute_update(UPDATE_DECIDE, {"decisions": [], "held": bad})
            except WorkflowUpdateFailedError as exc:
                assert "decide" in str(exc.cause)
            else:
                raise AssertionError(f"accepted held={bad}")
        assert state_events(await handle.fetch_history()) == before, "refused: nothing recorded"
        wrong = transcript_digest([{"role": "user", "content": "something else"}], [])
        lies = [
            HeldTranscript(new_items=1, digest=wrong),
            HeldTranscript(new_items=99, digest=wrong),
        ]
        for held in lies:
            answer = await handle.execute_update(
                "wait", WaitInput(items=True, held=held), result_type=SettledStatus
            )
            assert answer.items_from == 0 and answer.input_items == paused.input
            assert answer.new_items == paused.new_items
        digest = transcript_digest(paused.input, paused.new_items)
        true = HeldTranscript(new_items=len(paused.new_items), digest=digest)
        call = paused.interruptions[0].call_id
        decide = DecideInput(
            decisions=[DecisionRequest(kind="approve", call_id=call, approver="ops")],
            items=True,
            held=true,
        )
        done = await handle.execute_update(UPDATE_DECIDE, decide, result_type=SettledStatus)
        out = await client.get_workflow_handle(paused.workflow_id, result_type=RunOutput).result()
    assert done.phase == "completed" and done.input_items is None and done.items_from == 1
    tail = [i.type for i in done.new_items or []]
    assert tail == ["tool_call_output_item", "message_output_item"]
    assert out.transcript_omitted and out.new_items == [] and out.final_output is not None


@function_tool(needs_approval=True)
def refund(order_id: int) -> str:
    """Refund an order.

    Args:
        order_id: The order.
    """
    return f"refunded {order_id}"


@allow  # a handoff names it: workers must allow it (hitl.refs)
def forget_all(data: HandoffInputData) -> HandoffInputData:
    """Drop everything before the handoff: the run rewrites what the client held."""
    return data.clone(input_history=[], pre_handoff_items=[])


def _closer(req: ModelRequest) -> ModelReply:
    return ModelReply.say(f"closed after {len(req.input)} items")


def _refunder(req: ModelRequest) -> ModelReply:
    if not req.tool_results():
        return ModelReply.call("refund", {"order_id": 3})
    return ModelReply.call("transfer_to_closer")


closer = Agent(name="Closer", model=ScriptedModel(_closer, "tests.result.closer"))
refunder = Agent(
    name="Refunder",
    tools=[refund],
    handoffs=[handoff(closer, input_filter=forget_all)],  # type: ignore[arg-type]
    model=ScriptedModel(_refunder, "tests.result.refunder"),
)


async def test_a_transcript_rewritten_after_the_pause_reaches_runner_run_whole(
    ts_env: WorkflowEnvironment,
) -> None:
    """A handoff's input filter rewrites what the client held from the pause: its digest no
    longer names the run's items, so the answer carries the whole transcript as it is now."""
    client, queries = _counting(ts_env.client)
    async with serving(ts_env.client, refunder, closer) as tq:
        paused = await Runner.run(refunder, "refund 3", client=client, task_queue=tq, serve=False)
        state = paused.to_state()
        state.approve(paused.interruptions[0])
        done = await Runner.run(refunder, state, client=client, task_queue=tq, serve=False)
        assert queries == []
        snap = await _snapshot(ts_env.client, done.workflow_id)
        hist = await ts_env.client.get_workflow_handle(done.workflow_id).fetch_history()
    assert paused.input == [{"role": "user", "content": "refund 3"}]
    assert done.final_output == "closed after 2 items"
    assert (done.input, done.new_items) == (snap.input_items, snap.new_items)
    assert done.input == [], "the filter dropped the input; the client's copy is not used"
    decide = _answers(hist)[-1]
    assert decide["input_items"] == [] and "items_from" not in decide
