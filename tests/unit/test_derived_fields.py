"""Derived fields (`hitl.wire.base.derived`): left out of sparse payloads, read back the same.

A payload written before a field became derivable holds it (it was required), and reads as it
did; one written after leaves it out when it holds its source's value, and reads the same
objects. A present value is never replaced, whatever it holds (anyone who may send an update,
a signal or a start input writes payloads).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import AliasChoices, Field, ValidationError

from hitl.client import data_converter
from hitl.wire import (
    AgentSpec,
    CallModelInput,
    DecisionRecord,
    ExecuteToolInput,
    InboxEntry,
    InboxMemo,
    ModelSpec,
    PendingApproval,
    RunItem,
    RunOutput,
    RunStatus,
    SettledStatus,
    Usage,
    WireModel,
    idempotency_key,
)
from hitl.wire.base import derived

CONV = data_converter(codec=None).payload_converter
WHEN = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def stored(value: WireModel) -> dict[str, Any]:
    """The JSON a history holds for `value`."""
    [payload] = CONV.to_payloads([value])
    data: dict[str, Any] = json.loads(payload.data)
    return data


def read(data: dict[str, Any], cls: type[WireModel]) -> Any:
    """`data` as a history payload, read as our workers and clients read it."""
    [payload] = CONV.to_payloads([data])
    return CONV.from_payloads([payload], [cls])[0]


def pending(agent_id: str = "Desk", agent_name: str = "Desk") -> PendingApproval:
    return PendingApproval(
        call_id="t1.1",
        tool_name="refund",
        agent_id=agent_id,
        agent_name=agent_name,
        arguments="{}",
        turn=1,
        requested_at=WHEN,
        path=[agent_id],
    )


def decision() -> DecisionRecord:
    return DecisionRecord(call_id="t1.1", tool_name="refund", kind="approve", decided_at=WHEN)


def test_a_field_holding_its_source_is_left_out_and_read_back() -> None:
    model = CallModelInput(root_agent="Desk", agent_id="Desk", agent_name="Desk")
    assert stored(model) == {"root_agent": "Desk"}
    assert read(stored(model), CallModelInput) == model
    item = RunItem(type="message_output_item", agent_id="Desk", agent_name="Desk", raw_item={})
    out = RunOutput(
        last_agent="Desk",
        last_agent_name="Desk",
        input_items=[],
        new_items=[item],
        usage=Usage(),
        decisions=[],
        turns=1,
    )
    data = stored(out)
    assert "last_agent_name" not in data and "agent_name" not in data["new_items"][0]
    assert read(data, RunOutput) == out


def test_an_agent_named_as_its_id_is_stored_once() -> None:
    spec = AgentSpec(id="Desk", name="Desk", model=ModelSpec(name="m"))
    assert "name" not in stored(spec)
    assert read(stored(spec), AgentSpec) == spec
    twin = AgentSpec(id="Desk~2", name="Desk", model=ModelSpec(name="m"))
    assert stored(twin)["name"] == "Desk"
    assert read(stored(twin), AgentSpec) == twin


def test_old_payloads_with_the_fields_read_as_before() -> None:
    old = {"root_agent": "Desk", "agent_id": "Desk", "agent_name": "Desk", "turn": 2}
    assert read(old, CallModelInput) == CallModelInput.model_validate(old)
    assert read(old, CallModelInput).agent_name == "Desk"
    entry = {"call_id": "c", "tool_name": "t", "agent_id": "a", "agent_name": "A", "title": "x"}
    assert read({"calls": [entry]}, InboxMemo).calls[0].agent_name == "A"


def test_a_value_that_differs_is_kept_written_and_read() -> None:
    """A handoff's agent named apart from its id, or a hostile payload: nothing is derived."""
    model = CallModelInput(root_agent="Desk", agent_id="Billing", agent_name="Billing team")
    assert stored(model) == {
        "root_agent": "Desk",
        "agent_id": "Billing",
        "agent_name": "Billing team",
    }
    assert read(stored(model), CallModelInput) == model
    forged = {"root_agent": "Desk", "agent_name": "Someone else"}
    got = read(forged, CallModelInput)
    assert (got.agent_id, got.agent_name) == ("Desk", "Someone else")


def test_a_payload_without_the_source_is_refused_as_before() -> None:
    with pytest.raises(ValidationError, match="root_agent"):
        CallModelInput.model_validate({"agent_id": "Desk", "agent_name": "Desk"})
    with pytest.raises(ValidationError, match="agent_name"):
        PendingApproval.model_validate(
            {"call_id": "c", "tool_name": "t", "agent_id": "a", "agent_name": None}
            | {"arguments": "{}", "turn": 1}
        )


