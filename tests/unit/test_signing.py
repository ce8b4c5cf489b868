"""Signed decisions without a server: the signed bytes, every refusal, keys, the directory
file, `hitl keys`, `--set`."""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import stat
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key

from hitl.cli import run as hitl_cli
from hitl.cli.deciding import edited_arguments
from hitl.errors import UserError
from hitl.signing import (
    MAX_SIGNATURE_LIFETIME,
    SignatureError,
    arguments_digest,
    decision_message,
    directory_from_env,
    key_id_for,
    load_directory,
    load_private_key,
    new_key_pair,
    private_key_pem,
    public_key_b64,
    sign_decision,
    sign_input,
    signing_key_from_env,
    verify_decision,
)
from hitl.wire import (
    AnswerInput,
    ApproverDirectory,
    ApproverEntry,
    DecisionInput,
    ExtendInput,
    ResolveInput,
)

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
WID = "refund-desk-7"

ANN_KEY, ANN_PUBLIC = new_key_pair()
BOB_KEY, BOB_PUBLIC = new_key_pair()
ANN_ID, BOB_ID = key_id_for(ANN_PUBLIC), key_id_for(BOB_PUBLIC)
DIRECTORY = ApproverDirectory(
    approvers={
        "ann": ApproverEntry(groups=["finance"], keys={ANN_ID: ANN_PUBLIC}),
        "bob": ApproverEntry(groups=["finance"], keys={BOB_ID: BOB_PUBLIC}),
    }
)


SEEN = "ab" * 32
"""A digest of the arguments the decider saw (the run checks it against the call)."""


def signed(
    *,
    kind: str = "approve",
    workflow_id: str = WID,
    call_id: str = "call_1",
    approver: str = "ann",
    arguments: dict[str, Any] | None = None,
    always: bool = False,
    message: str | None = None,
    reason: str | None = None,
    seen: str | None = SEEN,
    key: Any = ANN_KEY,
    key_id: str = ANN_ID,
    expires_at: datetime = NOW + timedelta(hours=1),
) -> DecisionInput:
    """A decision signed with `sign_decision` (the primitive, not `sign_input`)."""
    d = DecisionInput(
        call_id=call_id,
        approver=approver,
        arguments=arguments,
        always=always,
        message=message,
        reason=reason,
        key_id=key_id,
        expires_at=expires_at,
        seen_sha256=seen,
    )
    signature = sign_decision(key, d, kind=kind, workflow_id=workflow_id)
    return d.model_copy(update={"signature": signature})


def refusal(d: DecisionInput, *, kind: str = "approve", now: datetime = NOW) -> SignatureError:
    with pytest.raises(SignatureError) as err:
        verify_decision(DIRECTORY, d, kind=kind, workflow_id=WID, now=now)
    message = err.value.message
    assert message and "\n" not in message and "Traceback" not in message
    assert str(err.value) == message
    return err.value


# ------------------------------------------------------------------------- signing, verifying


def test_a_signed_decision_verifies_as_its_approver() -> None:
    d = signed(arguments={"amount": 400}, always=True, message="ok")
    assert verify_decision(DIRECTORY, d, kind="approve", workflow_id=WID, now=NOW) == "ann"
    bob = signed(approver="bob", key=BOB_KEY, key_id=BOB_ID, kind="reject", message="no")
    assert verify_decision(DIRECTORY, bob, kind="reject", workflow_id=WID, now=NOW) == "bob"
    # Up to the last second of its validity, and through a JSON round trip of the payload.
    again = DecisionInput.model_validate_json(d.model_dump_json())
    at_expiry = NOW + timedelta(hours=1)
    assert verify_decision(DIRECTORY, again, kind="approve", workflow_id=WID, now=at_expiry)


