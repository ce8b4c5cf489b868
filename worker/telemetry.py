"""`python -m hitl.worker --otel`: the stock worker traces runs with OpenTelemetry.

A worker traces when its client carries `temporalio.contrib.opentelemetry.OpenTelemetryPlugin`
(the tracing interceptor) and the process has a replay-safe tracer provider; this module sets
up both, as `tests/e2e/traced_worker.py` does by hand. Where spans go follows OpenTelemetry's
own environment variables: `OTEL_TRACES_EXPORTER` (`otlp`, the default; `console`; `none`; any
exporter an installed package registers), `OTEL_SERVICE_NAME` (default `hitl-worker`),
`OTEL_RESOURCE_ATTRIBUTES`, the `OTEL_EXPORTER_OTLP_*` settings and `OTEL_BSP_*` for batching.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from hitl.errors import UserError
from hitl.extras import require_extra

WHAT = "--otel (HITL_OTEL)"
DEFAULT_SERVICE_NAME = "hitl-worker"


@dataclass
class Tracing:
    """What `--otel` set up: the client plugin, and the provider to flush when the worker stops."""

    plugin: Any
    provider: Any

    def shutdown(self) -> None:
        """Export the spans still buffered (the worker exits without interpreter teardown)."""
        self.provider.shutdown()


def exporter_names() -> list[str]:
    """The exporters `OTEL_TRACES_EXPORTER` names (comma-separated; `otlp` when unset)."""
    text = os.environ.get("OTEL_TRACES_EXPORTER", "otlp")
    return [n.strip().lower() for n in text.split(",") if n.strip()]


def _exporter(name: str) -> Any:
    """The span exporter an installed package registers under `name` (as OpenTelemetry does)."""
    found = list(entry_points(group="opentelemetry_traces_exporter", name=name))
    if not found:
        hint = "pip install opentelemetry-exporter-otlp" if name == "otlp" else "install it"
        raise UserError(
            f"{WHAT}: no installed package provides the span exporter {name!r} "
            f"(OTEL_TRACES_EXPORTER): {hint}, or set OTEL_TRACES_EXPORTER=console"
        )
    return found[0].load()()


def start_tracing() -> Tracing:
    """Install a replay-safe tracer provider with the configured exporters; return the plugin.

    Raises `UserError` (one line) when the `tracing` extra or a named exporter is missing. Call
    it before connecting: the plugin goes on the worker's client.
    """
    require_extra("tracing", WHAT, "opentelemetry.sdk.trace", "temporalio.contrib.opentelemetry")
    from opentelemetry import trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from temporalio.contrib.opentelemetry import OpenTelemetryPlugin, create_tracer_provider

    names = [n for n in exporter_names() if n != "none"]
    exporters = [_exporter(n) for n in names]
    service = os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
    # Resource.create also reads OTEL_RESOURCE_ATTRIBUTES.
    provider = create_tracer_provider(resource=Resource.create({SERVICE_NAME: service}))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return Tracing(plugin=OpenTelemetryPlugin(), provider=provider)


METRICS_WHAT = "--metrics-port (HITL_METRICS_PORT)"


def metrics_runtime(host: str, port: int) -> Any:
    """A Temporal runtime whose core serves Prometheus metrics on `host:port` (`/metrics`).

    The SDK's own worker metrics (task latencies, slots, polls) and the runs' decision metrics
    (`hitl.workflows.metrics`: requests, decisions, edits, escalations, a person's time to
    decide) come out there. Raises `UserError` when the address cannot be bound.
    """
    from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

    from hitl.workflows.metrics import DECISION_BUCKETS, DECISION_SECONDS

    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    config = PrometheusConfig(
        bind_address=address,
        durations_as_seconds=True,
        histogram_bucket_overrides={DECISION_SECONDS: list(DECISION_BUCKETS)},
    )
    try:
        return Runtime(telemetry=TelemetryConfig(metrics=config))
    except Exception as exc:  # the core's bind error is a plain exception with its reason
        raise UserError(f"{METRICS_WHAT}: cannot serve metrics on {address}: {exc}") from None
