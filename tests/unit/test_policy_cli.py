"""`hitl policy schema/check/test` on the shipped example and on hostile or wrong files, and the
audit rows that name the rule and version behind each call."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hitl.cli import run
from hitl.cli.audit import COLUMNS, rows_of
from hitl.policy import load_policy
from hitl.policy.analysis import check
from hitl.wire import DecisionRecord, PolicyVerdict, RunStatus

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "policies"
POLICY = EXAMPLES / "refund_desk.yaml"
CASES = EXAMPLES / "refund_desk_cases.yaml"


def test_the_example_policy_checks_and_its_cases_pass(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["policy", "check", str(POLICY)]) == 0
    out = capsys.readouterr().out
    assert "0 errors" in out and "refund-desk@2026-11-26.1 sha256:" in out
    assert run(["policy", "test", str(POLICY), str(CASES)]) == 0
    out = capsys.readouterr().out
    assert "10 passed, 0 failed" in out and "FAIL" not in out


def test_check_strict_fails_on_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["policy", "check", "--strict", str(POLICY)]) == 1


def test_a_failed_case_exits_1_with_a_readable_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        "defaults: {agent: Refund desk, tool: refund, categories: [payments]}\n"
        "cases:\n"
        "  - name: a huge refund is allowed (wrong on purpose)\n"
        "    arguments: {customer_id: C-1, amount: 60000}\n"
        "    expect: {effect: allow, rule: finance-decides-refunds}\n"
    )
    assert run(["policy", "test", str(POLICY), str(cases)]) == 1
    out = capsys.readouterr().out
    assert "FAIL a huge refund is allowed (wrong on purpose)" in out
    assert "effect: expected allow, got deny" in out
    assert "rule: expected finance-decides-refunds, got deny-above-50k" in out
    assert "0 passed, 1 failed" in out
    assert "amount gt 50000: holds" in out, "the failed case says why"


def test_conflicts_are_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "p.yaml"
    doc.write_text(
        "policy: p\nversion: '1'\nrules:\n"
        "  - {id: free-reads, tools: [read_*], effect: allow}\n"
        "  - {id: no-secrets, tools: [read_secret], effect: deny, message: no}\n"
        "  - {id: never, when: [{arg: a, gt: 10}, {arg: a, lt: 5}], effect: ask}\n"
        "  - {id: closed, tools: [wire], effect: deny, message: closed}\n"
        "  - {id: wire-ask, tools: [wire], when: [{arg: amount, gt: 1}], effect: ask}\n"
    )
    findings = {(f.level, f.rule): f.message for f in check(load_policy(doc))}
    assert "can never match" in findings[("error", "never")]
    assert "is unreachable" in findings[("error", "wire-ask")]
    assert "comes after allow rule free-reads" in findings[("warning", "no-secrets")]
    assert run(["policy", "check", str(doc)]) == 1
    assert "2 errors" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("policy: p\nversion: '1'\nrules:\n  - {id: r, effect: deny}\n", "line 4"),
        ("policy: p\nrules: !!python/name:os.system\n", "line 2"),
        ("\xff\xfe", "not UTF-8"),
    ],
)
def test_a_bad_file_is_one_line_with_where_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, said: str
) -> None:
    doc = tmp_path / "p.yaml"
    doc.write_bytes(text.encode("latin-1"))
    assert run(["policy", "check", str(doc)]) == 1
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1 and "Traceback" not in err


def test_schema_is_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["policy", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "PolicyDocument" and "Rule" in schema["$defs"]
    assert "in" in schema["$defs"]["Condition"]["properties"], "operators by their own names"


def test_audit_rows_name_rule_and_version_also_for_shadow_verdicts() -> None:
    at = datetime(2026, 11, 26, tzinfo=UTC)
    verdict = PolicyVerdict(
        call_id="t1.1",
        at=at,
        policy="desk",
        version="1",
        digest="sha256:" + "a" * 64,
        shadow_effect="deny",
        shadow_rule="would-deny",
        matched=["would-deny"],
        outcome="free",
    )
    decision = DecisionRecord(
        call_id="t2.1",
        tool_name="refund",
        kind="approve",
        approver="bob",
        decided_at=at,
        policy_rule="four-eyes",
        policy_version="desk@1 sha256:aaaaaaaaaaaa",
    )
    status = RunStatus(
        workflow_id="w",
        run_id="r",
        phase="completed",
        agent="Desk",
        decisions=[decision],
        verdicts=[verdict],
    )
    rows = {r["call_id"]: r for r in rows_of(status)}
    assert set(rows["t1.1"]) == set(COLUMNS) == set(rows["t2.1"])
    assert (rows["t1.1"]["event"], rows["t1.1"]["kind"]) == ("policy", "none")
    assert rows["t1.1"]["reason"] == "log_only: deny by would-deny"
    assert rows["t1.1"]["policy_version"] == "desk@1 sha256:aaaaaaaaaaaa"
    assert (rows["t2.1"]["policy_rule"], rows["t2.1"]["event"]) == ("four-eyes", "decision")


@pytest.mark.parametrize("command", ["publish", "apply"])
def test_publish_and_apply_read_the_file_and_key_before_connecting(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
) -> None:
    """A typo in FILE, or no admin key, fails at once with its own reason, not a connection
    error (nothing listens at the address given)."""
    monkeypatch.delenv("HITL_SIGNING_KEY", raising=False)
    runs = ["run-1"] if command == "apply" else []
    nowhere = ["--address", "127.0.0.1:9"]
    assert run([*nowhere, "policy", command, str(tmp_path / "nope.yaml"), *runs]) == 1
    err = capsys.readouterr().err
    assert "nope.yaml: cannot read it" in err and err.count("\n") == 1, err
    assert run([*nowhere, "policy", command, str(POLICY), *runs]) == 1
    err = capsys.readouterr().err
    assert "HITL_SIGNING_KEY" in err and err.count("\n") == 1, err
