"""Signed decisions: who approved becomes a fact, not a claim.

Temporal authorizes per namespace, so anyone who may send an update may write any `approver`
name. With signed decisions, an approver holds an Ed25519 private key; the worker holds the
approver directory (`HITL_APPROVERS`: each approver's groups and public keys, never taken from a
payload), which a run pins when it starts; and the run accepts a decision only when its
signature, made with a key of the named approver, covers exactly what is decided: the run, the
call, approve or reject, the approver, the message, the edited arguments, `always` and an expiry.

`verify_decision` runs inside workflow code: it is pure (no I/O, no clock, no randomness, no
logging). Everything else here (keys, files, the environment) is for clients and workers.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from hitl.errors import UserError
from hitl.wire import ApproverDirectory, DecisionInput

DOMAIN = b"hitl-decision\n"
"""Prefix of every signed message: a signature over anything else never verifies here."""
MAX_SIGNATURE_LIFETIME = timedelta(days=7)
"""A signature may be valid for at most this long (a stolen one expires)."""
MAX_NAME_CHARS = 200
"""Longest approver name, group name or key id the approver directory accepts."""
SHOWN_CHARS = 100
"""At most this much of any input appears in an error message."""

_PUBLIC_KEY_BYTES = 32
_SIGNATURE_BYTES = 64
_SIGNATURE_B64_CHARS = 88  # base64 of 64 bytes, padded


class SignatureError(Exception):
    """A decision's signature is missing, unknown, expired or wrong.

    Attributes:
        type: Why: `Unsigned`, `UnknownKey`, `WrongApprover`, `SignatureExpired` or
            `BadSignature` (the run refuses the decision with this type).
        message: One line for an operator, never more than 100 characters of any input.
    """

    def __init__(self, type: str, message: str) -> None:
        super().__init__(message)
        self.type = type
        self.message = message


def _printable(text: str) -> str:
    """`text` on one line: control and formatting characters shown as `?`."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _shown(value: object) -> str:
    """`value` as it may appear in a message: at most 100 characters, on one line."""
    text = str(value)
    return _printable(text[:SHOWN_CHARS]) + ("..." if len(text) > SHOWN_CHARS else "")


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def arguments_digest(arguments: dict[str, Any] | None) -> str | None:
    """Hex SHA-256 of the canonical JSON of edited arguments; `None` when there is no edit.

    Canonical JSON: keys sorted, no whitespace (`","` and `":"`), non-ASCII escaped
    (`json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=True)`), so
    the digest does not depend on the order the arguments' keys arrive in.
    """
    if arguments is None:
        return None
    return hashlib.sha256(_canonical_json(arguments).encode("ascii")).hexdigest()