def test_sign_input_signs_what_the_decision_says() -> None:
    d = sign_input(
        DecisionInput(
            call_id="c9", approver="ann", message="why not", arguments={"x": 1}, seen_sha256=SEEN
        ),
        kind="reject",
        workflow_id=WID,
        key_id=ANN_ID,
        key=ANN_KEY,
        now=NOW + timedelta(microseconds=123),
    )
    assert (d.key_id, d.expires_at) == (ANN_ID, NOW + timedelta(hours=1))
    assert verify_decision(DIRECTORY, d, kind="reject", workflow_id=WID, now=NOW) == "ann"
    with pytest.raises(UserError):  # who decides is signed
        sign_input(
            DecisionInput(call_id="c9", seen_sha256=SEEN),
            kind="approve",
            workflow_id=WID,
            key_id="k",
            key=ANN_KEY,
        )
    with pytest.raises(UserError):  # and what they saw
        sign_input(
            DecisionInput(call_id="c9", approver="ann"),
            kind="approve",
            workflow_id=WID,
            key_id="k",
            key=ANN_KEY,
        )


def test_a_gateway_key_signs_for_the_people_it_names_and_never_for_itself() -> None:
    console_key, console_public = new_key_pair()
    console_id = key_id_for(console_public)
    directory = DIRECTORY.model_copy(deep=True)
    directory.approvers["console"] = ApproverEntry(
        gateway=True, groups=["finance"], keys={console_id: console_public}
    )

    def verify(approver: str) -> str:
        d = signed(approver=approver, key=console_key, key_id=console_id)
        return verify_decision(directory, d, kind="approve", workflow_id=WID, now=NOW)

    assert verify("carol") == "carol"  # a person the console authenticated
    assert verify("ann") == "ann"
    with pytest.raises(SignatureError) as err:
        verify("console")  # the gateway decides nothing as itself
    assert err.value.type == "WrongApprover" and "gateway" in err.value.message
    # An ordinary approver's key still speaks only for its owner.
    assert refusal(signed(approver="carol")).type == "WrongApprover"


def test_unsigned_decisions_are_refused() -> None:
    good = signed()
    assert refusal(DecisionInput(call_id="call_1", approver="ann")).type == "Unsigned"
    assert refusal(good.model_copy(update={"signature": None})).type == "Unsigned"
    assert refusal(good.model_copy(update={"key_id": None})).type == "Unsigned"
    assert refusal(good.model_copy(update={"signature": ""})).type == "Unsigned"


def test_an_unknown_key_is_refused_and_a_long_one_is_not_echoed() -> None:
    err = refusal(signed().model_copy(update={"key_id": "0" * 16}))
    assert err.type == "UnknownKey" and "0" * 16 in err.message
    err = refusal(signed().model_copy(update={"key_id": "k" * 5000 + "\nforged line"}))
    assert err.type == "UnknownKey"
    assert "k" * 101 not in err.message and "\n" not in err.message and len(err.message) < 300


def test_a_malformed_key_in_the_directory_is_an_unknown_key() -> None:
    broken = ApproverDirectory(approvers={"ann": ApproverEntry(keys={ANN_ID: "AAAA"})})
    with pytest.raises(SignatureError) as err:
        verify_decision(broken, signed(), kind="approve", workflow_id=WID, now=NOW)
    assert err.value.type == "UnknownKey" and "directory" in err.value.message


def test_a_key_used_under_another_name_is_the_wrong_approver() -> None:
    # Ann's key, but the decision says bob (and is signed so: only the name is wrong).
    err = refusal(signed(approver="bob"))
    assert err.type == "WrongApprover" and "'ann'" in err.message and "'bob'" in err.message
    unnamed = signed().model_copy(update={"approver": None})
    assert refusal(unnamed).type == "WrongApprover"
    assert refusal(signed().model_copy(update={"approver": ""})).type == "WrongApprover"
    long_claim = refusal(signed(approver="b" * 1000))
    assert long_claim.type == "WrongApprover" and "b" * 101 not in long_claim.message


def test_expired_and_too_long_lived_signatures_are_refused() -> None:
    d = signed(expires_at=NOW + timedelta(hours=1))
    late = refusal(d, now=NOW + timedelta(hours=1, seconds=1))
    assert late.type == "SignatureExpired" and "2026-11-24T13:00:00Z" in late.message
    assert refusal(d.model_copy(update={"expires_at": None})).type == "SignatureExpired"
    too_long = signed(expires_at=NOW + MAX_SIGNATURE_LIFETIME + timedelta(seconds=1))
    assert refusal(too_long).type == "SignatureExpired"
    longest = signed(expires_at=NOW + MAX_SIGNATURE_LIFETIME)
    assert verify_decision(DIRECTORY, longest, kind="approve", workflow_id=WID, now=NOW) == "ann"


