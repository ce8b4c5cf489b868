"""Which searches of a cut inbox reach the server, and how (`hitl.console.window`).

The e2e console test (`test_console_gate.py`) runs these clauses against a dev server.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hitl.console.window import search_clause

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def test_a_minimum_waiting_time_is_a_bound_on_since() -> None:
    got = search_clause("", min_age=3600, now=NOW)
    assert got == "StartTime <= '2026-11-27T11:00:00.000000Z'"
    both = search_clause("run-1", tool="refund", min_age=60, now=NOW)
    assert both is not None and both.startswith("StartTime <= '2026-11-27T11:59:00")


@pytest.mark.parametrize(
    "text",
    [
        'run" OR 1=1',
        "back\\slash",
        "line\nbreak",
        "nul\x00",
        "x" * 201,
    ],
)
def test_search_text_no_literal_expresses_never_reaches_the_server(text: str) -> None:
    assert search_clause(text, "", "") is None
    assert search_clause("", text, "") is None
    assert search_clause("", "", text) is None


def test_search_clauses_quote_what_they_send() -> None:
    got = search_clause("o'brien", "Support agent (v2)", "cancel_order")
    assert got == (
        "(WorkflowId STARTS_WITH 'o\\'brien' OR HitlAgent = 'o\\'brien' OR "
        "HitlPendingTools = 'o\\'brien') AND HitlAgent = 'Support agent (v2)' AND "
        "HitlPendingTools = 'cancel_order'"
    )
    assert search_clause("", "", "") is None
    # A quote is escaped, never a way out of the literal (the e2e test runs it on a server).
    assert search_clause("' OR WorkflowId != '", "", "") == (
        "(WorkflowId STARTS_WITH '\\' OR WorkflowId != \\'' OR "
        "HitlAgent = '\\' OR WorkflowId != \\'' OR HitlPendingTools = '\\' OR WorkflowId != \\'')"
    )