def _utc(when: datetime) -> datetime:
    """`when` in UTC (a naive datetime is taken to be UTC already)."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _iso(when: datetime | None) -> str | None:
    """ISO 8601 in UTC with `Z`, to the second (`2026-11-24T12:00:00Z`)."""
    return None if when is None else _utc(when).strftime("%Y-%m-%dT%H:%M:%SZ")


def decision_message(
    *,
    workflow_id: str,
    call_id: str,
    kind: str,
    approver: str,
    arguments: dict[str, Any] | None,
    expires_at: datetime | None,
    always: bool = False,
    message: str | None = None,
) -> bytes:
    """The exact bytes a decision's signature covers.

    `DOMAIN` followed by the canonical JSON (keys sorted, compact, ASCII) of
    `{"v": 1, "workflow_id", "call_id", "kind", "approver", "always", "message",
    "arguments_sha256": arguments_digest(arguments), "expires_at"}`, where `expires_at` is
    ISO 8601 UTC with `Z`, to the second (a naive datetime counts as UTC; sub-second parts are
    dropped), or `null`. A signer in another language builds the same bytes from this recipe.

    Args:
        workflow_id: The run's workflow id (a signature for one run is useless on another).
        call_id: The pending call decided.
        kind: `approve` or `reject`.
        approver: Who decides; the signing key must be theirs in the approver directory.
        arguments: Edited arguments approved instead of the model's (`None`: no edit).
        expires_at: When the signature stops being accepted (by the run's clock).
        always: Whether the decision also covers later calls of the tool.
        message: The decision's message (for a rejection: what the model reads).
    """
    body = {
        "v": 1,
        "workflow_id": workflow_id,
        "call_id": call_id,
        "kind": kind,
        "approver": approver,
        "always": always,
        "message": message,
        "arguments_sha256": arguments_digest(arguments),
        "expires_at": _iso(expires_at),
    }
    return DOMAIN + _canonical_json(body).encode("ascii")


def sign_decision(
    private_key: Ed25519PrivateKey,
    *,
    workflow_id: str,
    call_id: str,
    kind: str,
    approver: str,
    arguments: dict[str, Any] | None = None,
    expires_at: datetime | None,
    always: bool = False,
    message: str | None = None,
) -> str:
    """The base64 Ed25519 signature of a decision, made with `private_key`.

    The fields are those of `decision_message`; put the same values, and the signature, its
    key id and `expires_at`, in the `DecisionInput` sent to the run (or use `sign_input`).
    """
    data = decision_message(
        workflow_id=workflow_id,
        call_id=call_id,
        kind=kind,
        approver=approver,
        arguments=arguments,
        expires_at=expires_at,
        always=always,
        message=message,
    )
    return base64.b64encode(private_key.sign(data)).decode("ascii")


D = TypeVar("D", bound=DecisionInput)


def sign_input(
    d: D,
    *,
    kind: str,
    workflow_id: str,
    key_id: str,
    key: Ed25519PrivateKey,
    lifetime: timedelta = timedelta(hours=1),
    now: datetime | None = None,
) -> D:
    """A copy of `d` signed with `key`, valid for `lifetime` from `now` (default: the clock).

    `d.approver` must be set (it is signed). The copy carries `key_id`, the signature and
    `expires_at` (to the second); everything `decision_message` covers is taken from `d`.
    Raises `UserError` when `d` names no approver.
    """
    if not d.approver:
        raise UserError("a signed decision names its approver (--as NAME)")
    expires = _utc((now or datetime.now(UTC)) + lifetime).replace(microsecond=0)
    signature = sign_decision(
        key,
        workflow_id=workflow_id,
        call_id=d.call_id,
        kind=kind,
        approver=d.approver,
        arguments=d.arguments,
        expires_at=expires,
        always=d.always,
        message=d.message,
    )
    return d.model_copy(update={"key_id": key_id, "signature": signature, "expires_at": expires})


def verify_decision(
    directory: ApproverDirectory, d: DecisionInput, *, kind: str, workflow_id: str, now: datetime
) -> str:
    """The approver whose key signed decision `d`, or `SignatureError` saying why not.

    Pure, so workflow code may call it: no I/O, no clock (the caller passes `now`, the run's
    time), no randomness, no logging. Checked in this order, each failure with its type:

    - `Unsigned`: `d` has no signature or no key id.
    - `UnknownKey`: no approver in `directory` has key `d.key_id` (or its public key there is
      malformed).
    - `WrongApprover`: the key belongs to another approver than `d.approver` (or `d` names no
      approver). A gateway's key (`ApproverEntry.gateway`, the approval console) signs for the
      person it names, never for itself or another gateway.
    - `SignatureExpired`: `d.expires_at` is missing or before `now`, or more than
      `MAX_SIGNATURE_LIFETIME` (7 days) after it.
    - `BadSignature`: the signature is not base64 of 64 bytes, or it does not verify over
      `decision_message(...)` of `d` with this `kind` and `workflow_id` (forged, made with
      another key, or any covered field changed after signing).
    """
    if not d.signature or not d.key_id:
        raise SignatureError("Unsigned", "the decision carries no signature and key id")
    owner = next((name for name, e in directory.approvers.items() if d.key_id in e.keys), None)
    if owner is None:
        raise SignatureError(
            "UnknownKey", f"no approver in the worker's directory has key '{_shown(d.key_id)}'"
        )
    gateway = directory.approvers[owner].gateway
    claimed = f"'{_shown(d.approver)}'" if d.approver else "an unnamed approver"
    if gateway:
        # An approval gateway vouches for the person it names (it authenticated them); it
        # never decides as itself or as another gateway.
        if not d.approver or d.approver in _gateways(directory):
            raise SignatureError(
                "WrongApprover",
                f"key '{_shown(d.key_id)}' belongs to the approval gateway '{_shown(owner)}': "
                f"it signs for the people it authenticated, not for {claimed}",
            )
    elif not d.approver or d.approver != owner:
        raise SignatureError(
            "WrongApprover",
            f"key '{_shown(d.key_id)}' belongs to '{_shown(owner)}', not {claimed}",
        )
    if d.expires_at is None:
        raise SignatureError("SignatureExpired", "a signed decision needs expires_at")
    expires, now = _utc(d.expires_at), _utc(now)
    if now > expires:
        raise SignatureError("SignatureExpired", f"the signature expired at {_iso(expires)}")
    if expires - now > MAX_SIGNATURE_LIFETIME:
        raise SignatureError(
            "SignatureExpired",
            f"the signature is valid until {_iso(expires)}, more than 7 days ahead; sign it again",
        )
    try:
        raw = base64.b64decode(directory.approvers[owner].keys[d.key_id], validate=True)
        public = Ed25519PublicKey.from_public_bytes(raw)
    except (ValueError, binascii.Error):
        raise SignatureError(
            "UnknownKey",
            f"key '{_shown(d.key_id)}' in the worker's approver directory is not a base64 "
            "Ed25519 public key",
        ) from None
    signature = b""
    if len(d.signature) <= _SIGNATURE_B64_CHARS:
        try:
            signature = base64.b64decode(d.signature, validate=True)
        except (ValueError, binascii.Error):
            raise SignatureError("BadSignature", "the signature is not base64") from None
    if len(signature) != _SIGNATURE_BYTES:
        raise SignatureError(
            "BadSignature", "the signature is not an Ed25519 signature (64 bytes, base64)"
        )
    try:
        data = decision_message(
            workflow_id=workflow_id,
            call_id=d.call_id,
            kind=kind,
            approver=d.approver,
            arguments=d.arguments,
            expires_at=expires,
            always=d.always,
            message=d.message,
        )
    except (TypeError, ValueError, RecursionError):
        raise SignatureError(
            "BadSignature", "the decision's arguments cannot be written as canonical JSON"
        ) from None
    try:
        public.verify(signature, data)
    except InvalidSignature:
        raise SignatureError(
            "BadSignature",
            "the signature does not match this decision (made with another key, for another "
            "run or call, or altered since)",
        ) from None
    return d.approver if gateway else owner


def _gateways(directory: ApproverDirectory) -> set[str]:
    return {name for name, e in directory.approvers.items() if e.gateway}


# --------------------------------------------------------------------------- keys


def new_key_pair() -> tuple[Ed25519PrivateKey, str]:
    """A new Ed25519 private key and its public key (raw 32 bytes, base64)."""
    key = Ed25519PrivateKey.generate()
    return key, public_key_b64(key)


def public_key_b64(key: Ed25519PrivateKey) -> str:
    """The public key of `key`: raw 32 bytes, base64 (as the approver directory holds it)."""
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def key_id_for(public_b64: str) -> str:
    """A key's id: the first 16 hex characters of the SHA-256 of its raw public key.

    Raises `ValueError` when `public_b64` is not base64.
    """
    return hashlib.sha256(base64.b64decode(public_b64, validate=True)).hexdigest()[:16]


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    """`key` as an unencrypted PKCS8 PEM (whoever reads the file can sign: keep it 0600)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in the unencrypted PEM file at `path`.

    Raises `UserError`, naming the file, when it is missing, unreadable, not a PEM private key,
    encrypted, or a key of another type.
    """
    shown = _printable(str(path))  # the operator's own path: shown whole
    try:
        pem = Path(path).read_bytes()
    except FileNotFoundError:
        raise UserError(f"the signing key file {shown} does not exist") from None
    except OSError as exc:
        raise UserError(f"cannot read the signing key file {shown}: {exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError:
        raise UserError(
            f"the signing key file {shown} is encrypted; hitl reads unencrypted keys "
            "(keep the file 0600)"
        ) from None
    except ValueError:
        raise UserError(
            f"the signing key file {shown} is not a PEM private key (make one with `hitl keys new`)"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise UserError(f"the signing key file {shown} holds a key that is not Ed25519")
    return key


def signing_key_from_env() -> tuple[str, Ed25519PrivateKey] | None:
    """The key id and key in the PEM file `HITL_SIGNING_KEY` names; `None` when it is unset.

    The key id is `key_id_for` the key's public half. Raises `UserError` when the file cannot
    be used (see `load_private_key`).
    """
    path = os.environ.get("HITL_SIGNING_KEY")
    if not path:
        return None
    key = load_private_key(path)
    return key_id_for(public_key_b64(key)), key


# --------------------------------------------------------------------------- the directory


class _DuplicateName(ValueError):
    """A JSON object of the directory names something twice (JSON would keep the last)."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateName(f"'{_shown(key)}' is listed twice in one object")
        seen[key] = value
    return seen


def _approvers_of(data: Any) -> Any:
    """The approver mapping of a directory file: `{"approvers": {...}}` or the mapping itself."""
    if isinstance(data, dict) and set(data) == {"approvers"}:
        inner = data["approvers"]
        # `{"approvers": {"groups": [...], "keys": {...}}}` is one approver called "approvers".
        if not (isinstance(inner, dict) and inner and set(inner) <= {"groups", "keys"}):
            return inner
    return data


def _name_problem(what: str, value: object) -> str | None:
    if not isinstance(value, str):
        return f"{what} is not a string"
    if not value.strip() or len(value) > MAX_NAME_CHARS:
        return f"{what} '{_shown(value)}' is not 1 to {MAX_NAME_CHARS} characters"
    return None


def load_directory(path: str | Path) -> ApproverDirectory:
    """The approver directory in the JSON file at `path`, checked entry by entry.

    The file holds `{"approvers": {NAME: ENTRY, ...}}` (an `ApproverDirectory`) or just
    `{NAME: ENTRY, ...}`, the shape `hitl keys new` prints; an ENTRY is
    `{"groups": [GROUP, ...], "keys": {KEY_ID: PUBLIC_KEY, ...}}` with each public key the raw
    32 bytes of an Ed25519 public key, base64. Raises `UserError`, naming the file and the bad
    entry, when the file cannot be read or parsed, a name (approver, group, key id) is empty or
    longer than 200 characters, an entry has unknown fields, a public key is not base64 of 32
    bytes, or a key id or public key is listed twice (one key would speak for two approvers).
    """
    shown = _printable(str(path))  # the operator's own path: shown whole
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"the approver directory {shown} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the approver directory {shown}: {_shown(exc)}") from None
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except RecursionError:
        raise UserError(f"the approver directory {shown} is nested too deeply") from None
    except _DuplicateName as exc:
        raise UserError(f"the approver directory {shown}: {exc}") from None
    except ValueError as exc:
        raise UserError(f"the approver directory {shown} is not JSON: {_shown(exc)}") from None
    approvers = _approvers_of(data)
    if not isinstance(approvers, dict):
        raise UserError(
            f"the approver directory {shown} is not an object of approvers "
            '({"NAME": {"groups": [...], "keys": {"KEY_ID": "PUBLIC_KEY"}}})'
        )

    def bad(problem: str) -> UserError:
        return UserError(f"the approver directory {shown}: {problem}")

    key_owner: dict[str, str] = {}
    public_owner: dict[bytes, str] = {}
    for name, entry in approvers.items():
        if problem := _name_problem("an approver name", name):
            raise bad(problem)
        who = f"approver '{_shown(name)}'"
        if not isinstance(entry, dict):
            raise bad(f"{who} is not an object with groups and keys")
        unknown = sorted(set(entry) - {"groups", "keys", "gateway"})
        if unknown:
            raise bad(f"{who} has an unknown field '{_shown(unknown[0])}' (groups, keys, gateway)")
        if not isinstance(entry.get("gateway", False), bool):
            raise bad(f"{who}: gateway is true or false")
        groups = entry.get("groups", [])
        if not isinstance(groups, list):
            raise bad(f"{who}: groups is not a list of names")
        for group in groups:
            if problem := _name_problem("a group name", group):
                raise bad(f"{who}: {problem}")
        keys = entry.get("keys", {})
        if not isinstance(keys, dict):
            raise bad(f"{who}: keys is not an object of key id -> public key")
        for key_id, public in keys.items():
            if problem := _name_problem("a key id", key_id):
                raise bad(f"{who}: {problem}")
            what = f"{who}: key '{_shown(key_id)}'"
            raw = b""
            if isinstance(public, str):
                try:
                    raw = base64.b64decode(public, validate=True)
                except (ValueError, binascii.Error):
                    raw = b""
            if len(raw) != _PUBLIC_KEY_BYTES:
                raise bad(f"{what} is not a base64 Ed25519 public key (32 bytes)")
            if key_id in key_owner:
                raise bad(
                    f"key id '{_shown(key_id)}' is listed for '{_shown(key_owner[key_id])}' "
                    f"and '{_shown(name)}'"
                )
            if raw in public_owner:
                raise bad(
                    f"{what}: the same public key is already listed for "
                    f"'{_shown(public_owner[raw])}'"
                )
            key_owner[key_id] = name
            public_owner[raw] = name
    return ApproverDirectory.model_validate({"approvers": approvers})


def directory_from_env() -> ApproverDirectory | None:
    """The directory in the file `HITL_APPROVERS` names (`load_directory`); `None` if unset."""
    path = os.environ.get("HITL_APPROVERS")
    return load_directory(path) if path else None
