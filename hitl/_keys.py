"""Signing keys and the approver directory, as clients and workers read them from disk.

`hitl.signing` re-exports the public names; signatures themselves are made and checked there.

`cryptography` is imported only when a key is used, so `import hitl` needs only the core
dependencies; without it, these functions say which extra to install.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hitl.errors import UserError
from hitl.limits import MAX_APPROVER_CHARS
from hitl.wire import ApproverDirectory

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

MAX_NAME_CHARS = MAX_APPROVER_CHARS
"""Longest approver name, group name or key id the approver directory accepts (the limit on a
decision's `approver`, so every name a decision can carry fits)."""
SHOWN_CHARS = 100
"""At most this much of any input appears in an error message."""
CRYPTO_EXTRA = "pip install 'hitl-temporal[encryption]'"

_PUBLIC_KEY_BYTES = 32


def printable(text: str) -> str:
    """`text` on one line: control and formatting characters shown as `?`."""
    return "".join(c if c.isprintable() else "?" for c in text)


def shown(value: object) -> str:
    """`value` as it may appear in a message: at most 100 characters, on one line."""
    text = str(value)
    return printable(text[:SHOWN_CHARS]) + ("..." if len(text) > SHOWN_CHARS else "")


# --------------------------------------------------------------------------- keys


def _crypto() -> Any:
    """The `cryptography` Ed25519 and serialization modules, or a `UserError` naming the extra."""
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise UserError(f"signing keys need the encryption extra: {CRYPTO_EXTRA}") from None
    return ed25519, serialization


def new_key_pair() -> tuple[Ed25519PrivateKey, str]:
    """A new Ed25519 private key and its public key (raw 32 bytes, base64)."""
    ed25519, _ = _crypto()
    key: Ed25519PrivateKey = ed25519.Ed25519PrivateKey.generate()
    return key, public_key_b64(key)


def public_key_b64(key: Ed25519PrivateKey) -> str:
    """The public key of `key`: raw 32 bytes, base64 (as the approver directory holds it)."""
    _, serialization = _crypto()
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def key_id_for(public_b64: str) -> str:
    """A key's id: the first 16 hex characters of the SHA-256 of its raw public key.

    Raises `ValueError` when `public_b64` is not base64.
    """
    return hashlib.sha256(base64.b64decode(public_b64, validate=True)).hexdigest()[:16]


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    """`key` as an unencrypted PKCS8 PEM (whoever reads the file can sign: keep it 0600)."""
    _, serialization = _crypto()
    pem: bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in the unencrypted PEM file at `path`.

    Raises `UserError`, naming the file, when it is missing, unreadable, not a PEM private key,
    encrypted, or a key of another type (or when `cryptography` is not installed).
    """
    ed25519, serialization = _crypto()
    file = printable(str(path))  # the operator's own path: shown whole
    try:
        pem = Path(path).read_bytes()
    except FileNotFoundError:
        raise UserError(f"the signing key file {file} does not exist") from None
    except OSError as exc:
        raise UserError(f"cannot read the signing key file {file}: {exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError:
        raise UserError(
            f"the signing key file {file} is encrypted; hitl reads unencrypted keys "
            "(keep the file 0600)"
        ) from None
    except ValueError:
        raise UserError(
            f"the signing key file {file} is not a PEM private key (make one with `hitl keys new`)"
        ) from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise UserError(f"the signing key file {file} holds a key that is not Ed25519")
    private: Ed25519PrivateKey = key
    return private


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
            raise _DuplicateName(f"'{shown(key)}' is listed twice in one object")
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
        return f"{what} '{shown(value)}' is not 1 to {MAX_NAME_CHARS} characters"
    return None


def load_directory(path: str | Path) -> ApproverDirectory:
    """The approver directory in the JSON file at `path`, checked entry by entry.

    The file holds `{"approvers": {NAME: ENTRY, ...}}` (an `ApproverDirectory`) or just
    `{NAME: ENTRY, ...}`, the shape `hitl keys new` prints; an ENTRY is
    `{"groups": [GROUP, ...], "keys": {KEY_ID: PUBLIC_KEY, ...}}` with each public key the raw
    32 bytes of an Ed25519 public key, base64. Raises `UserError`, naming the file and the bad
    entry, when the file cannot be read or parsed, a name (approver, group, key id) is empty or
    longer than `MAX_NAME_CHARS`, an entry has unknown fields, a public key is not base64 of 32
    bytes, or a key id or public key is listed twice (one key would speak for two approvers).
    """
    file = printable(str(path))  # the operator's own path: shown whole
    approvers = _approvers_of(_read_json(path, file))
    if not isinstance(approvers, dict):
        raise UserError(
            f"the approver directory {file} is not an object of approvers "
            '({"NAME": {"groups": [...], "keys": {"KEY_ID": "PUBLIC_KEY"}}})'
        )
    key_owner: dict[str, str] = {}
    public_owner: dict[bytes, str] = {}
    try:
        for name, entry in approvers.items():
            _check_entry(name, entry, key_owner, public_owner)
    except _BadEntry as exc:
        raise UserError(f"the approver directory {file}: {exc}") from None
    return ApproverDirectory.model_validate({"approvers": approvers})


def _read_json(path: str | Path, file: str) -> Any:
    """The directory file's JSON, or `UserError` saying why it cannot be had."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"the approver directory {file} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the approver directory {file}: {shown(exc)}") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except RecursionError:
        raise UserError(f"the approver directory {file} is nested too deeply") from None
    except _DuplicateName as exc:
        raise UserError(f"the approver directory {file}: {exc}") from None
    except ValueError as exc:
        raise UserError(f"the approver directory {file} is not JSON: {shown(exc)}") from None


class _BadEntry(ValueError):
    """What is wrong with an entry of the directory (`load_directory` names the file)."""


def _check_entry(
    name: Any, entry: Any, key_owner: dict[str, str], public_owner: dict[bytes, str]
) -> None:
    """One approver's entry: its name, fields, groups and keys (`_BadEntry`).

    Its keys are added to `key_owner` and `public_owner`, so that a key listed twice, for the
    same approver or another, is refused: one key would speak for two approvers.
    """
    if problem := _name_problem("an approver name", name):
        raise _BadEntry(problem)
    who = f"approver '{shown(name)}'"
    if not isinstance(entry, dict):
        raise _BadEntry(f"{who} is not an object with groups and keys")
    unknown = sorted(set(entry) - {"groups", "keys", "gateway"})
    if unknown:
        raise _BadEntry(f"{who} has an unknown field '{shown(unknown[0])}' (groups, keys, gateway)")
    if not isinstance(entry.get("gateway", False), bool):
        raise _BadEntry(f"{who}: gateway is true or false")
    groups = entry.get("groups", [])
    if not isinstance(groups, list):
        raise _BadEntry(f"{who}: groups is not a list of names")
    for group in groups:
        if problem := _name_problem("a group name", group):
            raise _BadEntry(f"{who}: {problem}")
    keys = entry.get("keys", {})
    if not isinstance(keys, dict):
        raise _BadEntry(f"{who}: keys is not an object of key id -> public key")
    for key_id, public in keys.items():
        raw = _public_key(who, key_id, public)
        if key_id in key_owner:
            raise _BadEntry(
                f"key id '{shown(key_id)}' is listed for '{shown(key_owner[key_id])}' "
                f"and '{shown(name)}'"
            )
        if raw in public_owner:
            raise _BadEntry(
                f"{who}: key '{shown(key_id)}': the same public key is already listed for "
                f"'{shown(public_owner[raw])}'"
            )
        key_owner[key_id] = name
        public_owner[raw] = name


def _public_key(who: str, key_id: Any, public: Any) -> bytes:
    """The raw 32 bytes of one listed key, whose id must be a name (`_BadEntry`)."""
    if problem := _name_problem("a key id", key_id):
        raise _BadEntry(f"{who}: {problem}")
    raw = b""
    if isinstance(public, str):
        try:
            raw = base64.b64decode(public, validate=True)
        except (ValueError, binascii.Error):
            raw = b""
    if len(raw) != _PUBLIC_KEY_BYTES:
        raise _BadEntry(
            f"{who}: key '{shown(key_id)}' is not a base64 Ed25519 public key (32 bytes)"
        )
    return raw


def directory_from_env() -> ApproverDirectory | None:
    """The directory in the file `HITL_APPROVERS` names (`load_directory`); `None` if unset."""
    path = os.environ.get("HITL_APPROVERS")
    return load_directory(path) if path else None


# --------------------------------------------------------------------------- a local directory


LOCAL_PEOPLE = {"ann": ["finance"], "bob": ["finance"], "lee": ["finance-leads"]}
"""The people of a stack on this machine (`make demo`, `hitl dev`): two of `finance` and a
finance lead, the groups the refund desk's rules name."""


def local_directory(
    folder: str | Path,
    people: dict[str, list[str]] | None = None,
    gateway: str | None = "console",
) -> Path:
    """An approver directory for a stack on this machine (the demo, `hitl dev`): its file.

    Each person in `people` (name -> groups; default `LOCAL_PEOPLE`), and the approval
    `gateway` (the console, whose key signs for the people it signs in), gets a private key
    `folder/keys/NAME.key` (0600), made on first use and kept after, so a run started earlier
    still knows their keys. The
    directory `folder/approvers.json` lists exactly these people and the gateway. Raises
    `UserError` for a name that is not a plain file name.
    """
    keys = Path(folder) / "keys"
    keys.mkdir(parents=True, exist_ok=True)
    entries: dict[str, dict[str, Any]] = {}
    members = {**(LOCAL_PEOPLE if people is None else people), **({gateway: []} if gateway else {})}
    for name, groups in members.items():
        if not name or name in (".", "..") or any(c in name for c in "/\\\0"):
            raise UserError(f"'{shown(name)}' is not a plain file name for a key")
        path = keys / f"{name}.key"
        if not path.exists():
            key, _ = new_key_pair()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(private_key_pem(key))
        public = public_key_b64(load_private_key(path))
        entries[name] = {"groups": list(groups), "keys": {key_id_for(public): public}}
        if name == gateway:
            entries[name]["gateway"] = True
    directory = Path(folder) / "approvers.json"
    directory.write_text(json.dumps({"approvers": entries}, indent=2) + "\n", encoding="utf-8")
    return directory
