"""The `hitl` CLI and the Temporal CLI/UI surfaces, against the dev server with real workers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client

from hitl.wire import RunOutput
from tests.helpers import ROOT, WorkerProcess, queue_name, temporal_cli, wait_for
from worker.devserver import DevServer


def hitl(address: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the `hitl` console script."""
    return subprocess.run(
        [sys.executable, "-m", "hitl.cli", "--address", address, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def start_worker(address: str, tq: str, tmp: Path) -> WorkerProcess:
    worker = WorkerProcess(
        address,
        tq,
        agents="examples.refund_desk:agent",
        extra_args=["--agents", "examples.file_editor:agent", "--agents", "tests.agents"],
        env={
            "HITL_WORKSPACE": str(tmp / "workspace"),
            "HITL_BACKOFFICE_DB": str(tmp / "backoffice.sqlite"),
            "HITL_TEST_LEDGER": str(tmp / "ledger.db"),
        },
    )
    return worker.start()


@pytest.fixture(scope="module")
def cli_stack(
    dev_server: DevServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, Path]]:
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "workspace").mkdir()
    (tmp / "workspace" / "notes.txt").write_text("hello world\nsecond line\n")
    tq = queue_name("cli")
    worker = start_worker(dev_server.address, tq, tmp)
    try:
        yield dev_server.address, tq, tmp
    finally:
        worker.stop()


def start(address: str, tq: str, agent: str, text: str, wid: str) -> None:
    out = hitl(address, "--task-queue", tq, "run", agent, text, "--id", wid, "--wait")
    assert out.returncode == 0, out.stderr
    assert "awaiting_approval" in out.stdout


