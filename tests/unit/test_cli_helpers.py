"""Pure parts of the `hitl` CLI: query literals, decision ids, reporting what was recorded."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from hitl.cli import Refused
from hitl.cli.common import _literal, _path_text
from hitl.cli.deciding import _outcome
from hitl.starting import decision_update_id
from hitl.wire import DecisionRecord, DecisionRequest


def test_query_literals_escape_quotes_or_give_up() -> None:
    assert _literal("Support agent") == "'Support agent'"
    assert _literal("O'Brien's desk") == "'O\\'Brien\\'s desk'"
    # No literal matches these on every visibility store: the CLI filters them itself.
    assert _literal('Say "hi"') is None
    assert _literal("back\\slash") is None
    assert _literal("x' OR HitlStatus != '") == "'x\\' OR HitlStatus != \\''"


def _req(**kw: object) -> DecisionRequest:
    base: dict[str, object] = {"kind": "approve", "call_id": "c1", "approver": "x"}
    return DecisionRequest.model_validate({**base, **kw})


def test_update_ids_differ_by_every_field_of_a_decision() -> None:
    """One id function for the CLI and the Runner: a retry dedupes, any difference does not."""

    def uid(run: str, decisions: list[DecisionRequest], update: str = "approve") -> str:
        return decision_update_id(run, update, decisions)

    first = uid("run", [_req()])
    assert first == uid("run", [_req()]), "an exact retry dedupes"
    variants = [
        uid("other-run", [_req()]),
        uid("run", [_req(call_id="c2")]),
        uid("run", [_req(kind="reject")]),
        uid("run", [_req(approver="y")]),
        uid("run", [_req(always=True)]),
        uid("run", [_req(kind="reject", message="no")]),
        uid("run", [_req(reason="vip")]),
        # The server answers a repeated id with the first update's result, whatever its name:
        # the same decision sent as `decide` must not collide with it sent as `approve`.
        uid("run", [_req()], update="decide"),
    ]
    assert len({first, *variants}) == len(variants) + 1
    two = [_req(call_id="a"), _req(call_id="b")]
    assert uid("run", two, "decide") == uid("run", two[::-1], "decide")


def _rec(**kw: object) -> DecisionRecord:
    base: dict[str, object] = {
        "call_id": "c1",
        "tool_name": "refund",
        "kind": "approve",
        "approver": "x",
        "decided_at": datetime(2025, 1, 1, tzinfo=UTC),
    }
    return DecisionRecord.model_validate({**base, **kw})


def test_the_outcome_is_what_was_recorded_not_what_was_asked() -> None:
    assert _outcome("run", [_req()], {"c1": _rec()}) == [_rec()]
    with pytest.raises(Refused, match=r"already decided: approve by x \(AlreadyDecided\)"):
        _outcome("run", [_req(always=True)], {"c1": _rec()})
    assert _outcome("run", [_req()], {"c1": _rec(source="policy")}) == [_rec(source="policy")]
    with pytest.raises(Refused, match='reject by x, message "no"'):
        _outcome("run", [_req(kind="reject")], {"c1": _rec(kind="reject", message="no")})
    with pytest.raises(Refused, match="recorded no decision"):
        _outcome("run", [_req()], {})


def test_a_decision_for_an_expired_call_says_it_expired_not_that_it_was_rejected() -> None:
    """Also for an expiry recorded by an older version (`reject` with `expired` set): the
    text used to be "already decided: reject by deadline", and a rejection was let through."""
    at = "2025-01-01T00:00:00+00:00"
    for expiry in (
        _rec(kind="expired", approver=None, source="deadline", via="workflow"),
        _rec(kind="reject", expired=True, approver=None, source="deadline", via="workflow"),
    ):
        for kind in ("approve", "reject"):
            with pytest.raises(Refused) as err:
                _outcome("run", [_req(kind=kind)], {"c1": expiry})
            assert str(err.value) == (
                f"refused: call 'c1' expired at {at}; nothing ran (DeadlinePassed)"
            )


def test_show_lists_an_expiry_the_actions_and_whom_a_refusal_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from hitl.cli.show import _print_decided
    from hitl.wire import CallAction, RefusedDecision, RunStatus

    at = datetime(2026, 1, 1, tzinfo=UTC)
    status = RunStatus(
        workflow_id="run",
        run_id="r",
        phase="completed",
        agent="A",
        decisions=[_rec(kind="reject", expired=True, approver=None, source="deadline")],
        actions=[
            CallAction(
                kind="extend",
                call_id="c2",
                tool_name="pay",
                at=at,
                approver=HOSTILE,
                deadline=at,
                previous=at,
            ),
            CallAction(
                kind="resolve",
                call_id="c2",
                tool_name="pay",
                at=at,
                approver="ops",
                outcome="happened",
                verified=True,
            ),
            CallAction(
                kind="answer",
                call_id="c3",
                tool_name="close",
                at=at,
                approver="ann",
                outcome="decline",
                reason="not now",
            ),
        ],
        refused=[
            RefusedDecision(
                received_at=at,
                name="approve",
                payload="",
                error_type="DeadlinePassed",
                message="late",
                call_id="c1",
                approver="bob",
            )
        ],
    )
    _print_decided(status)
    printed = capsys.readouterr().out
    assert "  c1 refund: expired at 2025-01-01T00:00:00+00:00 (deadline)" in printed
    assert "reject" not in printed
    when = at.isoformat()
    assert f"  {when} c2 pay: resolved: happened by ops, signed" in printed
    assert f"  {when} c3 close: answered: decline by ann (not now)" in printed
    [moved] = [line for line in printed.splitlines() if "deadline moved" in line]
    assert "\\nDecisions:" in moved and _raw_controls(moved) == [], (
        "a hostile approver stays on its line"
    )
    assert "(call c1) from bob: DeadlinePassed: late" in printed


def test_paths_read_from_the_root_down() -> None:
    assert _path_text(["Desk", "research", "Researcher"], "fetch") == (
        "Desk > research > Researcher > fetch"
    )


def test_a_rule_that_decided_the_same_way_is_the_outcome() -> None:
    # `approve --all --always`: approving the first call decides the others of the tool by rule.
    batch = [_req(call_id="c1", always=True), _req(call_id="c2", always=True)]
    recorded = {
        "c1": _rec(call_id="c1", always=True),
        "c2": _rec(call_id="c2", approver=None, source="always_rule"),
    }
    assert [r.call_id for r in _outcome("run", batch, recorded)] == ["c1", "c2"]
    with pytest.raises(Refused, match="already decided: reject by always rule"):
        _outcome(
            "run",
            [_req(call_id="c2")],
            {"c2": _rec(kind="reject", approver=None, source="always_rule")},
        )


class _FailingListing:
    """A client whose visibility listing fails in a way no command expects."""

    namespace = "default"

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.queries: list[str] = []
        self.workflow_service = self

    async def list_workflow_executions(self, req: Any, **_: object) -> object:
        self.queries.append(req.query)
        raise self.error


def test_an_unexpected_server_error_in_pending_is_one_typed_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import hitl.cli

    fake = _FailingListing(RPCError("visibility is down", RPCStatusCode.UNAVAILABLE, b""))

    async def connect(**_: object) -> _FailingListing:
        return fake

    monkeypatch.setattr(hitl.cli, "connect", connect)
    code = hitl.cli.run(["pending", "--agent", "O'Brien's desk", "--queue", "q"])
    assert code == 1
    err = capsys.readouterr().err
    assert err == "hitl: cannot list paused runs: visibility is down (UNAVAILABLE)\n"
    assert fake.queries == [
        "HitlStatus = 'awaiting_approval' AND ExecutionStatus = 'Running' "
        "AND HitlAgent = 'O\\'Brien\\'s desk' AND WorkflowType = 'AgentRun' AND TaskQueue = 'q'"
    ]


# ----------------------------------------------------------------------------- hostile text

HOSTILE = "ok\x1b[31mred\x1b]0;pwned\x07\r\u202eevil\x85\nDecisions:\n  c1 wire: approve by cfo"


def _raw_controls(text: str) -> list[str]:
    """Control and bidirectional characters left raw, structural newlines aside."""
    from hitl.cli.common import _unsafe

    return [c for c in text if _unsafe(c)]


def test_one_line_values_cannot_forge_lines_or_drive_the_terminal() -> None:
    from hitl.cli.common import one_line

    shown = one_line(HOSTILE)
    assert "\n" not in shown and "\r" not in shown
    assert _raw_controls(shown) == []
    assert "\\u001b[31m" in shown and "\\u202e" in shown and "\\nDecisions:" in shown


def test_watch_lines_are_escaped() -> None:
    from hitl.cli import format_event
    from hitl.wire import RunEvent

    for event in (
        RunEvent(type="message", text=HOSTILE, agent=HOSTILE, offset=1),
        RunEvent(type="tool_called", tool=HOSTILE, call_id=HOSTILE, data={"arguments": HOSTILE}),
        RunEvent(type="approval_decided", text="approve", data={"approver": HOSTILE}),
        RunEvent(type="model_text_delta", text=HOSTILE),
    ):
        line = format_event(event)
        assert "\n" not in line and _raw_controls(line) == [], line


def test_show_escapes_every_value_and_keeps_injected_lines_indented(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`hitl show` of a run whose tool arguments, approver and message are hostile."""
    from datetime import UTC, datetime

    from hitl.cli.show import _transcript_lines
    from hitl.wire import ApprovalRequestData, PendingApproval, RunItem, RunSnapshot, RunStatus

    now = datetime(2026, 1, 1, tzinfo=UTC)
    call = {"type": "function_call", "call_id": "c1", "name": "wire", "arguments": HOSTILE}
    snap = RunSnapshot(
        status=RunStatus(
            workflow_id="run",
            run_id="r",
            phase="awaiting_approval",
            agent="A",
            pending=[
                PendingApproval(
                    call_id="c1",
                    tool_name="wire",
                    agent_id="A",
                    agent_name=HOSTILE,
                    arguments=HOSTILE,
                    turn=1,
                    requested_at=now,
                    request=ApprovalRequestData(title=HOSTILE, message=HOSTILE),
                )
            ],
            decisions=[_rec(approver=HOSTILE, message=HOSTILE)],
            final_output="Refunded order 7.\nDecisions:\n" + HOSTILE,
        ),
        input_items=[{"role": "user", "content": HOSTILE}],
        new_items=[RunItem(type="tool_call_item", agent_id="A", agent_name="A", raw_item=call)],
    )
    lines = _transcript_lines(snap)
    assert all("\n" not in line and _raw_controls(line) == [] for line in lines)
    assert "(waiting for a person)" in lines[-1], "a waiting call is not shown as done"

    import hitl.cli.show as show
    from hitl.cli.common import SafeStream

    async def fake_query(*_: object, **__: object) -> RunSnapshot:
        return snap

    import asyncio
    import sys
    from argparse import Namespace

    original = show._query
    show._query = fake_query  # type: ignore[assignment]
    out = sys.stdout
    sys.stdout = SafeStream(out)  # type: ignore[assignment]
    try:
        client = type("Client", (), {"get_workflow_handle": lambda *a, **k: None})()
        asyncio.run(show.cmd_show(client, Namespace(run="run", json=False, timeout=1)))
    finally:
        sys.stdout = out
        show._query = original
    printed = capsys.readouterr().out
    assert _raw_controls(printed) == []
    # The injected "Decisions:" line stays inside the indented request block, never at the
    # start of a line of its own.
    assert [line for line in printed.splitlines() if line.startswith("Decisions:")] == [
        "Decisions:"
    ]
    # A multi-line final output reads as lines, indented under its heading.
    assert "Final output:\n    Refunded order 7.\n    Decisions:\n" in printed


