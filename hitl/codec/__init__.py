"""Payload encryption: tool arguments and outputs may be personal data.

With `HITL_ENCRYPTION_KEY` set (on workers *and* clients), every payload Temporal stores
(workflow inputs, activity inputs and results, update arguments, query answers, failures'
messages) is encrypted with AES-256-GCM before it leaves the process. Search attributes,
workflow ids and handler names are never encrypted, so they never carry arguments.

Key format: `kid:base64key[,kid2:base64key2...]`. The first key encrypts; all keys decrypt, so
keys can be rotated by prepending a new one. A bare base64 key is accepted (kid `default`).
Generate one with `python -m hitl.codec`.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from hitl.errors import UserError
from hitl.extras import missing_extra
from hitl.markers import UNDECRYPTABLE as UNDECRYPTABLE  # also public here

ENCODING = b"binary/encrypted"
KEY_ENV = "HITL_ENCRYPTION_KEY"


def parse_keys(spec: str) -> tuple[str, dict[str, bytes]]:
    """Parse `kid:base64key,...` into (active key id, {kid: key})."""
    keys: dict[str, bytes] = {}
    active = ""
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        kid, sep, b64 = part.rpartition(":")
        if not sep:
            kid, b64 = "default", part
        try:
            key = base64.b64decode(b64, validate=True)
        except ValueError:
            raise UserError(f"{KEY_ENV}: key {kid!r} is not valid base64") from None
        if len(key) != 32:
            raise UserError(f"{KEY_ENV}: key {kid!r} must be 32 bytes (AES-256), got {len(key)}")
        keys[kid] = key
        active = active or kid
    if not keys:
        raise UserError(f"{KEY_ENV} is set but holds no key")
    return active, keys


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM payload codec with key ids (for rotation)."""

    def __init__(self, active_key_id: str, keys: dict[str, bytes]) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:
            what = f"payload encryption ({KEY_ENV})"
            raise UserError(missing_extra("encryption", what)) from None

        if active_key_id not in keys:
            raise UserError(f"active key {active_key_id!r} is not among the keys")
        self._active = active_key_id
        self._ciphers = {kid: AESGCM(key) for kid, key in keys.items()}

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> EncryptionCodec | None:
        """The codec configured by `HITL_ENCRYPTION_KEY`, or `None` when it is unset."""
        spec = (env if env is not None else os.environ).get(KEY_ENV, "").strip()
        if not spec:
            return None
        active, keys = parse_keys(spec)
        return cls(active, keys)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Encrypt each payload (the whole serialized payload, metadata included)."""
        cipher = self._ciphers[self._active]
        out = []
        for p in payloads:
            nonce = os.urandom(12)
            data = nonce + cipher.encrypt(nonce, p.SerializeToString(), None)
            out.append(
                Payload(
                    metadata={
                        "encoding": ENCODING,
                        "encryption-key-id": self._active.encode(),
                    },
                    data=data,
                )
            )
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Decrypt payloads this codec encrypted; pass others through unchanged.

        Refusing plaintext here would fail the workflow task that carries it (and stall the run
        for a task timeout), so a decision typed into a CLI without `--codec-endpoint` is
        accepted, and stored in clear: it holds call ids, names and messages, never tool
        arguments. Operators use the codec endpoint (`hitl codec-server`).

        Decoding never raises: a payload that claims our encoding but cannot be decrypted (an
        unknown key id, a wrong key, bytes someone typed) becomes an `UNDECRYPTABLE` payload
        saying why. Raising would fail every workflow task that carries it, for good; the run's
        handlers refuse the payload instead, and typed reads report the reason.
        """
        out = []
        for p in payloads:
            if p.metadata.get("encoding") != ENCODING:
                out.append(p)
                continue
            kid = p.metadata.get("encryption-key-id", b"").decode("utf-8", "replace")
            cipher = self._ciphers.get(kid)
            if cipher is None:
                out.append(undecryptable(f"encrypted with unknown key id {kid[:40]!r}"))
                continue
            try:
                plain = cipher.decrypt(p.data[:12], p.data[12:], None)
                out.append(Payload.FromString(plain))
            except Exception:
                out.append(undecryptable(f"does not decrypt with key {kid[:40]!r}"))
        return out


def undecryptable(reason: str) -> Payload:
    """The stand-in for a payload that could not be decrypted."""
    return Payload(metadata={"encoding": UNDECRYPTABLE, "reason": reason.encode()}, data=b"")


def serve_codec(
    codec: EncryptionCodec,
    host: str = "127.0.0.1",
    port: int = 8081,
    cors_origins: tuple[str, ...] = (),
) -> Any:
    """A remote codec server (`/encode`, `/decode`) for the `temporal` CLI and the Web UI.

    Returns the running `hitl.web.BackgroundServer` (its `server_address`, `url`,
    `shutdown()`). CORS admits `cors_origins` (the UI's origin), nothing else. Needs the
    `console` extra.
    """
    from hitl.web import BackgroundServer, require_web

    require_web("the codec server")
    from hitl.codec.server import codec_app

    return BackgroundServer(codec_app(codec, cors_origins), host, port)


def new_key() -> str:
    """A fresh random key in `HITL_ENCRYPTION_KEY` format."""
    return "k1:" + base64.b64encode(os.urandom(32)).decode()
