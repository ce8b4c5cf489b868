"""`hitl keys`: Ed25519 key pairs for signed decisions (see `hitl.signing`)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from hitl.cli.common import EXIT_OK, Refused
from hitl.signing import key_id_for, load_private_key, new_key_pair, private_key_pem, public_key_b64


def cmd_keys(args: argparse.Namespace) -> int:
    """`keys new`: write a private key, print its directory entry; `keys show`: its public half."""
    if args.keys_command == "show":
        public = public_key_b64(load_private_key(args.file))
        print(f"key id {key_id_for(public)}  public key {public}")
        return EXIT_OK
    name = args.approver.strip()
    if not name or len(name) > 200:
        raise Refused("--approver is 1 to 200 characters")
    out = Path(args.out or f"{name}.key")
    if out.exists():
        raise Refused(f"{out} exists; choose another --out (keys are never overwritten)")
    key, public = new_key_pair()
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private_key_pem(key))
    groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    entry = {name: {"groups": groups, "keys": {key_id_for(public): public}}}
    print(json.dumps(entry, indent=2))
    print(
        f"the private key is in {out} (keep it private); add the entry above to the worker's "
        f"approver directory (HITL_APPROVERS), and decide with HITL_SIGNING_KEY={out} "
        f"and --as {name}"
    )
    return EXIT_OK
