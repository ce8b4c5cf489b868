"""The `hitl` CLI with governance: calls that need several approvers (dev server)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import Client

from hitl.wire import RunOutput
from hitl.worker.devserver import DevServer
from tests.e2e.cli_support import hitl, start, start_worker
from tests.helpers import Ledger, WorkerProcess, queue_name, wait_for


@pytest.fixture(scope="module")
def stack(dev_server: DevServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    tmp = tmp_path_factory.mktemp("governance")
    (tmp / "workspace").mkdir()
    tq = queue_name("gov")
    worker = start_worker(dev_server.address, tq, tmp)
    try:
        yield dev_server.address, tq, tmp, worker
    finally:
        worker.stop()


async def test_two_people_approve_from_the_cli(
    stack: tuple[str, str, Path, WorkerProcess], dev_client: Client
) -> None:
    address, tq, tmp, _ = stack
    wid = f"{tq}-four-eyes"
    start(address, tq, "Treasury", "release 9000", wid)
    [pending] = json.loads(hitl(address, "show", wid, "--json").stdout)["status"]["pending"]
    call = pending["call_id"]
    assert (pending["required_approvals"], pending["approvals"]) == (2, [])

    first = hitl(address, "approve", wid, call, "--as", "ann")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        f"approved {call} (release_funds) on {wid} by ann",
        "  it waits for 1 more approval(s) from someone else (approved so far by ann)",
    ]
    shown = hitl(address, "show", wid)
    assert "needs 2 different approvers; approved so far by ann" in shown.stdout
    # `pending` lists runs from visibility (eventually consistent): ask until the run is there.
    await wait_for(
        lambda: "[1/2 approved]" in hitl(address, "pending", "--queue", tq).stdout,
        what="the inbox row",
    )

    twice = hitl(address, "approve", wid, call, "--as", "ann", "--reason", "sure")
    assert twice.returncode == 1 and "AlreadyDecided" in twice.stderr
    assert "ann already approved" in twice.stderr
    assert Ledger(tmp / "ledger.db").count() == 0, "nothing ran on one approval"

    second = hitl(address, "approve", wid, call, "--as", "bob")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == [
        f"approved {call} (release_funds) on {wid} by bob",
        "  approved by ann, bob",
    ]
    out = await dev_client.get_workflow_handle(wid, result_type=RunOutput).result()
    assert out.final_output == "Released $9000"
    assert Ledger(tmp / "ledger.db").count("release_funds") == 1


@pytest.mark.timeout(180)  # a dozen `hitl` processes: 54 s in the suite on 2 cores, >60 s at -n 3
async def test_audit_lists_decisions_and_refusals_across_runs(
    stack: tuple[str, str, Path, WorkerProcess], dev_client: Client
) -> None:
    address, tq, _, worker = stack
    paid, stopped = f"{tq}-audit-paid", f"{tq}-audit-stopped"
    start(address, tq, "Treasury", "release 100", paid)
    start(address, tq, "Treasury", "release 200", stopped)
    calls = {}
    for wid in (paid, stopped):
        [pending] = json.loads(hitl(address, "show", wid, "--json").stdout)["status"]["pending"]
        calls[wid] = pending["call_id"]
    for who in ("ann", "bob"):
        assert hitl(address, "approve", paid, calls[paid], "--as", who).returncode == 0
    # Refused: an approver not on the list (an update: no history, a worker log line) and a
    # signal for an unknown call (kept by the run).
    outsider = hitl(address, "approve", stopped, calls[stopped], "--as", "mallory")
    assert outsider.returncode == 1 and "NotAuthorized" in outsider.stderr
    handle = dev_client.get_workflow_handle(stopped, result_type=RunOutput)
    await handle.signal("approve", {"call_id": "nope", "approver": "eve"})
    rejected = hitl(address, "reject", stopped, calls[stopped], "--as", "cy", "--message", "No.")
    assert rejected.returncode == 0, rejected.stderr
    await handle.result()

    one = hitl(address, "audit", paid)
    assert one.returncode == 0, one.stderr
    [row] = [json.loads(line) for line in one.stdout.splitlines()]
    assert (row["event"], row["kind"], row["approver"], row["approvals"]) == (
        "decision",
        "approve",
        "bob",
        ["ann", "bob"],
    )

    rows: list[dict[str, str]] = []
    across = None

    async def listed() -> bool:  # runs are listed from visibility (eventually consistent)
        nonlocal rows, across
        # --queue: only this module's runs (the session's server holds every test's).
        across = hitl(
            address, "audit", "--since", "1h", "--agent", "Treasury", "--queue", tq, "--csv"
        )
        assert across.returncode == 0, across.stderr
        found = csv.DictReader(io.StringIO(across.stdout))
        rows = [r for r in found if r["run"] in (paid, stopped)]
        return {r["run"] for r in rows} == {paid, stopped}

    await wait_for(listed, what="both runs in the audit")
    assert [(r["run"], r["event"], r["kind"], r["approver"] or r["error_type"]) for r in rows] == [
        (paid, "decision", "approve", "bob"),
        (stopped, "refused", "approve", "eve"),  # whom the refused signal named
        (stopped, "decision", "reject", "cy"),
    ]
    assert (rows[1]["call_id"], rows[1]["error_type"]) == ("nope", "UnknownCall")
    assert rows[0]["approvals"] == "ann bob"
    assert any("refused approve update: NotAuthorized" in line for line in worker.output)
    usage = hitl(address, "audit", "--since", "soon")
    assert usage.returncode == 2 and "is not a span" in usage.stderr
    # A limit that cuts the list says so (the server lists running runs before closed ones).
    cut = hitl(address, "audit", "--since", "1h", "--queue", tq, "--limit", "1")
    assert cut.returncode == 0 and "more than 1 runs started within 1h" in cut.stderr
    assert across is not None and "more than" not in across.stderr
    elsewhere = hitl(address, "audit", "--since", "1h", "--queue", f"{tq}-elsewhere")
    assert elsewhere.returncode == 0 and paid not in elsewhere.stdout, "another queue's runs only"
    # A queue name that tries to widen the query is one literal: it matches no run of ours.
    widened = hitl(address, "audit", "--since", "1h", "--queue", f"{tq}' OR TaskQueue != '")
    assert widened.returncode == 0 and paid not in widened.stdout, widened.stderr


async def test_a_deadline_is_extended_from_the_cli(
    stack: tuple[str, str, Path, WorkerProcess], dev_client: Client
) -> None:
    address, tq, _, _ = stack
    wid = f"{tq}-extend"
    start(address, tq, "Treasury", "release 300", wid)
    [pending] = json.loads(hitl(address, "show", wid, "--json").stdout)["status"]["pending"]
    call, first = pending["call_id"], datetime.fromisoformat(pending["deadline"])

    moved = hitl(address, "extend", wid, call, "2d", "--as", "ann", "--reason", "invoice due")
    assert moved.returncode == 0, moved.stderr
    later = first + timedelta(days=2)
    assert moved.stdout.strip() == (
        f"extended {call} on {wid} by ann: it now waits until {later.isoformat()} "
        f"(was {first.isoformat()})"
    )
    shown = hitl(address, "show", wid).stdout
    assert f"decide before {later.isoformat()}" in shown
    assert f"deadline moved from {first.isoformat()} by ann" in shown

    outsider = hitl(address, "extend", wid, call, "1h", "--as", "mallory")
    assert outsider.returncode == 1 and "NotAuthorized" in outsider.stderr
    assert hitl(address, "extend", wid, call, "soon").returncode == 2
    await dev_client.get_workflow_handle(wid).terminate("test over")


def hitl_signed(key: Path, address: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The `hitl` CLI with `HITL_SIGNING_KEY` set: it signs its decisions."""
    return subprocess.run(
        [sys.executable, "-m", "hitl.cli", "--address", address, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HITL_SIGNING_KEY": str(key)},
    )


async def test_signed_decisions_from_the_cli(
    dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    """`hitl keys new`, the worker's directory, an unsigned approval refused, a signed edit
    taken, and the audit saying who (verified) and through what."""
    address = dev_server.address
    made = hitl(
        address,
        "keys",
        "new",
        "--approver",
        "ann",
        "--groups",
        "finance",
        "--out",
        str(tmp_path / "ann.key"),
    )
    assert made.returncode == 0, made.stderr
    entry = json.loads(made.stdout[: made.stdout.rindex("}") + 1])
    (tmp_path / "approvers.json").write_text(json.dumps(entry))
    tq = queue_name("signed")
    env = {
        "HITL_APPROVERS": str(tmp_path / "approvers.json"),
        "HITL_TEST_LEDGER": str(tmp_path / "ledger.db"),
    }
    worker = WorkerProcess(address, tq, agents="tests.agents:signed_treasury", env=env).start()
    try:
        wid = f"{tq}-pay"
        start(address, tq, "Signed treasury", "pay 500", wid)
        [pending] = json.loads(hitl(address, "show", wid, "--json").stdout)["status"]["pending"]
        call = pending["call_id"]
        unsigned = hitl(address, "approve", wid, call, "--as", "ann")
        assert unsigned.returncode == 1 and "(Unsigned)" in unsigned.stderr, unsigned.stderr
        signed = hitl_signed(
            tmp_path / "ann.key",
            address,
            "approve",
            wid,
            call,
            "--as",
            "ann",
            "--set",
            "amount=400",
            "--reason",
            "invoice says 400",
        )
        assert signed.returncode == 0, signed.stderr
        assert 'it runs with the edited arguments {"supplier":"ACME","amount":400}' in signed.stdout
        out = await dev_client.get_workflow_handle(wid, result_type=RunOutput).result()
        audit = hitl(address, "audit", wid)
    finally:
        worker.stop()
    assert "Paid ACME $400" in out.final_output
    assert Ledger(tmp_path / "ledger.db").count("pay_supplier") == 1
    [row] = [json.loads(line) for line in audit.stdout.splitlines()]
    assert (row["approver"], row["verified"], row["through"]) == ("ann", True, "hitl")
    assert json.loads(row["original_arguments"])["amount"] == 500


@pytest.mark.timeout(180)  # its own worker and a dozen `hitl` processes: 42 s in the suite here
async def test_refused_updates_reach_the_audit_through_the_worker_log(
    dev_server: DevServer, tmp_path: Path
) -> None:
    """A validator's refusal leaves no history; the worker's `--audit-log` keeps it and
    `hitl audit --worker-log` shows it with the run's decisions."""
    address, tq = dev_server.address, queue_name("refusals")
    refusals = tmp_path / "refusals.jsonl"
    env = {"HITL_AUDIT_LOG": str(refusals), "HITL_TEST_LEDGER": str(tmp_path / "ledger.db")}
    worker = WorkerProcess(address, tq, agents="tests.agents:treasury_agent", env=env).start()
    try:
        wid = f"{tq}-refused"
        start(address, tq, "Treasury", "release 300", wid)
        [pending] = json.loads(hitl(address, "show", wid, "--json").stdout)["status"]["pending"]
        call = pending["call_id"]
        mallory = hitl(address, "approve", wid, call, "--as", "mallory")
        assert mallory.returncode == 1 and "(NotAuthorized)" in mallory.stderr
        await wait_for(refusals.exists, what="the worker to write the refusal")
        one = hitl(address, "audit", wid, "--worker-log", str(refusals))
        fleet = hitl(
            address, "audit", "--since", "1h", "--agent", "Treasury", "--worker-log", str(refusals)
        )
    finally:
        worker.stop()
    for out in (one, fleet):
        assert out.returncode == 0, out.stderr
        rows = [json.loads(line) for line in out.stdout.splitlines()]
        [row] = [r for r in rows if r["run"] == wid]
        assert (row["event"], row["kind"], row["error_type"], row["call_id"]) == (
            "refused",
            "approve",
            "NotAuthorized",
            call,
        )
        assert "mallory" in row["message"] and row["approver"] == "mallory"