def test_a_signature_that_is_not_one_is_a_bad_signature() -> None:
    good = signed()
    for bad in ("%%%not base64%%%", "AAAA", "A" * 10_000, "é" * 10):
        err = refusal(good.model_copy(update={"signature": bad}))
        assert err.type == "BadSignature", bad
        assert "A" * 101 not in err.message


def test_a_signature_by_another_key_is_a_bad_signature() -> None:
    # Bob's key under Ann's key id: a forgery.
    assert refusal(signed(key=BOB_KEY)).type == "BadSignature"


@pytest.mark.parametrize(
    "change",
    [
        {"call_id": "call_2"},
        {"approver": "bob"},  # with bob's key id: the name matches the key, the signature not
        {"arguments": {"amount": 9000}},
        {"arguments": None},
        {"always": False},
        {"message": "something else"},
        {"message": None},
        {"expires_at": NOW + timedelta(hours=2)},
        {"seen_sha256": "cd" * 32},  # the same approval, for other arguments
        {"reason": "added later"},  # the audit's words are the approver's too
    ],
)
def test_any_covered_field_altered_after_signing_is_a_bad_signature(
    change: dict[str, Any],
) -> None:
    good = signed(arguments={"amount": 400}, always=True, message="checked the invoice")
    assert verify_decision(DIRECTORY, good, kind="approve", workflow_id=WID, now=NOW) == "ann"
    if "approver" in change:
        change = {**change, "key_id": BOB_ID}
    assert refusal(good.model_copy(update=change)).type == "BadSignature"


def test_a_signature_covers_the_run_and_the_kind() -> None:
    approval = signed()
    assert refusal(approval, kind="reject").type == "BadSignature"
    with pytest.raises(SignatureError) as err:
        verify_decision(DIRECTORY, approval, kind="approve", workflow_id="another-run", now=NOW)
    assert err.value.type == "BadSignature"


def test_the_client_is_not_signed_and_an_unbound_signature_is_refused() -> None:
    """`client` is what the sender says it is (for the audit); a signature that names no
    arguments (a version-1 signature, or one made without them) binds nothing: refused."""
    d = signed().model_copy(update={"client": "hitl"})
    assert verify_decision(DIRECTORY, d, kind="approve", workflow_id=WID, now=NOW) == "ann"
    assert refusal(signed(seen=None)).type == "Unbound"
    for payload in (
        ExtendInput(call_id="c", seconds=60, approver="ann", seen_sha256=SEEN),
        ResolveInput(call_id="c", outcome="retry", approver="ann", seen_sha256=SEEN),
        AnswerInput(call_id="c", action="decline", approver="ann", seen_sha256=SEEN),
    ):
        stamped = payload.model_copy(
            update={"key_id": ANN_ID, "expires_at": NOW + timedelta(hours=1)}
        )
        unbound = stamped.model_copy(
            update={"signature": sign_decision(ANN_KEY, stamped, workflow_id=WID)}
        )
        with pytest.raises(SignatureError) as err:
            verify_decision(DIRECTORY, unbound, workflow_id=WID, now=NOW)
        assert err.value.type == "Unbound", payload  # no round: it could be replayed later


def test_answers_resolutions_and_extensions_sign_their_round_and_content() -> None:
    """Every kind a person decides is signed the same way, over what it says and the round
    of the call it is about: a copy made for one round does not verify for the next."""
    payloads = [
        ExtendInput(call_id="c", seconds=3600, approver="ann", round=2, seen_sha256=SEEN),
        ResolveInput(
            call_id="c", outcome="happened", output="R-7", approver="ann", round=1, seen_sha256=SEEN
        ),
        AnswerInput(
            call_id="c", content={"confirm": True}, approver="ann", round=3, seen_sha256=SEEN
        ),
    ]
    changes: list[dict[str, Any]] = [
        {"seconds": 7200},
        {"output": "R-8"},
        {"content": {"confirm": False}},
    ]
    for payload, change in zip(payloads, changes, strict=True):
        d = sign_input(payload, workflow_id=WID, key_id=ANN_ID, key=ANN_KEY, now=NOW)
        assert verify_decision(DIRECTORY, d, workflow_id=WID, now=NOW) == "ann"
        for altered in (change, {"round": (payload.round or 0) + 1}, {"call_id": "c2"}):
            with pytest.raises(SignatureError) as err:
                verify_decision(DIRECTORY, d.model_copy(update=altered), workflow_id=WID, now=NOW)
            assert err.value.type == "BadSignature", (payload, altered)
        # An approval's signature never passes as one of these (the kind is signed).
        approval = signed(call_id="c")
        for kind in (None, "extend", "answer"):
            with pytest.raises(SignatureError) as err:
                verify_decision(DIRECTORY, approval, kind=kind, workflow_id=WID, now=NOW)
            assert err.value.type == "BadSignature"


