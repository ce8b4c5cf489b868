"""Signed decisions without a server: keys, the directory file, `hitl keys`, `--set`."""

from __future__ import annotations

import argparse
import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hitl.cli import _run
from hitl.cli.deciding import edited_arguments
from hitl.errors import UserError
from hitl.signing import (
    SignatureError,
    decision_message,
    load_directory,
    load_private_key,
    sign_input,
    verify_decision,
)
from hitl.wire import DecisionInput

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def test_hitl_keys_new_writes_a_private_key_whose_entry_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ann.key"
    assert _run(["keys", "new", "--approver", "ann", "--groups", "finance", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    entry = json.loads(printed[: printed.rindex("}") + 1])
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    (tmp_path / "approvers.json").write_text(json.dumps(entry))
    directory = load_directory(tmp_path / "approvers.json")
    assert directory.approvers["ann"].groups == ["finance"]
    [key_id] = directory.approvers["ann"].keys
    d = sign_input(
        DecisionInput(call_id="c1", approver="ann"),
        kind="approve",
        workflow_id="w",
        key_id=key_id,
        key=load_private_key(out),
        now=NOW,
    )
    assert verify_decision(directory, d, kind="approve", workflow_id="w", now=NOW) == "ann"
    with pytest.raises(SignatureError) as err:
        verify_decision(directory, d, kind="reject", workflow_id="w", now=NOW)
    assert err.value.type == "BadSignature"
    assert _run(["keys", "new", "--approver", "ann", "--out", str(out)]) == 1, "never overwrite"


def test_the_signed_message_is_canonical() -> None:
    a = decision_message(
        workflow_id="w",
        call_id="c",
        kind="approve",
        approver="ann",
        arguments={"b": 1, "a": [1, 2]},
        expires_at=NOW,
    )
    b = decision_message(
        workflow_id="w",
        call_id="c",
        kind="approve",
        approver="ann",
        arguments={"a": [1, 2], "b": 1},
        expires_at=NOW + timedelta(microseconds=5),
    )
    assert a == b and a.startswith(b"hitl-decision\n")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ({"ann": {"keys": {"k1": "not base64!"}}}, "not a base64 Ed25519 key"),
        ({"ann": {"keys": {"k1": "AAAA"}}}, "not a base64 Ed25519 key"),
        (
            {"ann": {"keys": {"k1": "A" * 43 + "="}}, "bob": {"keys": {"k1": "A" * 43 + "="}}},
            "is listed for ann and bob",
        ),
        ({"": {}}, "approver names"),
    ],
)
def test_a_bad_directory_is_refused_with_its_entry(
    tmp_path: Path, content: dict[str, object], problem: str
) -> None:
    path = tmp_path / "approvers.json"
    path.write_text(json.dumps(content))
    with pytest.raises(UserError) as err:
        load_directory(path)
    assert problem in err.value.message


def test_set_edits_the_current_arguments_and_parses_json_values(tmp_path: Path) -> None:
    args = argparse.Namespace(set=["amount=100", 'note="100"', "reason=late delivery"])
    args.args_file = None
    current = {"order": 7, "amount": 500, "note": None}
    assert edited_arguments(args, current) == {
        "order": 7,
        "amount": 100,
        "note": "100",
        "reason": "late delivery",
    }
    path = tmp_path / "args.json"
    path.write_text('{"order": 8, "amount": 1}')
    args = argparse.Namespace(set=["amount=2"], args_file=str(path))
    assert edited_arguments(args, current) == {"order": 8, "amount": 2}
    assert edited_arguments(argparse.Namespace(set=None, args_file=None)) is None