async def test_operator_flow_pending_show_approve_reject(
    cli_stack: tuple[str, str, Path], dev_client: Client
) -> None:
    address, tq, tmp = cli_stack
    refund_run, edit_run, support_run = (f"{tq}-refund", f"{tq}-edit", f"{tq}-support")
    start(
        address,
        tq,
        "Refund desk",
        "Order 1001 arrived broken: refund $250. Also cancel order 1002.",
        refund_run,
    )
    start(address, tq, "File editor", 'In notes.txt, replace "world" with "there"', edit_run)
    start(address, tq, "Support agent", "cancel order 3", support_run)

    # Visibility is eventually consistent: wait until every pending call is listed.
    listing: list[dict[str, object]] = []

    def listed() -> bool:
        nonlocal listing
        out = hitl(address, "pending", "--queue", tq, "--json")
        listing = json.loads(out.stdout) if out.returncode == 0 else []
        return len(listing) == 4

    await wait_for(listed, what="four pending approvals in `hitl pending`")
    assert sorted((e["workflow_id"], e["tool_name"]) for e in listing) == sorted(
        [
            (refund_run, "refund"),
            (refund_run, "cancel_order"),
            (edit_run, "write_file"),
            (support_run, "cancel_order"),
        ]
    )
    table = hitl(address, "pending", "--queue", tq)
    assert "Refund $250.00 to Ada Lovelace (order 1001)" in table.stdout
    assert "Edit notes.txt" in table.stdout
    only_editor = json.loads(
        hitl(address, "pending", "--queue", tq, "--agent", "File editor", "--json").stdout
    )
    assert [e["workflow_id"] for e in only_editor] == [edit_run]

    # The plain Temporal CLI finds exactly the paused runs by search attribute.
    found = temporal_cli(
        "workflow",
        "list",
        "--query",
        f"HitlStatus='awaiting_approval' AND TaskQueue='{tq}'",
        "-o",
        "json",
        address=address,
    )
    assert sorted(w["execution"]["workflowId"] for w in json.loads(found.stdout)) == sorted(
        [refund_run, edit_run, support_run]
    )

    show = hitl(address, "show", edit_run)
    assert show.returncode == 0, show.stderr
    assert "--- Diff ---" in show.stdout
    assert "-hello world" in show.stdout and "+hello there" in show.stdout
    assert "[Apply changes] hitl approve" in show.stdout

    # The Temporal UI's current details say what the run waits for and how to decide it.
    meta = await dev_client.get_workflow_handle(edit_run).query(
        "__temporal_workflow_metadata", result_type=WorkflowMetadata
    )
    assert "Waiting for approval" in meta.current_details
    assert "--name approve" in meta.current_details and "Edit notes.txt" in meta.current_details

    bad = hitl(address, "approve", edit_run, "zzz")
    assert bad.returncode == 1
    assert "unknown call id 'zzz' (UnknownCall)" in bad.stderr

    call = next(e["call_id"] for e in listing if e["workflow_id"] == edit_run)
    ok = hitl(address, "approve", edit_run, str(call), "--as", "alice")
    assert ok.returncode == 0, ok.stderr
    out = await dev_client.get_workflow_handle(edit_run, result_type=RunOutput).result()
    assert out.final_output == "Wrote 24 characters to notes.txt."
    assert (tmp / "workspace" / "notes.txt").read_text() == "hello there\nsecond line\n"
    assert [(d.approver, d.source) for d in out.decisions] == [("alice", "person")]

    cancel = next(
        e["call_id"]
        for e in listing
        if e["workflow_id"] == refund_run and e["tool_name"] == "cancel_order"
    )
    rej = hitl(address, "reject", refund_run, str(cancel), "--message", "1002 already shipped.")
    assert rej.returncode == 0, rej.stderr
    again = hitl(address, "approve", refund_run, str(cancel))
    assert again.returncode == 1 and "AlreadyDecided" in again.stderr
    rest = hitl(address, "approve", refund_run, "--all", "--always", "--as", "bob")
    assert rest.returncode == 0, rest.stderr
    out = await dev_client.get_workflow_handle(refund_run, result_type=RunOutput).result()
    assert 'cancel_order({"order_id": 1002}): 1002 already shipped.' in out.final_output
    assert "Refunded $250.00 on order 1001" in out.final_output
    assert sorted((d.tool_name, d.kind, d.always) for d in out.decisions) == [
        ("cancel_order", "reject", False),
        ("refund", "approve", True),
    ]

    # Once nothing waits, the search attributes say so.
    def settled() -> bool:
        found = temporal_cli(
            "workflow",
            "list",
            "--query",
            f"HitlStatus='awaiting_approval' AND TaskQueue='{tq}'",
            "-o",
            "json",
            address=address,
        )
        return [w["execution"]["workflowId"] for w in json.loads(found.stdout or "[]")] == [
            support_run
        ]

    await wait_for(settled, what="only the support run to remain awaiting approval")
    done = temporal_cli(
        "workflow",
        "list",
        "--query",
        f"HitlStatus='completed' AND TaskQueue='{tq}'",
        "-o",
        "json",
        address=address,
    )
    assert sorted(w["execution"]["workflowId"] for w in json.loads(done.stdout)) == sorted(
        [refund_run, edit_run]
    )