def test_verifying_is_pure() -> None:
    """Same inputs, same answer: the clock is the caller's `now`, nothing else is read."""
    d = signed()
    results = {verify_decision(DIRECTORY, d, kind="approve", workflow_id=WID, now=NOW)}
    results |= {verify_decision(DIRECTORY, d, kind="approve", workflow_id=WID, now=NOW)}
    assert results == {"ann"}
    # A naive `now` counts as UTC instead of failing on the comparison.
    naive_now = NOW.replace(tzinfo=None)
    assert verify_decision(DIRECTORY, d, kind="approve", workflow_id=WID, now=naive_now) == "ann"


# ------------------------------------------------------------------------- the signed bytes


def test_the_signed_message_is_canonical() -> None:
    def approval(arguments: dict[str, Any], expires: datetime) -> DecisionInput:
        return DecisionInput(
            call_id="c", approver="ann", arguments=arguments, expires_at=expires, seen_sha256=SEEN
        )

    a = decision_message(
        approval({"b": 1, "a": [1, {"y": 2, "x": "é"}]}, NOW), kind="approve", workflow_id="w"
    )
    b = decision_message(
        approval({"a": [1, {"x": "é", "y": 2}], "b": 1}, NOW + timedelta(microseconds=5)),
        kind="approve",
        workflow_id="w",
    )
    assert a == b
    assert a.startswith(b"hitl-decision\n")
    body = json.loads(a.removeprefix(b"hitl-decision\n"))
    assert body == {
        "v": 2,
        "workflow_id": "w",
        "call_id": "c",
        "kind": "approve",
        "approver": "ann",
        "reason": None,
        "seen_sha256": SEEN,
        "always": False,
        "message": None,
        "arguments_sha256": arguments_digest({"a": [1, {"x": "é", "y": 2}], "b": 1}),
        "expires_at": "2026-11-24T12:00:00Z",
    }
    text = a.removeprefix(b"hitl-decision\n").decode("ascii")
    assert text == json.dumps(body, sort_keys=True, separators=(",", ":"))
    # Another timezone, same instant: same bytes.
    other_tz = NOW.astimezone(timezone(timedelta(hours=5, minutes=30)))
    again = approval({"b": 1, "a": [1, {"y": 2, "x": "é"}]}, other_tz)
    assert decision_message(again, kind="approve", workflow_id="w") == a
    extend = ExtendInput(call_id="c", seconds=1.0005, approver="ann", round=4, seen_sha256=SEEN)
    body = json.loads(decision_message(extend, workflow_id="w").removeprefix(b"hitl-decision\n"))
    assert (body["kind"], body["milliseconds"], body["round"]) == ("extend", 1000, 4)


def test_the_arguments_digest() -> None:
    assert arguments_digest(None) is None
    digest = arguments_digest({"b": 1, "a": "é"})
    assert digest == arguments_digest({"a": "é", "b": 1})
    assert digest == hashlib.sha256(b'{"a":"\\u00e9","b":1}').hexdigest()
    assert arguments_digest({"a": 1}) != arguments_digest({"a": 2})


# ------------------------------------------------------------------------- keys


def test_keys_round_trip_through_pem(tmp_path: Path) -> None:
    key, public = new_key_pair()
    assert len(base64.b64decode(public)) == 32 and public == public_key_b64(key)
    kid = key_id_for(public)
    assert len(kid) == 16 and int(kid, 16) >= 0
    path = tmp_path / "k.pem"
    path.write_bytes(private_key_pem(key))
    assert private_key_pem(key).startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public_key_b64(load_private_key(path)) == public


