"""Signed policy publications: only an admin of the approver directory publishes a policy.

A policy registry (`PolicyRegistry`, docs/policies.md) accepts a document only when a key the
worker's approver directory gives an approver of group `admins` signed exactly it: the
registry's id, the document's digest and the admin's name, until an expiry. Pure (no I/O, no
clock): the registry's update validator calls `verify_publication` in workflow code.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from hitl.signing import MAX_SIGNATURE_LIFETIME, SignatureError, _verifies
from hitl.wire import ADMINS_GROUP, ApproverDirectory, PublishPolicy

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

DOMAIN = b"hitl-policy-publication\n"
"""Prefix of every signed publication: a decision's signature never verifies as one."""
APPLY_DOMAIN = b"hitl-policy-apply\n"
"""Prefix of every signed `apply_policy` (to one run, named in place of the registry): a
publication never verifies as an apply, nor an apply as a publication."""


def publication_message(
    registry_id: str, digest: str, admin: str, expires_at: datetime, domain: bytes = DOMAIN
) -> bytes:
    """The bytes an admin signs to publish the document whose digest is `digest`.

    With `APPLY_DOMAIN`, `registry_id` is the run's workflow id: what an admin signs to apply
    the document to that run.
    """
    body = {
        "registry": registry_id,
        "digest": digest,
        "admin": admin,
        "expires_at": expires_at.astimezone(UTC).isoformat(),
    }
    return domain + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def sign_publication(
    key: Ed25519PrivateKey,
    *,
    key_id: str,
    admin: str,
    registry_id: str,
    document: dict[str, object],
    digest: str,
    now: datetime,
    lifetime: timedelta = timedelta(hours=1),
    reason: str | None = None,
    domain: bytes = DOMAIN,
) -> PublishPolicy:
    """A `publish_policy` update for `document` (whose digest is `digest`), signed by `admin`.

    With `domain=APPLY_DOMAIN` and a run's workflow id as `registry_id`: the fields of an
    `apply_policy` update to that run (`hitl.wire.ApplyPolicy`).
    """
    expires = (now + lifetime).astimezone(UTC)
    signature = key.sign(publication_message(registry_id, digest, admin, expires, domain))
    return PublishPolicy(
        document=dict(document),
        admin=admin,
        key_id=key_id,
        signature=base64.b64encode(signature).decode(),
        expires_at=expires,
        reason=reason,
    )


def verify_publication(
    directory: ApproverDirectory,
    p: PublishPolicy,
    *,
    registry_id: str,
    digest: str,
    now: datetime,
    domain: bytes = DOMAIN,
) -> str:
    """The admin who signed publication `p` of the document with `digest`, or `SignatureError`.

    `UnknownKey` (no approver has the key), `WrongApprover` (the key is another's, or a
    gateway's), `NotAdmin` (not in group `admins`), `SignatureExpired`, `BadSignature`.
    """
    owner = next((n for n, e in directory.approvers.items() if p.key_id in e.keys), None)
    if owner is None:
        raise SignatureError("UnknownKey", "no approver in the worker's directory has this key")
    entry = directory.approvers[owner]
    if entry.gateway or owner != p.admin:
        raise SignatureError("WrongApprover", "the key is not the named admin's own")
    if ADMINS_GROUP not in entry.groups:
        raise SignatureError("NotAdmin", f"only group {ADMINS_GROUP!r} may publish a policy")
    expires = p.expires_at.astimezone(UTC)
    if now.astimezone(UTC) > expires or expires - now > MAX_SIGNATURE_LIFETIME:
        raise SignatureError("SignatureExpired", "the publication's signature is not current")
    try:
        public = base64.b64decode(entry.keys[p.key_id], validate=True)
        signature = base64.b64decode(p.signature, validate=True)
    except (ValueError, binascii.Error):
        raise SignatureError("BadSignature", "the signature is not base64") from None
    message = publication_message(registry_id, digest, p.admin, expires, domain)
    if len(signature) != 64 or not _verifies(public, signature, message):
        raise SignatureError("BadSignature", "the signature does not match this document")
    return owner
