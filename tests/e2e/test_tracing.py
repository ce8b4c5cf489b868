"""OpenTelemetry spans of runs with approvals, across worker restarts (dev server).

Two kinds of restart: a new worker in the same process (the first one shut down), and a worker
process killed while the run waits for approval, with a second process carrying on. Either way
the spans the first worker could not finish (the run, the approval wait) are recreated from the
run's history by the replay-safe tracer and exported once, by the worker that ends them.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.opentelemetry import OpenTelemetryPlugin, create_tracer_provider

from hitl import RunConfig, Runner
from hitl.client import data_converter
from hitl.worker.devserver import DevServer
from tests.agents import support_agent
from tests.e2e.traced_worker import span_record, trace_triage
from tests.helpers import WorkerProcess, queue_name, serving, wait_for

EXPORTER = InMemorySpanExporter()
_installed: list[bool] = []


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """The process's replay-safe tracer provider (set once: OpenTelemetry allows one)."""
    if not _installed:
        provider = create_tracer_provider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
        _installed.append(True)
    yield EXPORTER


async def traced_client(address: str) -> Client:
    return await Client.connect(
        address, data_converter=data_converter(), plugins=[OpenTelemetryPlugin()]
    )


async def test_spans_cover_an_approval_across_a_worker_restart(
    dev_server: DevServer, exporter: InMemorySpanExporter
) -> None:
    client = await traced_client(dev_server.address)
    config = RunConfig(
        workflow_name="refunds",
        group_id="thread-7",
        trace_metadata={"team": "ops"},
        trace_include_sensitive_data=True,
    )
    async with serving(client, support_agent) as tq:
        result = await Runner.run(
            support_agent,
            "cancel order 3",
            run_config=config,
            client=client,
            task_queue=tq,
            serve=False,
        )
    # The first worker is gone; a new one (replaying the run) carries on.
    before_restart = [
        s.name
        for s in exporter.get_finished_spans()
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
        for s in exporter.get_finished_spans()
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
    for span in spans:
        assert span.attributes["hitl.workflow_name"] == "refunds", span.name
        assert span.attributes["hitl.group_id"] == "thread-7", span.name
        assert span.attributes["hitl.metadata.team"] == "ops", span.name
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


# ----------------------------------------------------------------------------- handoff run

CANARY = "canary-5f1e9b"
PROMPT = f"refund order 4, note {CANARY}"
HANDOFF_CONFIG = RunConfig(
    workflow_name="refund-triage",
    group_id="thread-9",
    trace_metadata={"team": "ops", "tier": 2},
    trace_include_sensitive_data=False,
)
HANDOFF_SPANS = [
    "hitl.run refund-triage",
    "hitl.guardrails.input",
    "hitl.model_call",
    "hitl.handoff",
    "hitl.model_call",
    "hitl.approval_wait",
    "hitl.approval_decision",
    "hitl.tool_call",
    "hitl.model_call",
    "hitl.guardrails.output",
]
"""Every span of the handoff run, once each."""


def check_handoff_run(spans: list[dict[str, Any]], workflow_id: str) -> dict[str, Any]:
    """Assert the spans of one `trace_triage` run (as `span_record` dicts); the run span."""
    ours = [s for s in spans if s["attributes"].get("hitl.workflow_id") == workflow_id]
    assert sorted(s["name"] for s in ours) == sorted(HANDOFF_SPANS), "each span exactly once"
    ours.sort(key=lambda s: s["start"])
    by_name = {s["name"]: s for s in ours}
    run = by_name["hitl.run refund-triage"]
    for span in ours:
        attrs = span["attributes"]
        assert attrs["hitl.workflow_name"] == "refund-triage", span["name"]
        assert attrs["hitl.group_id"] == "thread-9", span["name"]
        assert attrs["hitl.metadata.team"] == "ops", span["name"]
        assert attrs["hitl.metadata.tier"] == 2, span["name"]
        assert span["trace_id"] == run["trace_id"], "one trace for the whole run"
        if span is not run:
            assert span["parent_id"] == run["span_id"], span["name"]
            assert run["start"] <= span["start"] <= span["end"] <= run["end"], span["name"]

    def agent(name: str) -> Any:
        return by_name[name]["attributes"]["hitl.agent"]

    assert agent("hitl.run refund-triage") == "Trace triage"
    assert agent("hitl.guardrails.input") == "Trace triage"
    assert agent("hitl.guardrails.output") == "Refund desk"
    assert [s["attributes"]["hitl.agent"] for s in ours if s["name"] == "hitl.model_call"] == [
        "Trace triage",
        "Refund desk",
        "Refund desk",
    ]
    handoff = by_name["hitl.handoff"]["attributes"]
    assert (handoff["hitl.from"], handoff["hitl.to"]) == ("Trace triage", "Refund desk")
    # The approval spans name the agent that owns the tool, not the run's root agent.
    for name in ("hitl.approval_wait", "hitl.approval_decision", "hitl.tool_call"):
        assert agent(name) == "Refund desk", name
        assert by_name[name]["attributes"]["hitl.tool"] == "issue_refund", name
    wait, decision = by_name["hitl.approval_wait"], by_name["hitl.approval_decision"]
    assert wait["attributes"]["hitl.decision"] == "approve"
    assert wait["start"] <= decision["start"] <= wait["end"] <= by_name["hitl.tool_call"]["start"]

    # trace_include_sensitive_data=False: neither arguments nor outputs, on any span of the
    # trace (ours or Temporal's own), in any attribute or event.
    tool = by_name["hitl.tool_call"]["attributes"]
    assert "hitl.tool.arguments" not in tool and "hitl.tool.output" not in tool
    assert tool["hitl.tool.is_error"] is False
    for span in spans:
        if span["trace_id"] != run["trace_id"]:
            continue
        assert not any(
            k.startswith("hitl.tool.") and k != "hitl.tool.is_error" for k in span["attributes"]
        )
        texts = [span["name"], *map(str, span["attributes"].values())]
        for event in span["events"]:
            texts += [event["name"], *map(str, event["attributes"].values())]
        assert not any(CANARY in t for t in texts), f"{span['name']} leaks the arguments"
    return run


async def test_handoff_run_spans_guardrails_owner_and_no_sensitive_data(
    dev_server: DevServer, exporter: InMemorySpanExporter
) -> None:
    client = await traced_client(dev_server.address)
    async with serving(client, trace_triage) as tq:
        result = await Runner.run(
            trace_triage,
            PROMPT,
            run_config=HANDOFF_CONFIG,
            client=client,
            task_queue=tq,
            serve=False,
        )
    assert [i.name for i in result.interruptions] == ["issue_refund"]
    async with serving(client, trace_triage, task_queue=tq):  # a new worker: it replays
        state = result.to_state()
        state.approve(result.interruptions[0], approver="olga")
        done = await Runner.run(trace_triage, state, client=client, task_queue=tq, serve=False)
    # The canary did reach the tool (arguments and output), so its absence from spans counts.
    assert done.final_output == f"Refunded order 4: {PROMPT}"
    check_handoff_run([span_record(s) for s in exporter.get_finished_spans()], result.workflow_id)


# ----------------------------------------------------------------------------- worker processes


class TracedWorker(WorkerProcess):
    """`python -m tests.e2e.traced_worker` as a subprocess, exporting its spans to a file."""

    def __init__(self, address: str, task_queue: str, spans: Path) -> None:
        super().__init__(address, task_queue)
        self.spans = spans

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "tests.e2e.traced_worker",
            self.address,
            self.task_queue,
            str(self.spans),
        ]

    def exported(self) -> list[dict[str, Any]]:
        if not self.spans.exists():
            return []
        return [json.loads(line) for line in self.spans.read_text().splitlines() if line]