def test_unusable_private_key_files_are_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        load_private_key(tmp_path / "missing.key")
    assert "does not exist" in err.value.message
    (tmp_path / "junk.key").write_text("not a key")
    with pytest.raises(UserError) as err:
        load_private_key(tmp_path / "junk.key")
    assert "not a PEM private key" in err.value.message
    ec = generate_private_key(SECP256R1())
    (tmp_path / "ec.key").write_bytes(
        ec.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(UserError) as err:
        load_private_key(tmp_path / "ec.key")
    assert "not Ed25519" in err.value.message


def test_the_environment_names_the_key_and_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HITL_SIGNING_KEY", raising=False)
    monkeypatch.delenv("HITL_APPROVERS", raising=False)
    assert signing_key_from_env() is None and directory_from_env() is None
    (tmp_path / "ann.key").write_bytes(private_key_pem(ANN_KEY))
    (tmp_path / "approvers.json").write_text(
        json.dumps({"approvers": {"ann": {"groups": ["finance"], "keys": {ANN_ID: ANN_PUBLIC}}}})
    )
    monkeypatch.setenv("HITL_SIGNING_KEY", str(tmp_path / "ann.key"))
    monkeypatch.setenv("HITL_APPROVERS", str(tmp_path / "approvers.json"))
    found = signing_key_from_env()
    assert found is not None and found[0] == ANN_ID
    assert directory_from_env() == ApproverDirectory(
        approvers={"ann": ApproverEntry(groups=["finance"], keys={ANN_ID: ANN_PUBLIC})}
    )


# ------------------------------------------------------------------------- the directory file


def test_a_directory_file_loads_in_either_shape(tmp_path: Path) -> None:
    entry = {"ann": {"groups": ["finance"], "keys": {ANN_ID: ANN_PUBLIC}}}
    (tmp_path / "bare.json").write_text(json.dumps(entry))
    (tmp_path / "wrapped.json").write_text(json.dumps({"approvers": entry}))
    bare, wrapped = (
        load_directory(tmp_path / "bare.json"),
        load_directory(tmp_path / "wrapped.json"),
    )
    assert bare == wrapped
    assert bare.approvers["ann"].keys == {ANN_ID: ANN_PUBLIC}
    # An approver who happens to be called "approvers" is still one approver.
    (tmp_path / "odd.json").write_text(json.dumps({"approvers": {"keys": {ANN_ID: ANN_PUBLIC}}}))
    assert list(load_directory(tmp_path / "odd.json").approvers) == ["approvers"]


KEY = "A" * 43 + "="  # base64 of 32 zero bytes


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ({"ann": {"keys": {"k1": "not base64!"}}}, "approver 'ann': key 'k1' is not a base64"),
        ({"ann": {"keys": {"k1": "AAAA"}}}, "approver 'ann': key 'k1' is not a base64"),
        ({"ann": {"keys": {"k1": "A" * 86 + "=="}}}, "key 'k1' is not a base64"),
        ({"ann": {"keys": {"k1": 7}}}, "key 'k1' is not a base64"),
        (
            {"ann": {"keys": {"k1": KEY}}, "bob": {"keys": {"k1": ANN_PUBLIC}}},
            "key id 'k1' is listed for 'ann' and 'bob'",
        ),
        (
            {"ann": {"keys": {"k1": ANN_PUBLIC}}, "bob": {"keys": {"k2": ANN_PUBLIC}}},
            "the same public key is already listed for 'ann'",
        ),
        ({"": {}}, "approver name"),
        ({"x" * 201: {}}, "approver name"),
        ({"ann": {"groups": [""]}}, "approver 'ann': a group name"),
        ({"ann": {"groups": ["g" * 201]}}, "approver 'ann': a group name"),
        ({"ann": {"groups": "finance"}}, "groups is not a list"),
        ({"ann": {"key": {"k1": KEY}}}, "unknown field 'key'"),
        ({"ann": {"keys": {"": KEY}}}, "a key id"),
        ({"ann": []}, "approver 'ann' is not an object"),
        ([1, 2], "is not an object of approvers"),
    ],
)
def test_a_bad_directory_is_refused_with_its_entry(
    tmp_path: Path, content: object, problem: str
) -> None:
    path = tmp_path / "approvers.json"
    path.write_text(json.dumps(content))
    with pytest.raises(UserError) as err:
        load_directory(path)
    assert problem in err.value.message
    assert str(path) in err.value.message
    assert "x" * 101 not in err.value.message and "\n" not in err.value.message


