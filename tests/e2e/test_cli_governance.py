"""The `hitl` CLI with governance: calls that need several approvers (dev server)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from hitl.wire import RunOutput
from hitl.worker.devserver import DevServer
from tests.e2e.test_cli import hitl, start, start_worker
from tests.helpers import Ledger, queue_name, wait_for


@pytest.fixture(scope="module")
def stack(dev_server: DevServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    tmp = tmp_path_factory.mktemp("governance")
    (tmp / "workspace").mkdir()
    tq = queue_name("gov")
    worker = start_worker(dev_server.address, tq, tmp)
    try:
        yield dev_server.address, tq, tmp
    finally:
        worker.stop()


async def test_two_people_approve_from_the_cli(
    stack: tuple[str, str, Path], dev_client: Client
) -> None:
    address, tq, tmp = stack
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
        lambda: "[1/2 approved]" in hitl(address, "pending").stdout, what="the inbox row"
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