async def test_spans_survive_a_killed_worker_process(dev_server: DevServer, tmp_path: Path) -> None:
    client = await Client.connect(dev_server.address, data_converter=data_converter())
    tq = queue_name("trace-proc")
    first = TracedWorker(dev_server.address, tq, tmp_path / "first.jsonl").start()
    try:
        result = await Runner.run(
            trace_triage,
            PROMPT,
            run_config=HANDOFF_CONFIG,
            client=client,
            task_queue=tq,
            serve=False,
        )
    finally:
        first.kill()  # SIGKILL while the run waits for approval: nothing is flushed at exit
    killed_at = time.time_ns()
    assert [i.name for i in result.interruptions] == ["issue_refund"]
    wid = result.workflow_id
    before = [s["name"] for s in first.exported() if s["attributes"].get("hitl.workflow_id") == wid]
    assert sorted(before) == [
        "hitl.guardrails.input",
        "hitl.handoff",
        "hitl.model_call",
        "hitl.model_call",
    ], "what finished before the crash, and nothing else"

    with TracedWorker(dev_server.address, tq, tmp_path / "second.jsonl") as second:
        state = result.to_state()
        state.approve(result.interruptions[0], approver="olga")
        done = await Runner.run(trace_triage, state, client=client, task_queue=tq, serve=False)
    assert second.process is not None and second.process.returncode == 0, second.output
    assert done.final_output == f"Refunded order 4: {PROMPT}"

    spans = [*first.exported(), *second.exported()]
    run = check_handoff_run(spans, wid)
    # The run span and the approval wait began in the killed process; the second process
    # rebuilt them from history (same ids, original start times) and exported them once.
    by_name = {s["name"]: s for s in spans if s["attributes"].get("hitl.workflow_id") == wid}
    wait = by_name["hitl.approval_wait"]
    assert run["pid"] == wait["pid"] == second.process.pid
    assert run["start"] < wait["start"] < killed_at < wait["end"]
    assert by_name["hitl.handoff"]["pid"] == first.process.pid  # type: ignore[union-attr]