def test_a_directory_naming_something_twice_or_unreadable_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "approvers.json"
    path.write_text(f'{{"ann": {{"keys": {{"k1": "{ANN_PUBLIC}", "k1": "{BOB_PUBLIC}"}}}}}}')
    with pytest.raises(UserError) as err:
        load_directory(path)
    assert "'k1' is listed twice" in err.value.message
    path.write_text("{not json")
    with pytest.raises(UserError) as err:
        load_directory(path)
    assert "is not JSON" in err.value.message
    with pytest.raises(UserError) as err:
        load_directory(tmp_path / "missing.json")
    assert "does not exist" in err.value.message


# ------------------------------------------------------------------------- hitl keys


def _keys_new(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = hitl_cli(["keys", "new", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_hitl_keys_new_writes_a_private_key_whose_entry_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ann.key"
    code, printed, note = _keys_new(
        capsys, "--approver", "ann", "--groups", "finance, audit", "--out", str(out)
    )
    assert code == 0, note
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    entry = json.loads(printed)  # stdout is the entry alone: `> entry.json` works
    assert list(entry) == ["ann"] and entry["ann"]["groups"] == ["finance", "audit"]
    assert str(out) in note and "HITL_SIGNING_KEY" in note and "HITL_APPROVERS" in note
    (tmp_path / "approvers.json").write_text(printed)
    directory = load_directory(tmp_path / "approvers.json")
    [key_id] = directory.approvers["ann"].keys
    key = load_private_key(out)
    assert key_id == key_id_for(public_key_b64(key))
    d = sign_input(
        DecisionInput(call_id="c1", approver="ann", seen_sha256=SEEN),
        kind="approve",
        workflow_id="w",
        key_id=key_id,
        key=key,
        now=NOW,
    )
    assert verify_decision(directory, d, kind="approve", workflow_id="w", now=NOW) == "ann"
    with pytest.raises(SignatureError) as err:
        verify_decision(directory, d, kind="reject", workflow_id="w", now=NOW)
    assert err.value.type == "BadSignature"

    # `hitl keys show` prints the same key id and public key.
    assert hitl_cli(["keys", "show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert key_id in shown and directory.approvers["ann"].keys[key_id] in shown


def test_hitl_keys_new_never_overwrites(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ann.key"
    out.write_text("precious")
    code, printed, err = _keys_new(capsys, "--approver", "ann", "--out", str(out))
    assert code == 1 and "exists" in err and printed == ""
    assert out.read_text() == "precious"
    dangling = tmp_path / "link.key"
    dangling.symlink_to(tmp_path / "elsewhere")
    code, _, err = _keys_new(capsys, "--approver", "ann", "--out", str(dangling))
    assert code == 1 and not (tmp_path / "elsewhere").exists()
    code, _, err = _keys_new(capsys, "--approver", "ann", "--out", str(tmp_path / "no" / "x.key"))
    assert code == 1 and "cannot create" in err and "Traceback" not in err


def test_hitl_keys_new_defaults_to_the_approvers_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, printed, _ = _keys_new(capsys, "--approver", "bob")
    assert code == 0 and stat.S_IMODE((tmp_path / "bob.key").stat().st_mode) == 0o600
    assert json.loads(printed)["bob"]["groups"] == []
    code, _, err = _keys_new(capsys, "--approver", "../escape")
    assert code == 1 and "--out" in err and not (tmp_path.parent / "escape.key").exists()
    assert os.listdir(tmp_path) == ["bob.key"]


def test_hitl_keys_show_refuses_a_file_that_is_no_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "junk.key").write_text("junk")
    assert hitl_cli(["keys", "show", str(tmp_path / "junk.key")]) == 1
    err = capsys.readouterr().err
    assert "not a PEM private key" in err and "Traceback" not in err


# ------------------------------------------------------------------------- hitl approve --set


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
