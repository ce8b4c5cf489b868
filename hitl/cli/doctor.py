"""`hitl doctor`: what is wrong with a deployment, and how to fix each thing, on one screen.

One line per check, `ok`, `warn` or `fail`, with the fix for each problem:

- the server: reachable, its version, the namespace;
- our search attributes, each registered with the right type (`hitl setup` adds the missing);
- the workers polling each task queue (the `hitl` queue, the global `--task-queue`, the queues
  of `HITL_TASK_QUEUES` and every `doctor --task-queue`), for workflows and for activities;
- payload encryption: `HITL_ENCRYPTION_KEY` on this machine, and the keys recent runs were
  encrypted with;
- the blob store (`HITL_STORAGE`);
- the limit ledgers' key (`HITL_LEDGER_KEY`; every worker serves `HitlLedger`);
- signed decisions: the approver directory (`HITL_APPROVERS`) and the signing key
  (`HITL_SIGNING_KEY`: readable, and whose key it is).

Checks of this machine's settings say what this machine would do: run it where the workers (or
the people who decide) run. Exit code 0 when nothing fails (warnings allowed), 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass
from typing import Literal

from temporalio.api.enums.v1 import IndexedValueType, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    GetSystemInfoRequest,
    GetWorkflowExecutionHistoryRequest,
    ListWorkflowExecutionsRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError

from hitl.cli.common import EXIT_FAILED, EXIT_OK, one_line
from hitl.errors import UserError
from hitl.wire import (
    CORE_SEARCH_ATTRIBUTES,
    DEFAULT_TASK_QUEUE,
    SA_STATUS,
    SEARCH_ATTRIBUTES,
    WORKFLOW_TYPE,
    ApproverDirectory,
)

Level = Literal["ok", "warn", "fail"]

RUNS_SAMPLED = 5
"""Recent runs whose first payload shows how the namespace's payloads are encrypted."""


