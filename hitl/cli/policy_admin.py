"""`hitl policy publish` and `hitl policy apply`: an admin's signed policy changes.

- `hitl policy publish FILE`: make FILE the namespace's policy (the `PolicyRegistry`): runs
  started from then on pin it.
- `hitl policy apply FILE RUN... | --parked`: move running runs to FILE's version now; each
  run re-evaluates its pending calls and says what changed and why.

Both sign with the admin's key (`HITL_SIGNING_KEY`, a member of the approver directory's
`admins` group; name: `--as`, else `HITL_APPROVER`, else the OS user). The workflows verify
the signature against the worker's directory; this command only signs and sends.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client, WorkflowUpdateFailedError

from hitl.cli.common import EXIT_FAILED, EXIT_OK, Refused, approver_name, escape, refused_update
from hitl.policy import canonical, digest_of, load_policy
from hitl.policy_signing import APPLY_DOMAIN, sign_publication
from hitl.wire import (
    POLICY_REGISTRY_ID,
    SA_STATUS,
    UPDATE_APPLY_POLICY,
    UPDATE_PUBLISH_POLICY,
    WORKFLOW_TYPE,
    ApplyPolicy,
    PolicyChange,
    PolicyPublication,
)

SIGNATURE_LIFETIME = timedelta(minutes=10)
"""How long a signed publication or apply is good for (the workflows refuse it after)."""


def add_parsers(ps: Any) -> None:
    """`publish` and `apply` under `hitl policy`."""
    p = ps.add_parser("publish", help="make a policy the namespace's (signed by an admin)")
    p.add_argument("file")
    p.add_argument("--registry", default=POLICY_REGISTRY_ID, help="the registry's workflow id")
    a = ps.add_parser("apply", help="move running runs to a policy version (signed by an admin)")
    a.add_argument("file")
    a.add_argument("runs", nargs="*", metavar="RUN")
    a.add_argument("--parked", action="store_true", help="every run waiting for a person")
    for sub in (p, a):
        sub.add_argument("--as", dest="as_", metavar="NAME", help="the admin (default: OS user)")
        sub.add_argument("--reason", help="why (kept with the change)")


def check_inputs(args: argparse.Namespace) -> None:
    """Read FILE and the admin's key before any connection: a typo fails at once, offline."""
    load_policy(args.file)
    _key()


def _key() -> tuple[str, Any]:
    from hitl.signing import signing_key_from_env

    signing = signing_key_from_env()
    if signing is None:
        raise Refused("set HITL_SIGNING_KEY to the admin's private key file (PEM)")
    return signing


async def publish(client: Client, args: argparse.Namespace) -> int:
    """Sign FILE for the registry and publish it."""
    doc = load_policy(args.file)
    key_id, key = _key()
    upd = sign_publication(
        key,
        key_id=key_id,
        admin=approver_name(args),
        registry_id=args.registry,
        document=canonical(doc),
        digest=digest_of(doc),
        now=datetime.now(UTC),
        lifetime=SIGNATURE_LIFETIME,
        reason=args.reason,
    )
    handle = client.get_workflow_handle(args.registry)
    try:
        entry = await handle.execute_update(
            UPDATE_PUBLISH_POLICY, upd, result_type=PolicyPublication
        )
    except WorkflowUpdateFailedError as exc:
        raise refused_update(exc) from None
    print(f"published {escape(entry.name)}@{escape(entry.version)} {entry.digest[:19]}")
    return EXIT_OK


def apply_update(
    key: Any,
    key_id: str,
    admin: str,
    run: str,
    path: str,
    reason: str | None,
    now: datetime | None = None,
) -> ApplyPolicy:
    """The signed `apply_policy` update of FILE for one run (signed at `now`, default: now)."""
    doc = load_policy(path)
    upd = sign_publication(
        key,
        key_id=key_id,
        admin=admin,
        registry_id=run,
        document=canonical(doc),
        digest=digest_of(doc),
        now=now or datetime.now(UTC),
        lifetime=SIGNATURE_LIFETIME,
        reason=reason,
        domain=APPLY_DOMAIN,
    )
    return ApplyPolicy.model_validate(upd.model_dump())


async def apply(client: Client, args: argparse.Namespace) -> int:
    """Sign FILE for each run and apply it; print what changed per call."""
    runs = list(args.runs)
    if args.parked:
        runs += [r for r in await parked(client) if r not in runs]
    if not runs:
        raise Refused("name the runs to apply the policy to, or --parked")
    key_id, key = _key()
    failed = 0
    for run in runs:
        upd = apply_update(key, key_id, approver_name(args), run, args.file, args.reason)
        try:
            change = await client.get_workflow_handle(run).execute_update(
                UPDATE_APPLY_POLICY, upd, result_type=PolicyChange
            )
        except WorkflowUpdateFailedError as exc:
            failed += 1
            print(f"{escape(run)}: {refused_update(exc)}")
            continue
        for line in change_lines(run, change):
            print(line)
    return EXIT_FAILED if failed else EXIT_OK


def change_lines(run: str, change: PolicyChange) -> Iterable[str]:
    """What an apply did to a run, one line per call (escaped)."""
    yield f"{escape(run)}: {escape(change.before or 'no policy')} -> {escape(change.after)}"
    for c in change.calls:
        yield f"  {escape(c.call_id)} {escape(c.tool_name)}: {c.change}: {escape(c.reason)}"


async def parked(client: Client) -> list[str]:
    """Every running `AgentRun` waiting for a person (by the `HitlStatus` search attribute)."""
    query = (
        f"WorkflowType = '{WORKFLOW_TYPE}' AND {SA_STATUS} = 'awaiting_approval' "
        "AND ExecutionStatus = 'Running'"
    )
    return [w.id async for w in client.list_workflows(query)]