# ----------------------------------------------------------------------------- the stock worker


def console_spans(text: str) -> list[dict[str, Any]]:
    """The spans OpenTelemetry's console exporter printed (indented JSON objects) in `text`."""
    decoder = json.JSONDecoder()
    spans = []
    for start in (i for i in range(len(text)) if text.startswith("{\n", i)):
        try:
            obj, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(obj, dict) and "context" in obj and "name" in obj:
            spans.append(obj)
    return spans


async def test_the_stock_worker_traces_with_otel(dev_server: DevServer) -> None:
    """`python -m hitl.worker --otel`: no hand-built worker needed for spans."""
    client = await Client.connect(dev_server.address, data_converter=data_converter())
    tq = queue_name("otel-flag")
    env = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "desk-worker"}
    with WorkerProcess(dev_server.address, tq, env=env, extra_args=["--otel"]) as worker:
        assert "tracing" in "".join(worker.output), "it says it traces"
        config = RunConfig(workflow_name="refunds")
        result = await Runner.run(
            support_agent,
            "cancel order 3",
            run_config=config,
            client=client,
            task_queue=tq,
            serve=False,
        )
        state = result.to_state()
        state.approve(result.interruptions[0], approver="olga")
        done = await Runner.run(support_agent, state, client=client, task_queue=tq, serve=False)
    assert done.final_output == "cancel_order: Cancelled order 3"
    assert worker.process is not None and worker.process.returncode == 0, worker.output
    wid = result.workflow_id

    def ours() -> list[dict[str, Any]]:
        spans = console_spans("".join(worker.output))
        return [s for s in spans if s["attributes"].get("hitl.workflow_id") == wid]

    # The process has exited; its last lines may still be on their way through the pipe.
    await wait_for(lambda: len(ours()) == 6, timeout=10, what="the run's six spans")
    spans = ours()
    assert sorted(s["name"] for s in spans) == sorted(
        [
            "hitl.run refunds",
            "hitl.model_call",
            "hitl.model_call",
            "hitl.approval_wait",
            "hitl.approval_decision",
            "hitl.tool_call",
        ]
    )
    assert {s["context"]["trace_id"] for s in spans} == {spans[0]["context"]["trace_id"]}
    assert all(s["resource"]["attributes"]["service.name"] == "desk-worker" for s in spans)