@dataclass
class Finding:
    """One line of the report."""

    level: Level
    topic: str
    text: str
    fix: str | None = None

    def line(self) -> str:
        """`level  topic  text (fix: ...)`, one line."""
        fix = f" (fix: {self.fix})" if self.fix else ""
        return one_line(f"{self.level:<5} {self.topic:<17} {self.text}{fix}")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`hitl doctor`."""
    d = sub.add_parser("doctor", help="what is wrong with this deployment, and how to fix it")
    d.add_argument(
        "--task-queue",
        dest="doctor_queues",
        action="append",
        default=[],
        metavar="QUEUE",
        help="also check the workers of this task queue (repeatable; always: the default queue, "
        "the global --task-queue and HITL_TASK_QUEUES)",
    )


def cmd_doctor(args: argparse.Namespace) -> int:
    """Print the report; `EXIT_FAILED` when a check fails."""
    served = [q.strip() for q in os.environ.get("HITL_TASK_QUEUES", "").split(",") if q.strip()]
    queues = [DEFAULT_TASK_QUEUE, args.task_queue, *served, *args.doctor_queues]
    queues = list(dict.fromkeys(queues))
    findings = asyncio.run(diagnose(args.profile, args.address, args.namespace, queues))
    for finding in findings:
        print(finding.line())
    fails = sum(f.level == "fail" for f in findings)
    warns = sum(f.level == "warn" for f in findings)
    print(f"{fails} failed, {warns} warning(s), {len(findings) - fails - warns} ok")
    return EXIT_FAILED if fails else EXIT_OK


async def diagnose(
    profile: str | None, address: str | None, namespace: str | None, queues: list[str]
) -> list[Finding]:
    """Every check, in the order printed."""
    client, found = await _server(profile, address, namespace)
    findings = [found]
    if client is not None:
        findings += await _search_attributes(client)
        for queue in queues:
            findings += await _pollers(client, queue)
    keys = _local_encryption(findings)
    if client is not None:
        findings += await _runs_encryption(client, keys)
    findings.append(_storage())
    findings.append(_ledger_key())
    findings += _signing()
    return findings


# --------------------------------------------------------------------------- the server


async def _server(
    profile: str | None, address: str | None, namespace: str | None
) -> tuple[Client | None, Finding]:
    from hitl.client import check_namespace, connect_config, connect_timeout, explain_connect_error

    try:
        config = connect_config(profile=profile, address=address, namespace=namespace)
    except UserError as exc:
        return None, Finding("fail", "server", exc.message, "fix the envconfig profile")
    target, ns = str(config["target_host"]), str(config["namespace"])
    skipped = "; search attributes, workers and runs not checked"
    try:
        # No data converter: the report reads raw protos, and a bad HITL_ENCRYPTION_KEY or
        # HITL_STORAGE is reported below instead of hiding the server.
        client = await asyncio.wait_for(Client.connect(**config), connect_timeout())
    except TimeoutError:
        fix = "check TEMPORAL_ADDRESS (host:port of the gRPC frontend) and firewalls"
        return None, Finding("fail", "server", f"no answer from {target}{skipped}", fix)
    except Exception as exc:
        why = explain_connect_error(exc, target, config)
        return None, Finding("fail", "server", f"cannot connect to {target}: {why}{skipped}")
    try:
        await asyncio.wait_for(check_namespace(client), connect_timeout())
    except (UserError, TimeoutError) as exc:
        text = exc.message if isinstance(exc, UserError) else f"{ns!r} not described in time"
        return None, Finding("fail", "server", f"{text}{skipped}")
    try:
        info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
        version = info.server_version or "version not reported"
    except RPCError as exc:
        version = f"version unknown ({exc.status.name})"
    return client, Finding("ok", "server", f"Temporal {version} at {target}, namespace {ns!r}")


# --------------------------------------------------------------------------- search attributes


async def _search_attributes(client: Client) -> list[Finding]:
    from hitl.admin import registered_search_attributes, search_attribute_type

    have = await registered_search_attributes(client)
    if have is None:
        return [Finding("warn", "search attribute", "the server does not list them")]
    found = []
    for name, kind in SEARCH_ATTRIBUTES.items():
        core = name in CORE_SEARCH_ATTRIBUTES
        if have.get(name) == search_attribute_type(kind):
            found.append(Finding("ok", "search attribute", f"{name} ({kind})"))
        elif name not in have:
            # Runs keep the attributes the namespace has and leave out the missing ones (runs
            # recorded by an earlier release skip all of them while one core attribute is).
            effect = (
                "no run can be listed by it (the inbox lists runs by it)"
                if name == SA_STATUS
                else "no run can be listed by it"
            )
            level: Level = "fail" if core else "warn"
            text = f"{name} ({kind}) is missing: {effect}"
            found.append(Finding(level, "search attribute", text, "hitl setup"))
        else:
            registered = IndexedValueType.Name(IndexedValueType.ValueType(have[name]))
            registered = registered.removeprefix("INDEXED_VALUE_TYPE_")
            found.append(
                Finding(
                    "fail" if core else "warn",
                    "search attribute",
                    f"{name} is registered as {registered}, runs need {kind}",
                    f"temporal operator search-attribute remove --name {name}, then hitl setup",
                )
            )
    return found


# --------------------------------------------------------------------------- workers


async def _pollers(client: Client, queue: str) -> list[Finding]:
    from hitl.serving import POLLER_FRESH_SECONDS

    counts = {}
    for kind, queue_type in (
        ("workflows", TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW),
        ("activities", TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY),
    ):
        try:
            resp = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=client.namespace,
                    task_queue=TaskQueue(name=queue),
                    task_queue_type=queue_type,
                )
            )
        except RPCError as exc:
            return [Finding("warn", "workers", f"queue {queue!r}: {one_line(exc.message)}")]
        now = time.time()
        counts[kind] = sum(
            1
            for p in resp.pollers
            if not p.HasField("last_access_time")
            or now - p.last_access_time.ToSeconds() < POLLER_FRESH_SECONDS
        )
    wf, act = counts["workflows"], counts["activities"]
    text = f"queue {queue!r}: {wf} workflow poller(s), {act} activity poller(s)"
    start = f"python -m hitl.worker --agents MODULE:ATTR --task-queue {queue}"
    if not wf and not act:
        return [Finding("warn", "workers", f"queue {queue!r}: no worker; runs there wait", start)]
    if not act:
        return [Finding("warn", "workers", f"{text}: model calls and tools wait", start)]
    if not wf:
        # An activities-only worker (tool_task_queue, model_task_queue): fine on its own queue.
        return [Finding("ok", "workers", f"{text} (activities only)")]
    return [Finding("ok", "workers", text)]


# --------------------------------------------------------------------------- encryption


def _local_encryption(findings: list[Finding]) -> set[str] | None:
    """Check HITL_ENCRYPTION_KEY; the key ids it holds (`None`: unset or unusable)."""
    from hitl.codec import KEY_ENV, EncryptionCodec, parse_keys

    spec = os.environ.get(KEY_ENV, "").strip()
    if not spec:
        findings.append(
            Finding("ok", "encryption", f"{KEY_ENV} not set here: payloads are stored as sent")
        )
        return None
    try:
        active, keys = parse_keys(spec)
        EncryptionCodec(active, keys)
    except UserError as exc:
        findings.append(
            Finding("fail", "encryption", exc.message, "a new key: python -m hitl.codec")
        )
        return None
    findings.append(
        Finding("ok", "encryption", f"{KEY_ENV}: {len(keys)} key(s), encrypting with {active!r}")
    )
    return set(keys)


async def _runs_encryption(client: Client, local: set[str] | None) -> list[Finding]:
    """How recent runs' first payloads are encrypted, against this machine's keys."""
    try:
        kids, plain = await _sampled_encryption(client)
    except RPCError as exc:
        return [Finding("warn", "encryption", f"cannot read recent runs: {exc.message}")]
    except IndexError:
        return []
    if not kids and not plain:
        return []
    return [_encryption_verdict(kids, plain, local)]


async def _sampled_encryption(client: Client) -> tuple[set[str], int]:
    """The key ids the latest runs' first payloads were encrypted with, and how many were not.

    `RPCError` when the server cannot say; `IndexError` for a run without history.
    """
    from hitl.codec import ENCODING

    listing = await client.workflow_service.list_workflow_executions(
        ListWorkflowExecutionsRequest(
            namespace=client.namespace,
            page_size=RUNS_SAMPLED,
            query=f"WorkflowType = '{WORKFLOW_TYPE}'",
        )
    )
    kids: set[str] = set()
    plain = 0
    for run in listing.executions[:RUNS_SAMPLED]:
        history = await client.workflow_service.get_workflow_execution_history(
            GetWorkflowExecutionHistoryRequest(
                namespace=client.namespace, execution=run.execution, maximum_page_size=1
            )
        )
        started = history.history.events[0].workflow_execution_started_event_attributes
        for payload in started.input.payloads[:1]:
            if payload.metadata.get("encoding") == ENCODING:
                kid = payload.metadata.get("encryption-key-id", b"")
                kids.add(kid.decode("utf-8", "replace"))
            else:
                plain += 1
    return kids, plain


def _encryption_verdict(kids: set[str], plain: int, local: set[str] | None) -> Finding:
    """Whether this machine (its key ids: `local`) can read runs encrypted with `kids`.

    `plain`: how many of the sampled runs were not encrypted.
    """
    from hitl.codec import KEY_ENV

    sampled = f"of the {RUNS_SAMPLED} latest runs"
    shown = ", ".join(repr(k) for k in sorted(kids))
    if kids and local is None:
        return Finding(
            "fail",
            "encryption",
            f"runs are encrypted (key {shown}) and {KEY_ENV} is not set here: this machine "
            "cannot read or decide them",
            f"set {KEY_ENV} to the workers' keys",
        )
    if kids - (local or set()):
        unknown = ", ".join(repr(k) for k in sorted(kids - (local or set())))
        return Finding(
            "fail",
            "encryption",
            f"runs are encrypted with key {unknown}, which {KEY_ENV} here lacks",
            f"add it to {KEY_ENV} (kid:base64key, comma-separated; the first encrypts)",
        )
    if plain and local is not None:
        return Finding(
            "warn",
            "encryption",
            f"{plain} {sampled} are not encrypted: their workers run without {KEY_ENV}",
            f"set {KEY_ENV} on every worker and client",
        )
    how = f"encrypted with {shown}" if kids else "not encrypted"
    return Finding("ok", "encryption", f"the latest runs are {how}")


# --------------------------------------------------------------------------- storage


def _storage() -> Finding:
    from hitl.storage import store_from_url

    url = os.environ.get("HITL_STORAGE", "").strip()
    if not url:
        return Finding("ok", "blob store", "HITL_STORAGE not set here: payloads stay in history")
    try:
        store_from_url(url)
    except UserError as exc:
        return Finding("fail", "blob store", exc.message)
    return Finding("ok", "blob store", f"HITL_STORAGE: {url}")


def _ledger_key() -> Finding:
    """`HITL_LEDGER_KEY`: what makes a limit's reservations releasable only by its run."""
    from hitl.ledger import KEY_ENV, LimitLedgerError, key_from_env

    try:
        key = key_from_env()
    except LimitLedgerError as exc:
        return Finding("fail", "ledger key", str(exc), f"set {KEY_ENV} to a longer secret")
    if key is None:
        text = (
            f"{KEY_ENV} not set here: anyone who can read a run's history can release its "
            "held limit reservations (workers serve limit ledgers either way)"
        )
        return Finding("ok", "ledger key", text)
    return Finding("ok", "ledger key", f"{KEY_ENV} set: reservations are released by claim")