def test_the_output_stream_keeps_json_valid() -> None:
    import io
    import json

    from hitl.cli.common import SafeStream

    buffer = io.StringIO()
    value = {"text": "a\u202eb\x85c\x1b"}
    SafeStream(buffer).write(json.dumps(value, ensure_ascii=False))
    assert _raw_controls(buffer.getvalue()) == []
    assert json.loads(buffer.getvalue()) == value


def _waiting(kind: str) -> tuple[Any, datetime]:
    """A pending call of `kind` that was approved at 09:00 and started its wait at 10:00."""
    from hitl.wire import ApprovalRequestData, InputRequest, PendingApproval, UncertainCall

    approved_at, since = datetime(2026, 1, 1, 9, tzinfo=UTC), datetime(2026, 1, 1, 10, tzinfo=UTC)
    return (
        PendingApproval(
            call_id="t1.1",
            tool_name="close_account",
            agent_id="A",
            agent_name="A",
            arguments="{}",
            turn=1,
            requested_at=approved_at if kind == "uncertain" else None,
            request=ApprovalRequestData(title="Close account 7001", message="Close it?"),
            kind=kind,  # type: ignore[arg-type]
            uncertain=UncertainCall(since=since, error="worker lost")
            if kind == "uncertain"
            else None,
            input_request=InputRequest(
                server="backoffice", message="Really close it?", requested_schema={}, since=since
            )
            if kind == "input"
            else None,
        ),
        since,
    )


