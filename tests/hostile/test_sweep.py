"""Every update, signal, query and the start input, swept with hostile payloads.

For each handler, a parked run receives every variant of `raw.variants()`: no input, two or
three inputs, every JSON type, wrong types, 20,000-deep nesting, invalid UTF-8, non-JSON bytes,
other encodings, forged ciphertext, terminal escapes, a 1.9 MB payload (just under the server's
limit) and seeded random JSON. Afterwards the run must be unharmed (`Desk.still_healthy`) and a
legitimate approval must still run the tool exactly once.
"""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from tests.helpers import history, tool_activity_count
from tests.hostile import raw
from tests.hostile.conftest import Desk

UPDATES = [
    "approve",
    "reject",
    "decide",
    "extend",
    "resolve",
    "answer",
    "wait",
    "apply_policy",
    "__temporal_workflow_stream_poll",
]
SIGNALS = [
    "approve",
    "reject",
    "__hitl_child_report",
    "__hitl_from_root",
    "__temporal_workflow_stream_publish",
]
QUERIES = [
    "status",
    "snapshot",
    "transcript",
    "__hitl_report",
    "__hitl_mail",
    "__temporal_workflow_stream_poll",
    "__temporal_workflow_stream_offset",
]
# Our own refusal types: a refusal is typed and one line, never "Failed decoding arguments".
TYPED = {"InvalidDecision", "InvalidMessage", "UnknownCall", "TooManyWaiters", "InvalidApply"}
DECISIONS = {"approve", "reject", "decide", "extend", "resolve", "answer", "apply_policy"}


@pytest.mark.parametrize("name", UPDATES)
async def test_updates_refuse_what_they_cannot_use(desk: Desk, name: str) -> None:
    handle, call_id = await desk.park()
    long_poll = name in ("wait", "__temporal_workflow_stream_poll")
    for case, payloads in raw.variants():
        answer = await raw.update(desk.client, handle.id, name, payloads, accepted_only=long_poll)
        if name in DECISIONS:
            assert not answer.ok, f"{name}/{case} was accepted"
        if not answer.ok:
            assert answer.rpc is None, f"{name}/{case}: {answer.message}"
            assert answer.type in TYPED, f"{name}/{case}: {answer.type}: {answer.message}"
            assert "\n" not in answer.message, f"{name}/{case}: not one line"
            assert len(answer.message) < 600, f"{name}/{case}: the payload was echoed back"
    await desk.still_healthy(handle, call_id)
    await desk.approve_and_finish(handle, call_id)


@pytest.mark.parametrize("name", SIGNALS)
async def test_signals_never_jam_a_run(desk: Desk, name: str) -> None:
    handle, call_id = await desk.park()
    cases = raw.variants()
    for _case, payloads in cases:
        answer = await raw.signal(desk.client, handle.id, name, payloads)
        assert answer.ok, answer.message  # the server takes any signal; the run must cope
    status = await desk.still_healthy(handle, call_id)
    if name in ("approve", "reject"):
        # A signal cannot answer: every refusal is recorded, typed and on one line.
        assert len(status.refused) == min(len(cases), 50)
        assert {r.error_type for r in status.refused} <= TYPED | {"UnknownCall"}
        assert all("\n" not in r.message and r.via == "signal" for r in status.refused)
    await desk.approve_and_finish(handle, call_id)


@pytest.mark.parametrize("name", QUERIES)
async def test_queries_answer_or_refuse_and_change_nothing(desk: Desk, name: str) -> None:
    handle, call_id = await desk.park()
    for _case, payloads in raw.variants():
        await raw.query(desk.client, handle.id, name, payloads)  # may refuse; must not harm
    await desk.still_healthy(handle, call_id)
    await desk.approve_and_finish(handle, call_id)


async def test_any_start_input_fails_typed_or_runs_nothing_unapproved(desk: Desk) -> None:
    """Whatever a start carries, the run ends as a typed failure at once (or, given a valid
    input, parks): no workflow task fails, and no tool runs."""
    for case, payloads in raw.variants():
        wid = f"hostile-start-{case}-{uuid.uuid4().hex[:6]}"
        answer = await raw.start(desk.client, wid, desk.task_queue, payloads)
        assert answer.ok, f"{case}: {answer.message}"
        handle = desk.client.get_workflow_handle(wid)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        cause = failed.value.cause
        assert getattr(cause, "type", None) == "UserError", f"{case}: {cause}"
        assert "\n" not in str(getattr(cause, "message", "")), case
        hist = await history(handle)
        assert raw.task_failures(hist) == [], case
        assert tool_activity_count(hist) == 0, case
        assert (await handle.describe()).status == WorkflowExecutionStatus.FAILED
    assert desk.ledger.count() == 0


async def test_unknown_handler_names_are_refused_and_change_nothing(desk: Desk) -> None:
    """A typo in an update, signal or query name (RELIABILITY.md #9): the update is refused
    with the names it could have meant, the signal is dropped without harm, the query fails."""
    handle, call_id = await desk.park()
    payload = [raw.json_payload({"call_id": call_id, "approver": "ops"})]
    answer = await raw.update(desk.client, handle.id, "aprove", payload)
    assert not answer.ok
    assert "aprove" in answer.message and "approve" in answer.message, answer.message
    sent = await raw.signal(desk.client, handle.id, "aprove", payload)
    assert sent.ok, sent.message
    asked = await raw.query(desk.client, handle.id, "statsu", [])
    assert not asked.ok
    await desk.still_healthy(handle, call_id)
    await desk.approve_and_finish(handle, call_id)