# --------------------------------------------------------------------------- signing


def _signing() -> list[Finding]:
    """The approver directory (`HITL_APPROVERS`), then the signing key (`HITL_SIGNING_KEY`)."""
    findings, directory = _approvers()
    return [*findings, _signing_key(directory)]


def _approvers() -> tuple[list[Finding], ApproverDirectory | None]:
    """What `HITL_APPROVERS` gives: its finding, and the directory (`None`: unset, unusable)."""
    from hitl.signing import directory_from_env, signing_available

    extra = "pip install 'hitl-temporal[encryption]'"
    approvers_file = os.environ.get("HITL_APPROVERS")
    if not approvers_file:
        text = "HITL_APPROVERS not set here: decisions are not verified"
        return [Finding("ok", "approvers", text)], None
    try:
        directory = directory_from_env()
    except UserError as exc:
        fix = "point HITL_APPROVERS at the JSON file of approvers (see `hitl keys new`)"
        return [Finding("fail", "approvers", exc.message, fix)], None
    if directory is None:
        return [], None
    entries = directory.approvers
    keys = sum(len(e.keys) for e in entries.values())
    gateways = sorted(name for name, e in entries.items() if e.gateway)
    via = f"; gateway(s): {', '.join(gateways)}" if gateways else ""
    text = f"{approvers_file}: {len(entries)} approver(s), {keys} key(s){via}"
    if signing_available():
        return [Finding("ok", "approvers", text)], directory
    return [Finding("fail", "approvers", f"{text}; signatures cannot be checked", extra)], directory