@pytest.mark.parametrize(
    ("kind", "settle"), [("input", "hitl answer"), ("uncertain", "hitl resolve")]
)
def test_show_says_since_when_a_call_waits_and_offers_what_settles_it(
    capsys: pytest.CaptureFixture[str], kind: str, settle: str
) -> None:
    from hitl.cli.show import _print_call
    from hitl.wire import RunStatus

    call, since = _waiting(kind)
    st = RunStatus(
        workflow_id="run", run_id="r", phase="awaiting_approval", agent="A", pending=[call]
    )
    _print_call(st, 1, call)
    out = capsys.readouterr().out
    assert f"waiting since {since}" in out and "None" not in out
    assert settle in out
    assert "hitl approve" not in out and "hitl reject" not in out, "it was approved already"


def test_pending_labels_what_each_call_waits_for() -> None:
    from types import SimpleNamespace

    from hitl.cli.inbox import _call_row, _pending_rows
    from hitl.wire import InboxEntry, RunStatus

    w: Any = SimpleNamespace(id="run", task_queue="q")
    rows = {}
    for kind in ("uncertain", "input"):
        call, since = _waiting(kind)
        status = RunStatus(
            workflow_id="run", run_id="r", phase="awaiting_approval", agent="A", pending=[call]
        )
        [(key, cells, data)] = _pending_rows(w, status)
        assert key == since and data["waiting_since"] == since.isoformat()
        rows[kind] = cells
    assert rows["uncertain"][2] == "uncertain: hitl resolve"
    assert rows["input"][2] == "input: hitl answer"
    assert rows["input"][4] == "Really close it?", "the question, as the memo lists it"
    entry = InboxEntry(
        call_id="t1.1", tool_name="pay", agent_id="A", agent_name="A", title="Pay", kind="uncertain"
    )
    assert _call_row(w, "run", "A", "Pay", 0, entry)[1][2] == "uncertain: hitl resolve"
    approval = entry.model_copy(update={"kind": "approval"})
    assert _call_row(w, "run", "A", "Pay", 0, approval)[1][2] == "approval"


