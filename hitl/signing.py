"""Signed decisions: who decided becomes a fact, not a claim, and it binds what they saw.

Temporal authorizes per namespace, so anyone who may send an update may write any `approver`
name. With signed decisions, an approver holds an Ed25519 private key; the worker holds the
approver directory (`HITL_APPROVERS`: each approver's groups and public keys, never taken from a
payload), which a run pins when it starts; and the run accepts a decision only when its
signature, made with a key of the named approver, covers exactly what is decided: the run, the
call, the kind (`approve`, `reject`, `answer`, `resolve`, `extend`), the approver, a digest of
the call's arguments as the person saw them (`seen_sha256`), what the decision says (message,
edited arguments, `always`, an answer's content, an extension's length...), the call's round
(for answers, resolutions and extensions, which a call takes one after another) and an expiry.
A signed approval therefore counts only for the arguments it signed: once anyone edits the
call, it no longer applies, and a signature copied from history cannot be replayed on a later
question, attempt or deadline of the same call.

`verify_decision` runs inside workflow code: it is pure (no I/O, no clock, no randomness, no
logging). `cryptography` is imported only when a key is used, so `import hitl` needs only the
core dependencies; a worker that must check signatures without it refuses them, saying which
extra to install. Keys and the approver directory file, for clients and workers, are read by
`hitl._keys` (its public names are re-exported here).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

from hitl._keys import (
    CRYPTO_EXTRA,
    LOCAL_PEOPLE,
    MAX_NAME_CHARS,
    SHOWN_CHARS,
    directory_from_env,
    key_id_for,
    load_directory,
    load_private_key,
    local_directory,
    new_key_pair,
    private_key_pem,
    public_key_b64,
    shown,
    signing_key_from_env,
)
from hitl.errors import UserError
from hitl.wire import (
    AnswerInput,
    ApproverDirectory,
    DecisionInput,
    ExtendInput,
    ResolveInput,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

DOMAIN = b"hitl-decision\n"
"""Prefix of every signed message: a signature over anything else never verifies here."""
VERSION = 2
"""The signed body's version (`v`). Version 1 (2026-11-24) did not bind the arguments a person
saw, so a plain approval stayed valid after an edit; it is no longer accepted."""
MAX_SIGNATURE_LIFETIME = timedelta(days=7)
"""A signature may be valid for at most this long (a stolen one expires)."""
_SIGNATURE_BYTES = 64
_SIGNATURE_B64_CHARS = 88  # base64 of 64 bytes, padded

Signed = DecisionInput | AnswerInput | ResolveInput | ExtendInput
"""A payload that can carry a signature."""


class SignatureError(Exception):
    """A decision's signature is missing, unknown, expired, unbound or wrong.

    Attributes:
        type: Why: `Unsigned`, `UnknownKey`, `WrongApprover`, `SignatureExpired`, `Unbound`
            (it does not say which arguments or round it is about), `BadSignature`, or
            `SigningUnavailable` (this worker cannot check signatures). The run refuses the
            decision with this type.
        message: One line for an operator, never more than 100 characters of any input.
    """

    def __init__(self, type: str, message: str) -> None:
        super().__init__(message)
        self.type = type
        self.message = message


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def arguments_digest(arguments: dict[str, Any] | None) -> str | None:
    """Hex SHA-256 of the canonical JSON of edited arguments (or of an answer's content).

    (A call's arguments as a person saw them are named by `text_digest` of their text.)

    Canonical JSON: keys sorted, no whitespace (`","` and `":"`), non-ASCII escaped
    (`json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=True)`), so
    the digest does not depend on the order the keys arrive in. `None` for no arguments.
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


def kind_of(d: Signed, kind: str | None = None) -> str:
    """The decision kind a payload is (`approve`/`reject` need `kind`; the others are theirs)."""
    if isinstance(d, AnswerInput):
        return "answer"
    if isinstance(d, ResolveInput):
        return "resolve"
    if isinstance(d, ExtendInput):
        return "extend"
    if kind not in ("approve", "reject"):
        raise ValueError(f"an approve/reject payload needs kind approve or reject, not {kind!r}")
    return kind


def decision_body(d: Signed, *, kind: str | None = None, workflow_id: str) -> dict[str, Any]:
    """What a signature covers, as a JSON object (see `decision_message`).

    Common to every kind: `v` (2), `workflow_id`, `call_id`, `kind`, `approver`, `reason`,
    `seen_sha256` (the call's arguments as the person saw them) and `expires_at` (ISO 8601
    UTC with `Z`, to the second, or `null`). Then, by kind:

    - `approve`, `reject`: `always`, `message`, `arguments_sha256` (`arguments_digest` of
      edited arguments, else `null`);
    - `answer`: `action`, `content_sha256` (`arguments_digest` of the content), `round`;
    - `resolve`: `outcome`, `output`, `message`, `round`;
    - `extend`: `milliseconds` (the extension, rounded to whole milliseconds), `round`.

    `round` is the call's `PendingApproval.round` when the person decided: it changes with
    every question, answer, uncertain attempt, resolution and extension, so a signature made
    for one of them does not apply to the next.

    Raises `ValueError` when `kind` is missing for an approve/reject payload, and `TypeError`
    or `ValueError` when the payload cannot be written as canonical JSON.
    """
    kind = kind_of(d, kind)
    body: dict[str, Any] = {
        "v": VERSION,
        "workflow_id": workflow_id,
        "call_id": d.call_id,
        "kind": kind,
        "approver": d.approver,
        "reason": d.reason,
        "seen_sha256": d.seen_sha256,
        "expires_at": _iso(d.expires_at),
    }
    if isinstance(d, DecisionInput):
        body.update(
            always=d.always,
            message=d.message,
            arguments_sha256=arguments_digest(d.arguments),
        )
    elif isinstance(d, AnswerInput):
        body.update(action=d.action, content_sha256=arguments_digest(d.content), round=d.round)
    elif isinstance(d, ResolveInput):
        body.update(outcome=d.outcome, output=d.output, message=d.message, round=d.round)
    else:
        body.update(milliseconds=round(d.seconds * 1000), round=d.round)
    return body


def decision_message(d: Signed, *, kind: str | None = None, workflow_id: str) -> bytes:
    """The exact bytes a decision's signature covers: `DOMAIN` + canonical JSON of the body.

    The body is `decision_body(...)`; canonical JSON is `json.dumps(body, sort_keys=True,
    separators=(",", ":"), ensure_ascii=True)`. A signer in another language builds the same
    bytes from this recipe (copying `seen_sha256` and `round` from the run's `status`).
    """
    body = decision_body(d, kind=kind, workflow_id=workflow_id)
    return DOMAIN + _canonical_json(body).encode("ascii")


def sign_decision(
    private_key: Ed25519PrivateKey, d: Signed, *, kind: str | None = None, workflow_id: str
) -> str:
    """The base64 Ed25519 signature of payload `d` (as it is, `expires_at` included)."""
    data = decision_message(d, kind=kind, workflow_id=workflow_id)
    return base64.b64encode(private_key.sign(data)).decode("ascii")


D = TypeVar("D", bound=DecisionInput | AnswerInput | ResolveInput | ExtendInput)


def sign_input(
    d: D,
    *,
    kind: str | None = None,
    workflow_id: str,
    key_id: str,
    key: Ed25519PrivateKey,
    lifetime: timedelta = timedelta(hours=1),
    now: datetime | None = None,
) -> D:
    """A copy of `d` signed with `key`, valid for `lifetime` from `now` (default: the clock).

    `d.approver` and `d.seen_sha256` must be set (both are signed: who decides, and the
    arguments they saw), and `d.round` for answers, resolutions and extensions. The copy
    carries `key_id`, the signature and `expires_at` (to the second). Raises `UserError` when
    something the signature must cover is missing.
    """
    if not d.approver:
        raise UserError("a signed decision names its approver (--as NAME)")
    if not d.seen_sha256:
        raise UserError(
            "a signed decision names the arguments it saw (seen_sha256: the call's "
            "arguments_sha256 from the run's status)"
        )
    if _needs_round(d) and getattr(d, "round", None) is None:
        raise UserError("a signed answer, resolution or extension names the call's round")
    expires = _utc((now or datetime.now(UTC)) + lifetime).replace(microsecond=0)
    stamped = d.model_copy(update={"key_id": key_id, "expires_at": expires, "signature": None})
    signature = sign_decision(key, stamped, kind=kind, workflow_id=workflow_id)
    return cast(D, stamped.model_copy(update={"signature": signature}))


def verify_decision(
    directory: ApproverDirectory,
    d: Signed,
    *,
    kind: str | None = None,
    workflow_id: str,
    now: datetime,
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
    - `Unbound`: `d` does not say which arguments it saw (`seen_sha256`), or which round of
      the call it answers (answers, resolutions, extensions). The caller checks these against
      the call as it is now.
    - `BadSignature`: the signature is not base64 of 64 bytes, or it does not verify over
      `decision_message(...)` of `d` with this `kind` and `workflow_id` (forged, made with
      another key, or any covered field changed after signing).
    - `SigningUnavailable`: this process cannot check signatures (`cryptography` missing).
    """
    owner, public = _key_owner(directory, d)
    approver = _signer(directory, d, owner)
    _check_expiry(d, now)
    _check_bound(d)
    _check_signature(public, d, kind=kind, workflow_id=workflow_id)
    return approver


def _key_owner(directory: ApproverDirectory, d: Signed) -> tuple[str, str]:
    """The approver whose key signed `d`, and that public key (`Unsigned`, `UnknownKey`)."""
    if not d.signature or not d.key_id:
        raise SignatureError("Unsigned", "the decision carries no signature and key id")
    for name, entry in directory.approvers.items():
        if d.key_id in entry.keys:
            return name, entry.keys[d.key_id]
    raise SignatureError(
        "UnknownKey", f"no approver in the worker's directory has key '{shown(d.key_id)}'"
    )


def _signer(directory: ApproverDirectory, d: Signed, owner: str) -> str:
    """Who the signature speaks for: `d.approver`, if the key may sign for them (`WrongApprover`).

    An approval gateway's key vouches for the person it names (it authenticated them); it never
    decides as itself or as another gateway. Any other key signs for its owner only.
    """
    claimed = f"'{shown(d.approver)}'" if d.approver else "an unnamed approver"
    if directory.approvers[owner].gateway:
        if not d.approver or d.approver in _gateways(directory):
            raise SignatureError(
                "WrongApprover",
                f"key '{shown(d.key_id)}' belongs to the approval gateway '{shown(owner)}': "
                f"it signs for the people it authenticated, not for {claimed}",
            )
        return d.approver
    if not d.approver or d.approver != owner:
        raise SignatureError(
            "WrongApprover",
            f"key '{shown(d.key_id)}' belongs to '{shown(owner)}', not {claimed}",
        )
    return owner


def _check_expiry(d: Signed, now: datetime) -> None:
    """`d` is signed until a time after `now`, at most `MAX_SIGNATURE_LIFETIME` ahead."""
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


def _check_bound(d: Signed) -> None:
    """`d` names the arguments it saw and, if its kind has one, the call's round (`Unbound`)."""
    if not d.seen_sha256:
        raise SignatureError(
            "Unbound",
            "a signed decision names the arguments it saw (seen_sha256): sign it again with "
            "a current hitl",
        )
    if _needs_round(d) and getattr(d, "round", None) is None:
        raise SignatureError("Unbound", "a signed decision of this kind names the call's round")


def _check_signature(public_b64: str, d: Signed, *, kind: str | None, workflow_id: str) -> None:
    """`d.signature` is the key's Ed25519 signature of `decision_message(d)` (`BadSignature`).

    The signature's shape is checked before the message is built, and the message before the
    cryptography (`SigningUnavailable` without it, `UnknownKey` for a malformed public key).
    """
    try:
        raw = base64.b64decode(public_b64, validate=True)
    except (ValueError, binascii.Error):
        raw = b""
    signature = b""
    signed = d.signature or ""  # (never empty here: `_key_owner` refused unsigned decisions)
    if len(signed) <= _SIGNATURE_B64_CHARS:
        try:
            signature = base64.b64decode(signed, validate=True)
        except (ValueError, binascii.Error):
            raise SignatureError("BadSignature", "the signature is not base64") from None
    if len(signature) != _SIGNATURE_BYTES:
        raise SignatureError(
            "BadSignature", "the signature is not an Ed25519 signature (64 bytes, base64)"
        )
    try:
        data = decision_message(d, kind=kind, workflow_id=workflow_id)
    except (TypeError, ValueError, RecursionError):
        raise SignatureError(
            "BadSignature", "the decision cannot be written as canonical JSON"
        ) from None
    if not _verifies(raw, signature, data):
        raise SignatureError(
            "BadSignature",
            "the signature does not match this decision (made with another key, for another "
            "run, call or version of its arguments, or altered since)",
        )


def _needs_round(d: Signed) -> bool:
    """Answers, resolutions and extensions name the round of the call they are about."""
    return not isinstance(d, DecisionInput)


def _verifies(public: bytes, signature: bytes, data: bytes) -> bool:
    """Whether `signature` is `public`'s Ed25519 signature of `data`."""
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        raise SignatureError(
            "SigningUnavailable",
            f"this worker cannot check signatures: {CRYPTO_EXTRA}",
        ) from None
    try:
        key = Ed25519PublicKey.from_public_bytes(public)
    except ValueError:
        raise SignatureError(
            "UnknownKey",
            "a key in the worker's approver directory is not a base64 Ed25519 public key",
        ) from None
    try:
        key.verify(signature, data)
    except InvalidSignature:
        return False
    return True


def _gateways(directory: ApproverDirectory) -> set[str]:
    return {name for name, e in directory.approvers.items() if e.gateway}


def signing_available() -> bool:
    """Whether this process can sign and check signatures (`cryptography` is installed).

    Workers call it before their first workflow task: it imports what `verify_decision`
    uses, outside the workflow sandbox, which passes the already imported modules through
    (`cryptography`'s Rust extension must not be imported a second time inside it).
    """
    try:
        import cryptography.exceptions
        import cryptography.hazmat.primitives.asymmetric.ed25519  # noqa: F401
    except ImportError:
        return False
    return True


__all__ = [
    "LOCAL_PEOPLE",
    "CRYPTO_EXTRA",
    "DOMAIN",
    "MAX_NAME_CHARS",
    "MAX_SIGNATURE_LIFETIME",
    "SHOWN_CHARS",
    "VERSION",
    "SignatureError",
    "Signed",
    "arguments_digest",
    "decision_body",
    "decision_message",
    "directory_from_env",
    "key_id_for",
    "kind_of",
    "load_directory",
    "load_private_key",
    "local_directory",
    "new_key_pair",
    "private_key_pem",
    "public_key_b64",
    "sign_decision",
    "sign_input",
    "signing_available",
    "signing_key_from_env",
    "verify_decision",
]