async def test_approving_while_no_worker_runs(
    dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    address = dev_server.address
    tq = queue_name("noworker")
    wid = f"{tq}-run"
    worker = start_worker(address, tq, tmp_path)
    try:
        start(address, tq, "Support agent", "cancel order 9", wid)
        status = json.loads(hitl(address, "show", wid, "--json").stdout)["status"]
        call = status["pending"][0]["call_id"]
    finally:
        worker.kill()
    # The inbox by run reads search attributes only, so it works while no worker runs.
    runs: list[dict[str, object]] = []

    def listed() -> bool:
        nonlocal runs
        out = hitl(address, "pending", "--runs", "--queue", tq, "--json")
        runs = json.loads(out.stdout) if out.returncode == 0 else []
        return len(runs) == 1

    await wait_for(listed, what="the paused run in `hitl pending --runs`")
    assert runs[0]["workflow_id"] == wid and runs[0]["agent"] == "Support agent"
    assert runs[0]["pending_tools"] == ["cancel_order"] and runs[0]["pending_since"]
    table = hitl(address, "pending", "--runs", "--queue", tq)
    assert table.returncode == 0 and wid in table.stdout and "cancel_order" in table.stdout
    waited = hitl(address, "approve", wid, call, "--as", "carol", "--timeout", "2")
    assert waited.returncode == 1
    assert "the decision is queued on the server and applies when a worker runs" in waited.stderr
    worker = start_worker(address, tq, tmp_path)
    try:
        retry = hitl(address, "approve", wid, call, "--as", "carol", "--timeout", "30")
        assert retry.returncode == 0, retry.stderr
        out = await dev_client.get_workflow_handle(wid, result_type=RunOutput).result()
    finally:
        worker.stop()
    assert out.final_output == "cancel_order: Cancelled order 9"
    assert [(d.approver, d.kind) for d in out.decisions] == [("carol", "approve")]
    hist = await dev_client.get_workflow_handle(wid).fetch_history()
    accepted = [
        e
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        and e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        == "approve"
    ]
    assert len(accepted) == 1, "the retried command attached to the queued decision"


def test_usage_errors_exit_2(dev_server: DevServer) -> None:
    both = hitl(dev_server.address, "approve", "some-run", "call_1", "--all")
    assert both.returncode == 2 and "CALL_ID or --all" in both.stderr
    unknown = hitl(dev_server.address, "frobnicate")
    assert unknown.returncode == 2


def test_show_unknown_run_exits_1(dev_server: DevServer) -> None:
    out = hitl(dev_server.address, "show", "no-such-run-xyz")
    assert out.returncode == 1 and "no run 'no-such-run-xyz'" in out.stderr


async def test_watch_follows_a_run_through_its_pause(
    cli_stack: tuple[str, str, Path], dev_client: Client
) -> None:
    import asyncio

    address, tq, _ = cli_stack
    wid = f"{tq}-watched"
    start(address, tq, "Support agent", "cancel order 12", wid)
    watcher = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hitl.cli",
        "--address",
        address,
        "watch",
        wid,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert watcher.stdout is not None
    lines: list[str] = []
    while not any("WAITING FOR APPROVAL cancel_order" in line for line in lines):
        line = (await asyncio.wait_for(watcher.stdout.readline(), 30)).decode()
        assert line, "watch ended before the pause"
        lines.append(line)
    status = json.loads(hitl(address, "show", wid, "--json").stdout)["status"]
    ok = hitl(address, "approve", wid, status["pending"][0]["call_id"], "--as", "erin")
    assert ok.returncode == 0, ok.stderr
    rest, _ = await asyncio.wait_for(watcher.communicate(), 30)
    lines += rest.decode().splitlines()
    assert watcher.returncode == 0
    text = "\n".join(lines)
    assert "approve cancel_order" in text and "by erin" in text
    assert lines[-1].endswith("final output: cancel_order: Cancelled order 12")


def test_setup_registers_the_search_attributes_on_a_bare_cluster(tmp_path: Path) -> None:
    bare = DevServer(search_attributes={}, log_file=tmp_path / "bare.log").start()
    try:
        before = temporal_cli(
            "operator", "search-attribute", "list", "-o", "json", address=bare.address
        )
        assert "HitlStatus" not in before.stdout
        first = hitl(bare.address, "setup")
        assert first.returncode == 0, first.stderr
        assert (
            "registered HitlStatus, HitlPendingTools, HitlAgent, HitlPendingSince" in first.stdout
        )
        again = hitl(bare.address, "setup")
        assert again.returncode == 0 and "already registered" in again.stdout
        after = temporal_cli(
            "operator", "search-attribute", "list", "-o", "json", address=bare.address
        )
    finally:
        bare.stop()
    listed = json.loads(after.stdout)["customAttributes"]
    assert listed["HitlStatus"] == "INDEXED_VALUE_TYPE_KEYWORD"
    assert listed["HitlPendingTools"] == "INDEXED_VALUE_TYPE_KEYWORD_LIST"
    assert listed["HitlPendingSince"] == "INDEXED_VALUE_TYPE_DATETIME"
