"""OpenTelemetry spans recorded by `AgentRun` (when the worker traces).

Workers trace when their client carries `temporalio.contrib.opentelemetry.OpenTelemetryPlugin`
and the process uses a replay-safe tracer provider (`create_tracer_provider()`). Spans are then
replay safe: a span started before a worker restart (an approval wait, the run itself) is
recreated when the new worker replays the run and exported once, when it ends, with its real
start time. Without tracing, every call here is a no-op and nothing is imported.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from hitl.wire import CarriedState, RunInput

AttributeValue = str | bool | int | float


class Traced(Protocol):
    """What tracing reads of a run: its configuration and whether its worker traces."""

    inp: RunInput
    state: CarriedState


class RunTracer:
    """The spans of one run: the run, model calls, tool calls, approvals, handoffs, guardrails."""

    def __init__(self, enabled: bool, attributes: Mapping[str, AttributeValue]) -> None:
        self.enabled = enabled
        self.attributes = {k: v for k, v in attributes.items() if v is not None}
        self._tracer: Any = None
        self._run_span: Any = None
        self._open: dict[str, Any] = {}

    def _get(self) -> Any:
        if self._tracer is None:
            with workflow.unsafe.imports_passed_through():
                from opentelemetry import trace
            self._tracer = trace.get_tracer("hitl")
        return self._tracer

    def start_run(self, name: str) -> None:
        """Open the run's span (parent of the others)."""
        if self.enabled and self._run_span is None:
            self._run_span = self._get().start_span(name, attributes=self.attributes)

    def end_run(self, error: str | None = None) -> None:
        """Close the run's span."""
        if self._run_span is None:
            return
        if error is not None:
            self._run_span.set_attribute("hitl.error", error)
        self._run_span.end()
        self._run_span = None

    def _context(self) -> Any:
        if self._run_span is None:
            return None
        with workflow.unsafe.imports_passed_through():
            from opentelemetry import trace
        return trace.set_span_in_context(self._run_span)

    @contextlib.contextmanager
    def span(self, name: str, **attributes: AttributeValue | None) -> Iterator[Any]:
        """A child span of the run around a block (e.g. a model or tool call)."""
        if not self.enabled:
            yield None
            return
        attrs = {k: v for k, v in {**self.attributes, **attributes}.items() if v is not None}
        span = self._get().start_span(name, context=self._context(), attributes=attrs)
        try:
            yield span
        except BaseException as exc:
            span.set_attribute("hitl.error", type(exc).__name__)
            raise
        finally:
            span.end()

    def open_wait(self, call: Any) -> None:
        """The span of a call's wait for a person (ends when it is decided)."""
        self.open(
            call.call_id,
            "hitl.approval_wait",
            **{
                "hitl.tool": call.tool_name,
                "hitl.call_id": call.call_id,
                "hitl.agent": call.agent_name,  # the tool's owner (the run's is the root)
            },
        )

    def open(self, key: str, name: str, **attributes: AttributeValue | None) -> None:
        """Start a span that ends elsewhere (an approval wait), keyed by `key`."""
        if not self.enabled or key in self._open:
            return
        attrs = {k: v for k, v in {**self.attributes, **attributes}.items() if v is not None}
        self._open[key] = self._get().start_span(name, context=self._context(), attributes=attrs)

    def close(self, key: str, **attributes: AttributeValue | None) -> None:
        """End a span started with `open`."""
        span = self._open.pop(key, None)
        if span is None:
            return
        for k, v in attributes.items():
            if v is not None:
                span.set_attribute(k, v)
        span.end()

    def event(self, name: str, **attributes: AttributeValue | None) -> None:
        """An instant span (a handoff, a decision)."""
        with self.span(name, **attributes):
            pass


def start(run: Traced) -> RunTracer:
    """The tracer of a run, with its run span open (a no-op unless the worker traces)."""
    cfg = run.inp.run_config
    attrs: dict[str, Any] = {
        "hitl.workflow_id": workflow.info().workflow_id,
        "hitl.agent": run.inp.agent,
        "hitl.workflow_name": cfg.workflow_name or run.inp.agent,
        "hitl.group_id": cfg.group_id,
    }
    for key, value in cfg.trace_metadata.items():
        attrs[f"hitl.metadata.{key}"] = (
            value if isinstance(value, str | int | float | bool) else json.dumps(value)
        )
    tracer = RunTracer(run.state.tracing, attrs)
    tracer.start_run(f"hitl.run {cfg.workflow_name or run.inp.agent}")
    return tracer


def sensitive(run: Traced, text: str | None) -> str | None:
    """Arguments and outputs go on spans only when the run asks for it."""
    if not run.inp.run_config.trace_include_sensitive_data:
        return None
    text = text or ""
    return text if len(text) <= 4000 else text[:4000] + f"... [{len(text) - 4000} more]"
