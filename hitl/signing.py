"""Signed decisions: who approved becomes a fact, not a claim.

Temporal authorizes per namespace, so anyone who may send an update may write any `approver`
name. With signed decisions, an approver holds an Ed25519 private key; the worker holds the
approver directory (`HITL_APPROVERS`: each approver's groups and public keys, never taken from a
payload), which a run pins when it starts; and the run accepts a decision only when its
signature, made with a key of the named approver, covers exactly what is decided: the run, the
call, approve or reject, the approver, the message, the edited arguments, `always` and an expiry.

`verify_decision` runs inside workflow code: it is pure (no I/O, no clock, no randomness).
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


class SignatureError(Exception):
    """A decision's signature is missing, unknown, expired or wrong (`type` says which)."""

    def __init__(self, type: str, message: str) -> None:
        super().__init__(message)
        self.type = type
        self.message = message


def arguments_digest(arguments: dict[str, Any] | None) -> str | None:
    """Hex SHA-256 of the canonical JSON of edited arguments (`None`: no edit)."""
    if arguments is None:
        return None
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _iso(when: datetime | None) -> str | None:
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    """The exact bytes a decision's signature covers."""
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
    return (
        DOMAIN + json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    )


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
    """A base64 signature of the decision (see `decision_message`)."""
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
    """`d` signed with `key` (the approver must be set), valid for `lifetime` from `now`."""
    if not d.approver:
        raise UserError("a signed decision names its approver")
    expires = (now or datetime.now(UTC)) + lifetime
    expires = expires.replace(microsecond=0)
    signature = sign_decision(
        key,
        workflow_id=workflow_id,
        call_id=d.call_id,
        kind=kind,
        approver=d.approver,
        arguments=d.arguments,
        expires_at=expires,
        always=d.always,
        message=d.message if kind == "reject" else None,
    )
    return d.model_copy(update={"key_id": key_id, "signature": signature, "expires_at": expires})


def _short(value: str) -> str:
    return value[:100]


def verify_decision(
    directory: ApproverDirectory, d: DecisionInput, *, kind: str, workflow_id: str, now: datetime
) -> str:
    """The verified approver of `d`, or `SignatureError` saying why not (pure)."""
    if not d.signature or not d.key_id:
        raise SignatureError("Unsigned", "the decision carries no signature and key id")
    owner = next((name for name, e in directory.approvers.items() if d.key_id in e.keys), None)
    if owner is None:
        raise SignatureError("UnknownKey", f"no approver has key '{_short(d.key_id)}'")
    if not d.approver or d.approver != owner:
        raise SignatureError(
            "WrongApprover",
            f"key '{_short(d.key_id)}' belongs to {_short(owner)}, not "
            f"{_short(d.approver) if d.approver else 'an unnamed approver'}",
        )
    if d.expires_at is None:
        raise SignatureError("SignatureExpired", "a signed decision needs expires_at")
    expires = d.expires_at if d.expires_at.tzinfo else d.expires_at.replace(tzinfo=UTC)
    if now > expires:
        raise SignatureError("SignatureExpired", f"the signature expired at {_iso(expires)}")
    if expires - now > MAX_SIGNATURE_LIFETIME:
        raise SignatureError(
            "SignatureExpired", "the signature is valid for more than 7 days; sign it again"
        )
    try:
        raw = base64.b64decode(directory.approvers[owner].keys[d.key_id], validate=True)
        public = Ed25519PublicKey.from_public_bytes(raw)
    except (ValueError, binascii.Error):
        raise SignatureError(
            "UnknownKey", f"key '{_short(d.key_id)}' in the approver directory is malformed"
        ) from None
    try:
        signature = base64.b64decode(d.signature, validate=True)
    except (ValueError, binascii.Error):
        raise SignatureError("BadSignature", "the signature is not base64") from None
    data = decision_message(
        workflow_id=workflow_id,
        call_id=d.call_id,
        kind=kind,
        approver=d.approver,
        arguments=d.arguments,
        expires_at=expires,
        always=d.always,
        message=d.message if kind == "reject" else None,
    )
    try:
        public.verify(signature, data)
    except InvalidSignature:
        raise SignatureError(
            "BadSignature", "the signature does not match this decision (altered or forged)"
        ) from None
    return owner


# --------------------------------------------------------------------------- keys


def new_key_pair() -> tuple[Ed25519PrivateKey, str]:
    """A new private key and its public key (raw 32 bytes, base64)."""
    key = Ed25519PrivateKey.generate()
    return key, public_key_b64(key)


def public_key_b64(key: Ed25519PrivateKey) -> str:
    """The public key of `key`, raw 32 bytes, base64."""
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def key_id_for(public_b64: str) -> str:
    """A key's id: the first 16 hex characters of the SHA-256 of its raw public key."""
    return hashlib.sha256(base64.b64decode(public_b64)).hexdigest()[:16]


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    """`key` as an unencrypted PKCS8 PEM (keep the file private)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in the PEM file at `path`."""
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise UserError(f"cannot read the signing key {path}: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise UserError(f"the signing key {path} is not an Ed25519 key")
    return key


def signing_key_from_env() -> tuple[str, Ed25519PrivateKey] | None:
    """The key id and key of `HITL_SIGNING_KEY` (a PEM file), or `None` when it is unset."""
    path = os.environ.get("HITL_SIGNING_KEY")
    if not path:
        return None
    key = load_private_key(path)
    return key_id_for(public_key_b64(key)), key


def load_directory(path: str | Path) -> ApproverDirectory:
    """The approver directory in the JSON file at `path`, checked entry by entry."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        directory = ApproverDirectory.model_validate(
            data if "approvers" in data else {"approvers": data}
        )
    except (OSError, ValueError, TypeError) as exc:
        raise UserError(f"cannot read the approver directory {path}: {exc}") from None
    owners: dict[str, str] = {}
    for name, entry in directory.approvers.items():
        if not name or len(name) > MAX_NAME_CHARS:
            raise UserError(f"{path}: approver names are 1 to {MAX_NAME_CHARS} characters")
        for group in entry.groups:
            if not group or len(group) > MAX_NAME_CHARS:
                raise UserError(f"{path}: {name}'s group names are 1 to 200 characters")
        for key_id, public in entry.keys.items():
            try:
                raw = base64.b64decode(public, validate=True)
            except (ValueError, binascii.Error):
                raw = b""
            if len(raw) != 32:
                raise UserError(f"{path}: {name}'s key {key_id!r} is not a base64 Ed25519 key")
            if key_id in owners:
                raise UserError(f"{path}: key {key_id!r} is listed for {owners[key_id]} and {name}")
            owners[key_id] = name
    return directory


def directory_from_env() -> ApproverDirectory | None:
    """The directory in the file `HITL_APPROVERS` names, or `None` when it is unset."""
    path = os.environ.get("HITL_APPROVERS")
    return load_directory(path) if path else None
