"""OpenTelemetry spans of a run with one approval, across a worker restart (dev server)."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.opentelemetry import OpenTelemetryPlugin, create_tracer_provider

from hitl import RunConfig, Runner
from hitl.client import data_converter
from tests.agents import support_agent
from tests.helpers import queue_name, serving
from worker.devserver import DevServer

EXPORTER = InMemorySpanExporter()


def _install_provider() -> None:
    provider = create_tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)


async def test_spans_cover_an_approval_across_a_worker_restart(dev_server: DevServer) -> None:
    _install_provider()
    client = await Client.connect(
        dev_server.address, data_converter=data_converter(), plugins=[OpenTelemetryPlugin()]
    )
    tq = queue_name("trace")
    config = RunConfig(
        workflow_name="refunds",
        group_id="thread-7",
        trace_metadata={"team": "ops"},
        trace_include_sensitive_data=True,
    )
    async with serving(client, support_agent) as q:
        result = await Runner.run(
            support_agent,
            "cancel order 3",
            run_config=config,
            client=client,
            task_queue=q,
            serve=False,
        )
        tq = q
    # The first worker is gone; a new one (replaying the run) carries on.
    before_restart = [
        s.name
        for s in EXPORTER.get_finished_spans()
        if s.attributes.get("hitl.workflow_id") == result.workflow_id
    ]
    assert before_restart == ["hitl.model_call"], "only what finished was exported"
    async with serving(client, support_agent, task_queue=tq):
        state = result.to_state()
        state.approve(result.interruptions[0], approver="olga")
        done = await Runner.run(support_agent, state, client=client, task_queue=tq, serve=False)
    assert done.final_output == "cancel_order: Cancelled order 3"

    spans = [
        s
        for s in EXPORTER.get_finished_spans()
        if s.attributes.get("hitl.workflow_id") == result.workflow_id
    ]
    names = sorted(s.name for s in spans)
    assert names == sorted(
        [
            "hitl.run refunds",
            "hitl.model_call",
            "hitl.model_call",
            "hitl.approval_wait",
            "hitl.approval_decision",
            "hitl.tool_call",
        ]
    ), "every span exactly once, none duplicated by the replay"
    by_name = {s.name: s for s in spans}
    run = by_name["hitl.run refunds"]
    wait = by_name["hitl.approval_wait"]
    assert run.attributes["hitl.group_id"] == "thread-7"
    assert run.attributes["hitl.metadata.team"] == "ops"
    assert run.start_time <= wait.start_time < wait.end_time <= run.end_time
    assert wait.attributes["hitl.decision"] == "approve"
    assert wait.attributes["hitl.decision.approver"] == "olga"
    tool = by_name["hitl.tool_call"]
    assert tool.attributes["hitl.tool"] == "cancel_order"
    assert tool.attributes["hitl.tool.arguments"] == '{"order_id": 3}'
    assert tool.attributes["hitl.tool.output"] == "Cancelled order 3"
    ids = {s.context.trace_id for s in spans}
    assert len(ids) == 1, "one trace for the whole run"
    assert all(
        s.parent is not None and s.parent.span_id == run.context.span_id
        for s in spans
        if s is not run
    )
