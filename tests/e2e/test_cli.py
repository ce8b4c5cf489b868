"""The `hitl` CLI and the Temporal CLI/UI surfaces, against the dev server with real workers."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from hitl.wire import (
    SA_AGENT,
    SA_PENDING_SINCE,
    SA_PENDING_TOOLS,
    SA_STATUS,
    WORKFLOW_TYPE,
    RunInput,
    RunOutput,
)
from hitl.worker.devserver import DevServer, free_port, port_free
from tests.e2e.cli_support import hitl, pending_json, start, start_worker, timed
from tests.helpers import (
    ROOT,
    Ledger,
    process_alive,
    queue_name,
    signed_as,
    temporal_cli,
    wait_for,
)


@pytest.mark.timeout(120)  # a dozen `hitl` processes: near a minute on a loaded 2-core box
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

    listing = await pending_json(
        address,
        "--queue",
        tq,
        until=lambda rows: len(rows) == 4,
        what="four pending approvals in `hitl pending`",
    )
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
    # --limit lists the newest-started runs, and says that more match.
    cut = hitl(address, "pending", "--queue", tq, "--limit", "2", "--json")
    assert {e["workflow_id"] for e in json.loads(cut.stdout)} == {edit_run, support_run}
    assert "more than 2 paused runs match" in cut.stderr
    assert "paused runs match" not in table.stderr

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
    assert "named `approve`" in meta.current_details and "Edit notes.txt" in meta.current_details

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
    # The refund takes only signed decisions from finance: bob's own key.
    unsigned = hitl(address, "approve", refund_run, "--all", "--as", "bob")
    assert unsigned.returncode == 1 and "(Unsigned)" in unsigned.stderr
    rest = hitl(
        address,
        "approve",
        refund_run,
        "--all",
        "--always",
        "--as",
        "bob",
        env=signed_as(tmp, "bob"),
    )
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
    runs = await pending_json(
        address,
        "--runs",
        "--queue",
        tq,
        until=lambda rows: len(rows) == 1,
        what="the paused run in `hitl pending --runs`",
    )
    assert runs[0]["workflow_id"] == wid and runs[0]["agent"] == "Support agent"
    assert runs[0]["pending_tools"] == ["cancel_order"] and runs[0]["pending_since"]
    table = hitl(address, "pending", "--runs", "--queue", tq)
    assert table.returncode == 0 and wid in table.stdout and "cancel_order" in table.stdout
    waited = hitl(address, "approve", wid, call, "--as", "carol", "--timeout", "2")
    assert waited.returncode == 1
    assert "the decision is queued on the server, which holds it in memory" in waited.stderr
    assert "It can still apply until" not in waited.stderr, "this call has no deadline"

    # The queued decision applies by itself once a worker returns: nothing is sent again.
    handle = dev_client.get_workflow_handle(wid, result_type=RunOutput)
    worker = start_worker(address, tq, tmp_path)
    try:
        out = await handle.result()
    finally:
        worker.stop()
    assert out.final_output == "cancel_order: Cancelled order 9"
    assert [(d.approver, d.kind, d.always) for d in out.decisions] == [("carol", "approve", False)]
    assert [json.loads(r[2]) for r in Ledger(tmp_path / "ledger.db").rows("cancel_order")] == [
        {"order_id": 9}
    ]

    # Only now the operator re-runs the same command: it reports the real, recorded outcome.
    retry = hitl(address, "approve", wid, call, "--as", "carol", "--timeout", "30")
    assert retry.returncode == 0, retry.stderr
    assert retry.stdout.strip() == f"approved {call} (cancel_order) on {wid} by carol"
    hist = await handle.fetch_history()
    accepted = [
        e
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        and e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        == "approve"
    ]
    assert len(accepted) == 1, "the queued decision and the retry are one update"


def test_run_wait_with_no_worker_says_the_run_waits_for_one(dev_server: DevServer) -> None:
    """Once `hitl run --wait` with no worker said "the decision is queued" (no decision was
    made): it says the run is stored and nothing ran, and how to start a worker."""
    tq, wid = queue_name("nobody"), queue_name("run")
    out = hitl(dev_server.address, "--task-queue", tq, "run", "Support agent", "cancel order 5",
               "--id", wid, "--wait", "--timeout", "2")  # fmt: skip
    assert out.returncode == 1 and f"started {wid}" in out.stdout
    assert "no worker is polling task queue" in out.stderr and "nothing has run yet" in out.stderr
    assert f"--task-queue {tq}" in out.stderr and "decision" not in out.stderr


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


# ----------------------------------------------------------------------------- no worker


async def _listed_by_visibility(address: str, tq: str, wid: str) -> None:
    await pending_json(
        address,
        "--runs",
        "--queue",
        tq,
        until=lambda rows: [r["workflow_id"] for r in rows] == [wid],
        what=f"{wid} in the visibility store",
    )


@pytest.mark.timeout(180)  # a worker start and eight `hitl` processes: 31 s in the suite here
async def test_pending_show_and_approve_all_say_when_no_worker_answers(
    dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    address = dev_server.address
    tq = queue_name("gone")
    wid = f"{tq}-run"
    worker = start_worker(address, tq, tmp_path)
    try:
        start(address, tq, "Support agent", "cancel order 21", wid)
    finally:
        worker.kill()
    await _listed_by_visibility(address, tq, wid)

    # A paused run keeps its pending calls in its memo: listed with no worker, no query, no wait.
    out, took = timed(address, "pending", "--queue", tq, "--json", "--timeout", "2")
    assert out.returncode == 0, out.stderr
    [row] = json.loads(out.stdout)
    assert (row["workflow_id"], row["agent"], row["tool_name"], row["unavailable"]) == (
        wid,
        "Support agent",
        "cancel_order",
        None,
    )
    assert row["call_id"] == "t1.1" and row["requested_at"]
    assert "note:" not in out.stderr
    table = hitl(address, "pending", "--queue", tq, "--timeout", "2")
    assert table.returncode == 0, table.stderr
    [line] = [ln for ln in table.stdout.splitlines() if ln.startswith(wid)]
    assert row["call_id"] in line and "Support agent > cancel_order" in line
    # What needs the run itself (its transcript, its calls' arguments) says why it cannot.
    unanswered = rf"no worker (answered within 2s on|is polling) task queue '{tq}'"
    show, took = timed(address, "show", wid, "--timeout", "2")
    assert show.returncode == 1 and took < 20
    assert re.search(f"cannot read run {wid}: " + unanswered, show.stderr)
    every, took = timed(address, "approve", wid, "--all", "--timeout", "2")
    assert every.returncode == 1 and took < 20
    assert re.search(unanswered, every.stderr) and "name a CALL_ID" in every.stderr

    # A queue no worker ever polled: nothing is asked, so nothing is waited for. (A run that
    # paused and whose worker is gone for good looks the same to the visibility store.)
    never = queue_name("never")
    ghost = await dev_client.start_workflow(
        WORKFLOW_TYPE,
        RunInput(agent="Support agent", input="cancel order 22"),
        id=f"{never}-run",
        task_queue=never,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(SearchAttributeKey.for_keyword(SA_STATUS), "awaiting_approval"),
                SearchAttributePair(SearchAttributeKey.for_keyword(SA_AGENT), "Support agent"),
                SearchAttributePair(
                    SearchAttributeKey.for_keyword_list(SA_PENDING_TOOLS), ["cancel_order"]
                ),
                SearchAttributePair(
                    SearchAttributeKey.for_datetime(SA_PENDING_SINCE), datetime.now(UTC)
                ),
            ]
        ),
    )
    try:
        await _listed_by_visibility(address, never, ghost.id)
        polling = f"no worker is polling task queue '{never}'"
        out, took = timed(address, "pending", "--queue", never, "--json", "--timeout", "45")
        assert out.returncode == 0, out.stderr
        assert took < 20, "no query was sent, so none was waited for"
        assert [(r["workflow_id"], r["unavailable"]) for r in json.loads(out.stdout)] == [
            (ghost.id, polling)
        ]
        assert f"note: 1 run(s) could not be asked for their calls: {polling}" in out.stderr
        table = hitl(address, "pending", "--queue", never, "--timeout", "45")
        [line] = [ln for ln in table.stdout.splitlines() if ln.startswith(ghost.id)]
        assert "(unavailable)" in line and "Support agent > cancel_order" in line
        show, took = timed(address, "show", ghost.id, "--timeout", "45")
        assert show.returncode == 1 and took < 20
        assert f"hitl: cannot read run {ghost.id}: {polling}" in show.stderr
        every, took = timed(address, "approve", ghost.id, "--all", "--timeout", "45")
        assert every.returncode == 1 and took < 20 and polling in every.stderr
    finally:
        await ghost.terminate()
        await dev_client.get_workflow_handle(wid).terminate()


# ----------------------------------------------------------------------------- nested runs


async def test_nested_calls_show_their_path_and_are_decided_at_the_root(
    cli_stack: tuple[str, str, Path], dev_client: Client
) -> None:
    address, tq, tmp = cli_stack
    wid = f"{tq}-nested"
    start(address, tq, "CLI desk", "tides", wid)
    rows = await pending_json(
        address,
        "--queue",
        tq,
        "--agent",
        "CLI desk",
        until=lambda rows: [r["workflow_id"] for r in rows] == [wid],
        what="the nested call in `hitl pending`",
    )
    [row] = rows
    assert (row["tool_name"], row["path"]) == ("lookup", ["CLI desk", "research", "CLI looker"])
    call = str(row["call_id"])
    research_call, nested_call = call.split("/")
    assert row["owner_workflow_id"] == f"{wid}--{research_call}"

    table = hitl(address, "pending", "--queue", tq, "--agent", "CLI desk")
    assert table.returncode == 0, table.stderr
    [line] = [ln for ln in table.stdout.splitlines() if ln.startswith(wid)]
    assert call in line and "CLI desk > research > CLI looker > lookup" in line

    show = hitl(address, "show", wid)
    assert show.returncode == 0, show.stderr
    assert f"call {call}, path CLI desk > research > CLI looker > lookup" in show.stdout
    assert f"in nested run {wid}--{research_call}" in show.stdout
    assert f"hitl approve {wid} {call}" in show.stdout

    ledger = Ledger(tmp / "ledger.db")
    assert ledger.count("lookup") == 0
    ok = hitl(address, "approve", wid, f"{research_call}/{nested_call}", "--as", "dana")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == f"approved {call} (lookup) on {wid} by dana"
    out = await dev_client.get_workflow_handle(wid, result_type=RunOutput).result()
    assert out.final_output == "summary: facts about tides"
    assert [json.loads(r[2]) for r in ledger.rows("lookup")] == [{"topic": "tides"}]
    child = await dev_client.get_workflow_handle(
        f"{wid}--{research_call}", result_type=RunOutput
    ).result()
    assert [(d.call_id, d.approver, d.via) for d in child.decisions] == [
        (nested_call, "dana", "root")
    ]


# ----------------------------------------------------------------------------- hitl dev


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


_alive = process_alive


def test_hitl_dev_runs_the_stack_and_ctrl_c_stops_all_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hitl.codec import KEY_ENV, new_key

    monkeypatch.setenv(KEY_ENV, new_key())  # encrypted: the UI decodes through a codec server
    port, ui_port, console_port = free_port(), free_port(), free_port()
    tq = queue_name("dev")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hitl.cli",
            "--task-queue",
            tq,
            "dev",
            "--agents",
            "tests.agents",
            "--port",
            str(port),
            "--ui-port",
            str(ui_port),
            "--state-dir",
            str(tmp_path / "state"),
            "--console-port",
            str(console_port),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal would give it
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    try:
        while not (
            any("Ctrl-C stops everything." in ln for ln in seen)
            and any("worker ready" in ln for ln in seen)
        ):
            line = lines.get(timeout=60)
            assert line is not None, "hitl dev exited early:\n" + "".join(seen)
            seen.append(line)
        assert f"Temporal dev server  127.0.0.1:{port}" in "".join(seen)
        blobs = (tmp_path / "state" / "blobs").absolute().as_uri()
        assert f"HITL_STORAGE={blobs}" in "".join(seen), "large payloads go to the state dir"
        shown = "".join(seen)
        assert f"Approval console     http://127.0.0.1:{console_port}" in shown, shown
        assert re.search(
            rf"Console sign-in      http://127.0.0.1:{console_port}/login\?token=", shown
        )
        assert re.search(r"Codec server         http://127.0.0.1:\d+", shown), shown
        children = _descendants(proc.pid)
        assert len(children) >= 3, "a dev server, a worker and the console"
        commands = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in children]
        [dev] = [c for c in commands if b"start-dev" in c]
        codec = dev[dev.index(b"--ui-codec-endpoint") + 1].decode()
        assert codec.startswith("http://127.0.0.1:") and codec in shown

        run = hitl(
            f"127.0.0.1:{port}",
            "--task-queue",
            tq,
            "run",
            "Support agent",
            "cancel order 7",
            "--wait",
        )
        assert run.returncode == 0, run.stderr
        assert "awaiting_approval: 1 pending approval(s)" in run.stdout

        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        code = proc.wait(60)
        while (line := lines.get(timeout=10)) is not None:
            seen.append(line)
        assert code == 0, "".join(seen)
        assert seen[-1].strip() == "stopped"
        assert [pid for pid in children if _alive(pid)] == []
        assert port_free(port), "nothing listens on the dev server's port any more"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