def _signing_key(directory: ApproverDirectory | None) -> Finding:
    """Whether `HITL_SIGNING_KEY` is readable, and whose key `directory` says it is."""
    from hitl.signing import public_key_b64, signing_key_from_env

    key_file = os.environ.get("HITL_SIGNING_KEY")
    if not key_file:
        return Finding("ok", "signing key", "HITL_SIGNING_KEY not set here: decisions go unsigned")
    try:
        loaded = signing_key_from_env()
    except UserError as exc:
        fix = "point HITL_SIGNING_KEY at your PEM key (`hitl keys new` makes one)"
        return Finding("fail", "signing key", exc.message, fix)
    assert loaded is not None
    kid, key = loaded
    public = public_key_b64(key)
    if directory is None:
        return Finding(
            "ok", "signing key", f"{key_file}: key {kid!r} (no directory here to name it)"
        )
    # Signatures name their key id: the directory must list this public key under it.
    owners = [name for name, e in directory.approvers.items() if e.keys.get(kid) == public]
    if owners:
        return Finding("ok", "signing key", f"{key_file}: key {kid!r} of {owners[0]!r}")
    approvers_file = os.environ.get("HITL_APPROVERS")
    return Finding(
        "fail",
        "signing key",
        f"{key_file}: key {kid!r} is not in {approvers_file}: workers refuse what it signs",
        f"add the entry `hitl keys show {key_file}` prints to the directory",
    )
