"""`hitl doctor`'s checks of this machine's settings (the server's are in tests/e2e)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hitl.cli.doctor import Finding, _local_encryption, _signing, _storage
from hitl.signing import key_id_for, new_key_pair, private_key_pem


def key_file(tmp_path: Path, name: str) -> tuple[Path, str, str]:
    key, public = new_key_pair()
    path = tmp_path / f"{name}.key"
    path.write_bytes(private_key_pem(key))
    return path, key_id_for(public), public


def levels(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(f.level, f.topic) for f in findings]


def test_the_signing_key_is_named_by_the_directory_entry_that_lists_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice, kid, public = key_file(tmp_path, "alice")
    mallory, other_kid, _ = key_file(tmp_path, "mallory")
    directory = tmp_path / "approvers.json"
    entries = {"alice": {"groups": ["refunds"], "keys": {kid: public}}}
    directory.write_text(json.dumps({"approvers": entries}))
    monkeypatch.setenv("HITL_APPROVERS", str(directory))
    monkeypatch.setenv("HITL_SIGNING_KEY", str(alice))
    approvers, signing = _signing()
    assert approvers.level == "ok" and "1 approver(s), 1 key(s)" in approvers.text
    assert signing.level == "ok" and f"key {kid!r} of 'alice'" in signing.text

    monkeypatch.setenv("HITL_SIGNING_KEY", str(mallory))
    _, signing = _signing()
    assert signing.level == "fail" and other_kid in signing.text
    assert signing.fix == f"add the entry `hitl keys show {mallory}` prints to the directory"

    directory.write_text("{not json")
    approvers, _ = _signing()
    assert approvers.level == "fail" and "is not JSON" in approvers.text
    monkeypatch.setenv("HITL_SIGNING_KEY", str(tmp_path / "gone.key"))
    assert levels(_signing()) == [("fail", "approvers"), ("fail", "signing key")]


def test_unset_settings_are_ok_and_broken_ones_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HITL_APPROVERS", "HITL_SIGNING_KEY", "HITL_ENCRYPTION_KEY", "HITL_STORAGE"):
        monkeypatch.delenv(name, raising=False)
    assert levels(_signing()) == [("ok", "approvers"), ("ok", "signing key")]
    findings: list[Finding] = []
    assert _local_encryption(findings) is None and findings[0].level == "ok"
    assert _storage().level == "ok"

    monkeypatch.setenv("HITL_ENCRYPTION_KEY", "k1:not-base64!")
    findings = []
    assert _local_encryption(findings) is None
    assert findings[0].level == "fail" and findings[0].fix == "a new key: python -m hitl.codec"
    monkeypatch.setenv("HITL_STORAGE", "ftp://somewhere")
    assert _storage().level == "fail"


def test_the_ledger_key_is_reported_and_a_short_one_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    from hitl.cli.doctor import _ledger_key

    monkeypatch.delenv("HITL_LEDGER_KEY", raising=False)
    unset = _ledger_key()
    assert unset.level == "ok" and "can release" in unset.text
    monkeypatch.setenv("HITL_LEDGER_KEY", "short")
    assert _ledger_key().level == "fail"
    monkeypatch.setenv("HITL_LEDGER_KEY", "a-long-enough-ledger-key")
    assert _ledger_key().level == "ok"