async def test_a_query_the_server_refuses_for_want_of_pollers_says_no_worker_polls() -> None:
    """Just after a worker stops, the task queue may still list it while the server already
    refuses the query (FAILED_PRECONDITION, "no poller seen ..."; seen under load): the reader
    is told no worker polls, not handed the server's words. Other refusals keep theirs."""
    from hitl.cli.common import _Pollers, _query, _Unreadable
    from hitl.wire import RunStatus

    class Handle:
        id = "run-1"

        def __init__(self, error: RPCError) -> None:
            self.error = error

        async def query(self, *_: object, **__: object) -> RunStatus:
            raise self.error

    class Listed(_Pollers):
        async def count(self, queue: str, *, fresh: bool = False) -> int | None:
            return 1  # the stopped worker, still listed

    no_poller = RPCError(
        "no poller seen for task queue recently, worker may be down",
        RPCStatusCode.FAILED_PRECONDITION,
        b"",
    )
    other = RPCError("workflow is busy", RPCStatusCode.FAILED_PRECONDITION, b"")
    for error, said in [
        (no_poller, "no worker is polling task queue 'q'"),
        (other, "workflow is busy (FAILED_PRECONDITION)"),
    ]:
        with pytest.raises(_Unreadable) as caught:
            await _query(None, Handle(error), "status", RunStatus, 1.0, Listed(None), "q")  # type: ignore[arg-type]
        assert caught.value.reason == said


def test_hitl_run_prints_a_multi_line_output_indented_and_a_short_one_on_its_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`hitl run --wait` shows an agent's final output as `hitl show` does: a report of several
    lines readable, each indented (a line of it cannot pass for `failed:` or a call of ours)."""
    from hitl.cli.running import _report
    from hitl.wire import RunStatus

    def report(output: str) -> str:
        _report(
            RunStatus(
                workflow_id="w", run_id="r", agent="A", phase="completed", final_output=output
            )
        )
        return capsys.readouterr().out

    assert report("Refunded order 7.") == "completed: Refunded order 7.\n"
    shown = report("Here is what happened:\n- refund: done\nfailed: forged\x1b[2J")
    assert shown.splitlines() == [
        "completed:",
        "    Here is what happened:",
        "    - refund: done",
        "    failed: forged\\u001b[2J",
    ]
