"""The `hitl` CLI deciding calls (repeats, all, always), `run` and `watch`, what search
attributes carry, and agent names with quotes."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey

from hitl.wire import (
    SA_AGENT,
    SA_PENDING_TOOLS,
    SA_STATUS,
    RunOutput,
)
from hitl.worker.devserver import DevServer
from tests.e2e.cli_support import hitl, pending_json, start, timed
from tests.helpers import Ledger, queue_name, wait_for

# ----------------------------------------------------------------------------- decisions


async def test_a_repeated_decision_reports_what_was_recorded(
    cli_stack: tuple[str, str, Path], dev_client: Client
) -> None:
    address, tq, _ = cli_stack
    wid = f"{tq}-repeat"
    # Two calls wait, so the run stays open after the first decision.
    start(address, tq, "Support agent", "cancel order 31 and email about the refund", wid)
    pending = json.loads(hitl(address, "show", wid, "--json").stdout)["status"]["pending"]
    calls = {p["tool_name"]: p["call_id"] for p in pending}
    cancel, email = calls["cancel_order"], calls["send_email"]

    first = hitl(address, "approve", wid, cancel, "--as", "xavier", "--reason", "customer called")
    assert first.returncode == 0, first.stderr
    said = f'approved {cancel} (cancel_order) on {wid} by xavier, reason "customer called"'
    assert first.stdout.strip() == said

    # Same call, now with --always: not what was decided, so refused, with what was decided.
    differs = hitl(
        address, "approve", wid, cancel, "--as", "xavier", "--reason", "customer called", "--always"
    )
    assert differs.returncode == 1, differs.stdout
    assert "AlreadyDecided" in differs.stderr
    assert "approve by xavier" in differs.stderr and "always" not in differs.stdout

    # The exact same command again: the same update, the same recorded outcome.
    again = hitl(address, "approve", wid, cancel, "--as", "xavier", "--reason", "customer called")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == said

    handle = dev_client.get_workflow_handle(wid, result_type=RunOutput)
    hist = await handle.fetch_history()
    accepted = [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]
    # The run refused the different repeat (its validator): no trace of it in history.
    assert accepted.count("approve") == 1

    rej = hitl(address, "reject", wid, email, "--message", "No email.", "--as", "xavier")
    assert rej.returncode == 0, rej.stderr
    assert rej.stdout.strip() == (
        f'rejected {email} (send_email) on {wid} by xavier, message "No email."'
    )
    out = await handle.result()
    assert sorted((d.tool_name, d.kind, d.always, d.approver, d.reason) for d in out.decisions) == [
        ("cancel_order", "approve", False, "xavier", "customer called"),
        ("send_email", "reject", False, "xavier", None),
    ]


async def test_reject_all_rejects_every_pending_call(
    cli_stack: tuple[str, str, Path], dev_client: Client
) -> None:
    address, tq, _ = cli_stack
    wid = f"{tq}-reject-all"
    start(address, tq, "Support agent", "cancel order 32 and email about the refund", wid)
    rej = hitl(address, "reject", wid, "--all", "--message", "Not today.", "--as", "erin")
    assert rej.returncode == 0, rej.stderr
    assert len(rej.stdout.splitlines()) == 2
    out = await dev_client.get_workflow_handle(wid, result_type=RunOutput).result()
    assert sorted((d.tool_name, d.kind, d.message, d.approver) for d in out.decisions) == [
        ("cancel_order", "reject", "Not today.", "erin"),
        ("send_email", "reject", "Not today.", "erin"),
    ]
    assert out.final_output == "cancel_order: Not today.; send_email: Not today."


async def test_reject_always_rejects_the_later_calls_of_the_tool(
    cli_stack: tuple[str, str, Path], dev_client: Client
) -> None:
    address, tq, tmp = cli_stack
    wid = f"{tq}-reject-always"
    # One cancel_order per turn: the second and third come after the decision on the first.
    start(address, tq, "Serial canceller", "cancel 41 42 43", wid)
    [first] = json.loads(hitl(address, "show", wid, "--json").stdout)["status"]["pending"]
    rej = hitl(
        address, "reject", wid, first["call_id"], "--always", "--message", "No cancellations."
    )
    assert rej.returncode == 0, rej.stderr
    assert "(always, for the rest of the run)" in rej.stdout
    out = await dev_client.get_workflow_handle(wid, result_type=RunOutput).result()
    assert [(d.kind, d.source) for d in out.decisions] == [
        ("reject", "person"),
        ("reject", "always_rule"),
        ("reject", "always_rule"),
    ]
    cancelled = [
        json.loads(r[2])["order_id"] for r in Ledger(tmp / "ledger.db").rows("cancel_order")
    ]
    assert not {41, 42, 43} & set(cancelled), "no rejected cancellation ran"


async def test_approve_all_always_covers_calls_of_the_same_tool(
    cli_stack: tuple[str, str, Path], dev_client: Client
) -> None:
    address, tq, tmp = cli_stack
    wid = f"{tq}-approve-all-always"
    start(address, tq, "Bulk canceller", "cancel 45 46", wid)
    ok = hitl(address, "approve", wid, "--all", "--always", "--as", "bob")
    assert ok.returncode == 0, ok.stderr
    assert len(ok.stdout.splitlines()) == 2
    out = await dev_client.get_workflow_handle(wid, result_type=RunOutput).result()
    assert out.final_output == "Cancelled order 45 | Cancelled order 46"
    assert [d.kind for d in out.decisions] == ["approve", "approve"]
    assert ("bob", True) in [(d.approver, d.always) for d in out.decisions]
    cancelled = [
        json.loads(r[2])["order_id"] for r in Ledger(tmp / "ledger.db").rows("cancel_order")
    ]
    assert {45, 46} <= set(cancelled)


# ----------------------------------------------------------------------------- run, watch


async def test_run_without_wait_returns_at_once(dev_server: DevServer, dev_client: Client) -> None:
    tq = queue_name("nowait")  # no worker polls it: waiting for the run would never end
    wid = f"{tq}-run"
    out, took = timed(
        dev_server.address, "--task-queue", tq, "run", "Support agent", "x", "--id", wid
    )
    assert out.returncode == 0, out.stderr
    assert took < 20
    assert out.stdout.strip() == f"started {wid}"
    handle = dev_client.get_workflow_handle(wid)
    try:
        desc = await handle.describe()
        assert desc.task_queue == tq and desc.status == WorkflowExecutionStatus.RUNNING
        hist = await handle.fetch_history()
        assert EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED not in [e.event_type for e in hist.events]
    finally:
        await handle.terminate()


async def test_watch_from_an_offset_shows_nothing_before_it(
    cli_stack: tuple[str, str, Path], dev_client: Client
) -> None:
    address, tq, _ = cli_stack
    wid = f"{tq}-offsets"
    start(address, tq, "Support agent", "cancel order 14", wid)
    [p] = json.loads(hitl(address, "show", wid, "--json").stdout)["status"]["pending"]
    assert hitl(address, "approve", wid, p["call_id"], "--as", "fay").returncode == 0
    await dev_client.get_workflow_handle(wid).result()

    full = hitl(address, "watch", wid)
    assert full.returncode == 0, full.stderr
    lines = full.stdout.splitlines()
    offsets = [int(re.match(r"\[(\d+)\]", ln).group(1)) for ln in lines]  # type: ignore[union-attr]
    assert offsets == list(range(len(lines))) and len(lines) > 3
    n = next(i for i, ln in enumerate(lines) if "WAITING FOR APPROVAL" in ln)
    assert n > 0
    tail = hitl(address, "watch", wid, "--from-offset", str(n))
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.splitlines() == lines[n:]


# ----------------------------------------------------------------------------- search attributes


async def test_search_attributes_never_carry_tool_arguments(
    cli_stack: tuple[str, str, Path], dev_client: Client
) -> None:
    address, tq, _ = cli_stack
    wid = f"{tq}-canary"
    canary = f"canary-{uuid.uuid4().hex}"
    start(address, tq, "Support agent", f"email about the refund {canary}", wid)
    [p] = json.loads(hitl(address, "show", wid, "--json").stdout)["status"]["pending"]
    assert p["tool_name"] == "send_email" and canary in p["arguments"], "the canary is there"

    handle = dev_client.get_workflow_handle(wid)
    desc = await handle.describe()
    attrs = desc.typed_search_attributes
    assert attrs.get(SearchAttributeKey.for_keyword(SA_STATUS)) == "awaiting_approval"
    assert attrs.get(SearchAttributeKey.for_keyword(SA_AGENT)) == "Support agent"
    assert attrs.get(SearchAttributeKey.for_keyword_list(SA_PENDING_TOOLS)) == ["send_email"]
    assert canary not in repr([pair.value for pair in attrs])

    def indexed() -> bool:
        out = hitl(address, "pending", "--runs", "--queue", tq, "--json")
        return out.returncode == 0 and wid in [r["workflow_id"] for r in json.loads(out.stdout)]

    await wait_for(indexed, what="the canary run in the visibility store")
    [listed] = [w async for w in dev_client.list_workflows(f"WorkflowId = '{wid}'")]
    assert listed.typed_search_attributes.get(SearchAttributeKey.for_keyword(SA_STATUS)) == (
        "awaiting_approval"
    )
    assert canary not in repr([pair.value for pair in listed.typed_search_attributes])
    assert hitl(address, "reject", wid, "--all").returncode == 0


# ----------------------------------------------------------------------------- --agent quoting


async def test_agent_names_with_quotes_are_matched_exactly(
    cli_stack: tuple[str, str, Path], dev_client: Client
) -> None:
    address, tq, _ = cli_stack
    wid = f"{tq}-quoted"
    start(address, tq, "O'Brien's desk", "cancel order 51", wid)
    rows = await pending_json(
        address,
        "--queue",
        tq,
        "--agent",
        "O'Brien's desk",
        until=bool,
        what="the run of O'Brien's desk in `hitl pending --agent`",
    )
    assert [(r["workflow_id"], r["tool_name"]) for r in rows] == [(wid, "cancel_order")]
    runs = hitl(address, "pending", "--runs", "--queue", tq, "--agent", "O'Brien's desk", "--json")
    assert [r["workflow_id"] for r in json.loads(runs.stdout)] == [wid]
    # A quote cannot widen the query: this matches no agent, rather than every run.
    sneaky = hitl(address, "pending", "--runs", "--queue", tq, "--agent", "x' OR HitlAgent != 'y")
    assert sneaky.returncode == 0, sneaky.stderr
    assert sneaky.stdout.strip() == "no pending approvals"
    # No literal matches a double quote on every store: the CLI filters such names itself.
    odd = hitl(address, "pending", "--queue", tq, "--agent", 'Say "hi"', "--json")
    assert odd.returncode == 0, odd.stderr
    assert json.loads(odd.stdout) == []
    assert hitl(address, "reject", wid, "--all").returncode == 0
