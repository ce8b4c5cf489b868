"""A handoff run for the tracing tests, and a worker process that traces it to a file.

`python -m tests.e2e.traced_worker ADDRESS TASK_QUEUE SPANS_FILE` serves `trace_triage` the way
a production worker traces (the OpenTelemetry plugin on its client, a replay-safe tracer
provider) and appends each span to SPANS_FILE as one JSON line when the span ends, flushed, so a
SIGKILL loses no finished span. It prints `worker ready` once polling, and stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from hitl import (
    Agent,
    GuardrailFunctionOutput,
    ModelReply,
    ModelRequest,
    RunContextWrapper,
    ScriptedModel,
    ToolContext,
    function_tool,
    input_guardrail,
    output_guardrail,
)
from tests.helpers import record_effect

# ----------------------------------------------------------------------------- the agents


@input_guardrail
def no_password_asked(
    ctx: RunContextWrapper[object], agent: object, text: object
) -> GuardrailFunctionOutput:
    """Trips on a password in the user's input."""
    found = "password" in str(text).lower()
    return GuardrailFunctionOutput(output_info={"found": found}, tripwire_triggered=found)


@output_guardrail
def no_password_told(
    ctx: RunContextWrapper[object], agent: object, output: object
) -> GuardrailFunctionOutput:
    """Trips on a password in the final output."""
    found = "password" in str(output).lower()
    return GuardrailFunctionOutput(output_info={"found": found}, tripwire_triggered=found)


@function_tool(needs_approval=True)
def issue_refund(ctx: ToolContext[object], order_id: int, note: str) -> str:
    """Refund an order (needs approval).

    Args:
        order_id: The order to refund.
        note: A note for the customer.
    """
    record_effect(ctx, "issue_refund")
    return f"Refunded order {order_id}: {note}"


def refund_desk_script(req: ModelRequest) -> ModelReply:
    """Refund the order in the request, with the request as the note; then report."""
    done = req.results_for("issue_refund")
    if done:
        return ModelReply.say(done[0].output or "")
    text = req.last_user_text()
    order = re.search(r"\d+", text)
    return ModelReply.call(
        "issue_refund", {"order_id": int(order.group()) if order else 0, "note": text}
    )


def trace_triage_script(req: ModelRequest) -> ModelReply:
    """Hand refunds to the refund desk."""
    if "refund" in req.last_user_text().lower():
        return ModelReply.call("transfer_to_refund_desk")
    return ModelReply.say("I only do refunds.")


refund_desk = Agent(
    name="Refund desk",
    instructions="Refund what is asked.",
    tools=[issue_refund],
    output_guardrails=[no_password_told],
    model=ScriptedModel(refund_desk_script, "tests.trace.desk"),
)
trace_triage = Agent(
    name="Trace triage",
    instructions="Send refunds to the refund desk.",
    handoffs=[refund_desk],
    input_guardrails=[no_password_asked],
    model=ScriptedModel(trace_triage_script, "tests.trace.triage"),
)


# ----------------------------------------------------------------------------- the worker


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """A finished span as JSON (what the tests compare)."""
    ctx = span.get_span_context()
    assert ctx is not None
    return {
        "name": span.name,
        "trace_id": ctx.trace_id,
        "span_id": ctx.span_id,
        "parent_id": span.parent.span_id if span.parent else None,
        "start": span.start_time,
        "end": span.end_time,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        "pid": os.getpid(),
    }


class JsonLinesExporter(SpanExporter):
    """Appends each exported span to a file, one JSON object a line, flushed at once."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed at shutdown

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            self._file.write(json.dumps(span_record(span)) + "\n")
        self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._file.close()


async def main(address: str, task_queue: str, spans_file: str) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from temporalio.client import Client
    from temporalio.contrib.opentelemetry import OpenTelemetryPlugin, create_tracer_provider

    from hitl.client import data_converter
    from hitl.worker.build import WorkerOptions, build_worker

    provider = create_tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(spans_file)))
    trace.set_tracer_provider(provider)
    client = await Client.connect(
        address, data_converter=data_converter(), plugins=[OpenTelemetryPlugin()]
    )
    # A short sticky timeout: after a crash, the run's next task moves to a live worker in 1s.
    options = WorkerOptions(task_queue=task_queue, graceful_shutdown=0, sticky_queue_timeout=1)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with build_worker(client, [trace_triage], options):
        print(f"worker ready on task queue {task_queue!r}", flush=True)
        await stop.wait()
    provider.shutdown()


if __name__ == "__main__":
    from hitl.cli import hard_exit

    asyncio.run(main(*sys.argv[1:4]))
    hard_exit(0)  # spans are on disk; skip the teardown that can abort (sdk-python#300)
