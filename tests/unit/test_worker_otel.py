"""`python -m hitl.worker --otel` / `HITL_OTEL`: the options, and the one-line refusals.

The spans themselves are checked against a real worker process in tests/e2e/test_tracing.py.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from hitl.errors import UserError
from hitl.worker.__main__ import EXIT_CONFIG, main, parse_args
from hitl.worker.telemetry import start_tracing


def test_otel_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HITL_OTEL", raising=False)
    assert parse_args(["--agents", "tests.agents"]).otel is False
    assert parse_args(["--agents", "tests.agents", "--otel"]).otel is True
    assert parse_args(["--agents", "tests.agents", "--otel", "false"]).otel is False
    monkeypatch.setenv("HITL_OTEL", "1")
    assert parse_args(["--agents", "tests.agents"]).otel is True


def test_otel_without_the_extra_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if not installed
    code = asyncio.run(main(["--agents", "tests.agents", "--otel"]))
    err = capsys.readouterr().err
    assert code == EXIT_CONFIG
    assert err == (
        "worker: --otel (HITL_OTEL) needs the tracing extra: pip install 'hitl-temporal[tracing]'\n"
    )


def test_an_exporter_nobody_provides_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console,carrier-pigeon")
    with pytest.raises(UserError, match="'carrier-pigeon'") as caught:
        start_tracing()
    assert "\n" not in caught.value.message
