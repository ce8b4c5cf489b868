"""Pure parts of the `hitl` CLI: query literals, decision ids, reporting what was recorded."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from temporalio.service import RPCError, RPCStatusCode

from hitl.cli import Refused, _literal, _outcome, _path_text
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

    def list_workflows(self, query: str, **_: object) -> _FailingListing:
        self.queries.append(query)
        return self

    def __aiter__(self) -> _FailingListing:
        return self

    async def __anext__(self) -> object:
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
        "AND HitlAgent = 'O\\'Brien\\'s desk' AND TaskQueue = 'q'"
    ]