def test_the_update_answer_is_sparse_and_the_status_query_complete() -> None:
    status = RunStatus(
        workflow_id="w", run_id="r", phase="awaiting_approval", agent="Desk", pending=[pending()]
    )
    assert stored(status)["pending"][0]["agent_name"] == "Desk"
    settled = SettledStatus(**status.model_dump())
    assert "agent_name" not in stored(settled)["pending"][0]
    assert read(stored(settled), SettledStatus) == settled
    assert read(stored(settled), RunStatus) == status
    other = SettledStatus(**status.model_dump() | {"pending": [pending("Desk", "The desk")]})
    assert stored(other)["pending"][0]["agent_name"] == "The desk"


def test_the_memo_leaves_out_what_it_derives() -> None:
    entry = InboxEntry(call_id="c", tool_name="t", agent_id="a", agent_name="a", title="x")
    memo = InboxMemo(calls=[entry], total=1)
    assert stored(memo)["calls"] == [
        {"call_id": "c", "tool_name": "t", "agent_id": "a", "title": "x"}
    ]
    assert read(stored(memo), InboxMemo) == memo


def test_the_tool_input_leaves_out_what_the_activity_knows() -> None:
    inp = ExecuteToolInput(
        root_agent="Desk",
        agent_id="Desk",
        tool_name="refund",
        call_id="t1.1",
        arguments="{}",
        decision=decision(),
    )
    data = stored(inp)
    assert data == {
        "root_agent": "Desk",
        "arguments": "{}",
        "decision": {
            "call_id": "t1.1",
            "tool_name": "refund",
            "kind": "approve",
            "decided_at": "2026-11-26T12:00:00Z",
        },
    }
    got = read(data, ExecuteToolInput)
    assert got == inp
    located = got.located("run-1")
    assert located.workflow_id == "run-1"
    assert located.idempotency_key == idempotency_key("run-1", "t1.1") == "run-1:t1.1"
    # A call that needed no decision names itself.
    free = inp.model_copy(update={"decision": None})
    assert stored(free)["call_id"] == "t1.1" and stored(free)["tool_name"] == "refund"
    assert read(stored(free), ExecuteToolInput) == free


def test_a_tool_input_that_names_its_run_and_key_keeps_them() -> None:
    """Payloads of earlier versions name both; a key or run of their own stays as it is."""
    old = {
        "root_agent": "Desk",
        "agent_id": "Desk",
        "tool_name": "refund",
        "call_id": "t1.1",
        "arguments": "{}",
        "workflow_id": "run-1",
        "idempotency_key": "custom-key",
        "decision": decision().model_dump(mode="json"),
    }
    got = read(old, ExecuteToolInput).located("elsewhere")
    assert (got.workflow_id, got.idempotency_key) == ("run-1", "custom-key")
    assert got.decision == decision()
    blank = read(old | {"workflow_id": "", "idempotency_key": ""}, ExecuteToolInput)
    assert (blank.located("x").workflow_id, blank.located("x").idempotency_key) == ("", "")
    # The call's own id and tool win over its decision's (as before: both were read as sent).
    odd = read({**old, "decision": {**old["decision"], "call_id": "t9.9"}}, ExecuteToolInput)
    assert odd.call_id == "t1.1" and odd.decision is not None and odd.decision.call_id == "t9.9"
    assert stored(odd)["call_id"] == "t1.1"


def test_strict_handler_parsing_reads_a_sparse_payload() -> None:
    """Update and start inputs are parsed strictly from JSON (`workflows.inputs`)."""
    rec = pending()
    [payload] = CONV.to_payloads(
        [SettledStatus(workflow_id="w", run_id="r", phase="running", agent="a", pending=[rec])]
    )
    got = SettledStatus.model_validate_json(payload.data, strict=True)
    assert got.pending == [rec]


def test_declarations_that_could_misread_a_payload_are_refused() -> None:
    class DefaultTarget(WireModel):
        id: str
        name: str = Field("", validation_alias=AliasChoices("name", "id"))

    class OptionalSource(WireModel):
        id: str | None = None
        name: str = derived("name", "id")

    class DerivedLater(WireModel):
        name: str = derived("name", "id")
        id: str = derived("id", "root")
        root: str

    for cls in (DefaultTarget, OptionalSource, DerivedLater):
        with pytest.raises(TypeError):
            cls.check_derived()
    ExecuteToolInput.check_derived()
