"""`hitl keys`: Ed25519 key pairs for signed decisions (see `hitl.signing`).

hitl keys new --approver NAME [--groups a,b] [--out FILE]
hitl keys show FILE
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from hitl.cli.common import EXIT_OK, Refused
from hitl.signing import (
    MAX_NAME_CHARS,
    key_id_for,
    load_private_key,
    new_key_pair,
    private_key_pem,
    public_key_b64,
)


def cmd_keys(args: argparse.Namespace) -> int:
    """Run `hitl keys new` or `hitl keys show` (`args.keys_command` says which)."""
    if args.keys_command == "show":
        return cmd_keys_show(args)
    return cmd_keys_new(args)


def cmd_keys_show(args: argparse.Namespace) -> int:
    """`keys show FILE`: the key id and public key of a private key file."""
    public = public_key_b64(load_private_key(args.file))
    print(f"key id {key_id_for(public)}  public key {public}")
    return EXIT_OK


def _groups(text: str) -> list[str]:
    groups = [g.strip() for g in text.split(",") if g.strip()]
    for g in groups:
        if len(g) > MAX_NAME_CHARS:
            raise Refused(f"a group name is at most {MAX_NAME_CHARS} characters")
    return groups


def _default_out(name: str) -> Path:
    if name in (".", "..") or any(sep in name for sep in ("/", "\\", "\0")):
        raise Refused("--approver NAME is not a plain file name; choose the key's file with --out")
    return Path(f"{name}.key")


def cmd_keys_new(args: argparse.Namespace) -> int:
    """`keys new`: write a new private key (0600, never over a file) and print its entry.

    The approver directory entry (`{NAME: {"groups": [...], "keys": {KEY_ID: PUBLIC}}}`, JSON)
    goes to stdout, so it can be redirected into a file; where the key is, and what to do next,
    goes to stderr.
    """
    name = args.approver
    if not name.strip() or len(name) > MAX_NAME_CHARS:
        raise Refused(f"--approver is 1 to {MAX_NAME_CHARS} characters")
    groups = _groups(args.groups)
    out = Path(args.out) if args.out else _default_out(name)
    if out.exists() or out.is_symlink():
        raise Refused(f"{out} exists; choose another --out (keys are never overwritten)")
    key, public = new_key_pair()
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise Refused(f"{out} exists; choose another --out (keys are never overwritten)") from None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise Refused(f"cannot create {out}: {reason}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(private_key_pem(key))
    entry = {name: {"groups": groups, "keys": {key_id_for(public): public}}}
    print(json.dumps(entry, indent=2))
    where = out.resolve()
    print(
        f"hitl: the private key is in {where} (keep it private); add the entry above to the "
        f"worker's approver directory (the HITL_APPROVERS file), then decide with "
        f"HITL_SIGNING_KEY={where} and --as {name}",
        file=sys.stderr,
    )
    return EXIT_OK
