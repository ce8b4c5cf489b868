"""Decision insights on the dev server: runs decided by people in a known order give the
expected counts and timing order in `hitl insights`, on the worker's `--metrics-port` and on
the console's `/metrics` (which answers only its bearer token, and names no run or call)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client

from hitl import Runner
from hitl.console import ConsoleSettings, start_console
from hitl.console.auth import add_user
from hitl.wire import UPDATE_APPROVE, UPDATE_REJECT, DecisionInput, RunOutput
from hitl.worker.devserver import DevServer
from tests.agents import support_agent
from tests.e2e.cli_support import hitl
from tests.helpers import WorkerProcess, queue_name, serving, wait_for

TOKEN = "insights-test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of one metric: (labels, value)."""
    out = []
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}\{{(.*)\}} (\S+)$", line)
        if match:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(1)))
            out.append((labels, float(match.group(2))))
    return out


async def fetch(url: str, token: str | None = None) -> tuple[int, str]:
    """`get` from a thread: a console under test serves on this test's event loop."""
    return await asyncio.to_thread(get, url, token)


@dataclass
class Decided:
    """The module's runs: `early` and `late` decided by people, `open` still waiting."""

    address: str
    queue: str
    metrics_url: str
    runs: dict[str, str]
    pending_call: str


@pytest.fixture(scope="module")
def worker_with_metrics(dev_server: DevServer) -> Iterator[tuple[str, str]]:
    queue, port = queue_name("insights"), free_port()
    # No cache: every workflow task replays the run from its start, and still each fact
    # counts once (the SDK's workflow meter records nothing while replaying).
    args = ["--metrics-port", str(port), "--max-cached-workflows", "0"]
    worker = WorkerProcess(dev_server.address, queue, extra_args=args)
    worker.start()
    try:
        yield queue, f"http://127.0.0.1:{port}/metrics"
    finally:
        worker.stop()


@pytest_asyncio.fixture(scope="module")
async def decided(
    dev_server: DevServer, dev_client: Client, worker_with_metrics: tuple[str, str]
) -> Decided:
    """`late` asks first and is decided last, `early` asks second and is decided first: late
    waited longer, whatever the machine's speed. `open` is left waiting."""
    queue, metrics_url = worker_with_metrics
    runs, calls = {}, {}
    for n, name in enumerate(("late", "early", "open")):
        result = await Runner.run(
            support_agent, f"cancel order {n + 40}", client=dev_client, task_queue=queue,
            serve=False,
        )  # fmt: skip
        runs[name], calls[name] = result.workflow_id, result.interruptions[0].call_id
    early = dev_client.get_workflow_handle(runs["early"], result_type=RunOutput)
    await early.execute_update(
        UPDATE_APPROVE, DecisionInput(call_id=calls["early"], approver="alice")
    )
    late = dev_client.get_workflow_handle(runs["late"], result_type=RunOutput)
    await late.execute_update(
        UPDATE_REJECT, DecisionInput(call_id=calls["late"], approver="bob", message="No.")
    )
    for handle in (early, late):
        await handle.result()
    return Decided(dev_server.address, queue, metrics_url, runs, calls["open"])


def insights(d: Decided, *args: str) -> dict[str, Any]:
    out = hitl(d.address, "insights", "--since", "1h", "--json", "--task-queue", d.queue, *args)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


async def test_the_cli_counts_the_decisions_and_orders_the_waits(decided: Decided) -> None:
    data: dict[str, Any] = {}

    def counted() -> bool:  # visibility is eventually consistent: read until all three show
        nonlocal data
        data = insights(decided)
        return data["runs"]["read"] == 3 and data["totals"]["rejected"] == 1

    await wait_for(counted, what="three runs in the window")
    assert data["totals"] == {
        "approved": 1,
        "rejected": 1,
        "expired": 0,
        "edited": 0,
        "escalated": 0,
    }
    assert data["decisions_by_tool"] == {"cancel_order": {"approved": 1, "rejected": 1}}
    who = data["time_to_decision"]["by_approver"]
    assert who["bob"]["count"] == who["alice"]["count"] == 1
    assert who["bob"]["p50_seconds"] > who["alice"]["p50_seconds"]
    assert data["time_to_decision"]["by_tool"]["cancel_order"]["count"] == 2
    assert data["pending"]["count"] == 1
    assert list(data["pending"]["by_tool"]) == ["cancel_order"]
    assert data["rule_hits"] == [] and data["shadow_disagreements"] == {}
    assert data["policy_fields"] is False

    limited = insights(decided, "--limit", "1")
    assert limited["runs"]["read"] == 1 and limited["runs"]["limit"] == 1
    assert limited["runs"]["in_window"] == 3

    text = hitl(decided.address, "insights", "--since", "1h", "--task-queue", decided.queue)
    assert "1 approved, 1 rejected, 0 expired" in text.stdout
    assert "pending now: 1 call, oldest waiting" in text.stdout
    bad = hitl(decided.address, "insights", "--since", "forever")
    assert bad.returncode == 2 and "not a span" in bad.stderr
    none = hitl(decided.address, "insights", "--limit", "0")
    assert none.returncode == 2 and "--limit must be at least 1" in none.stderr


async def test_the_worker_exports_what_its_runs_decided(decided: Decided) -> None:
    status, text = get(decided.metrics_url)
    assert status == 200
    ours = [
        (labels, value)
        for labels, value in samples(text, "hitl_decisions_total")
        if labels.get("task_queue") == decided.queue
    ]
    by_outcome = {(lab["outcome"], lab["source"], lab["tool"]): v for lab, v in ours}
    assert by_outcome == {
        ("approved", "person", "cancel_order"): 1,
        ("rejected", "person", "cancel_order"): 1,
    }
    asked = [v for lab, v in samples(text, "hitl_approval_requests_total")
             if lab.get("task_queue") == decided.queue]  # fmt: skip
    assert asked == [3]
    # A person's time to decide, labelled by approver only when the directory or the call
    # names them: alice and bob are in neither, so both count as `other`.
    counts = {lab["approver"]: v for lab, v in samples(text, "hitl_decision_seconds_count")
              if lab.get("task_queue") == decided.queue}  # fmt: skip
    assert counts == {"other": 2}
    assert decided.runs["early"] not in text and decided.pending_call not in text


@pytest_asyncio.fixture
async def console_url(
    dev_server: DevServer, decided: Decided, tmp_path: Path
) -> AsyncIterator[str]:
    users = tmp_path / "users.json"
    add_user(users, "ann")
    os.environ["HITL_CONSOLE_METRICS_TOKEN"] = TOKEN
    try:
        server, _ = await start_console(
            ConsoleSettings(
                port=0,
                address=dev_server.address,
                auth="tokens",
                users_file=str(users),
                task_queues=[decided.queue],
            )
        )
    finally:
        del os.environ["HITL_CONSOLE_METRICS_TOKEN"]
    try:
        yield server.url
    finally:
        await server.stop()


async def test_console_metrics_need_the_token_and_name_no_run(
    decided: Decided, console_url: str
) -> None:
    url = console_url + "/metrics?window=1h"
    assert (await fetch(url))[0] == 401
    assert (await fetch(url, "wrong-token"))[0] == 401
    assert (await fetch(url, TOKEN + "x"))[0] == 401
    status, text = await fetch(url, TOKEN)
    assert status == 200
    decided_now = {
        lab["outcome"]: v
        for lab, v in samples(text, "hitl_decisions_window")
        if lab["tool"] == "cancel_order"
    }
    assert decided_now == {"approved": 1, "rejected": 1}
    assert samples(text, "hitl_pending_calls") == [
        ({"kind": "approval", "tool": "cancel_order"}, 1)
    ]
    for wid in decided.runs.values():
        assert wid not in text
    assert decided.pending_call not in text and "cancel order" not in text
    assert "# TYPE hitl_rule_hits_window gauge" in text


async def test_console_metrics_are_off_without_a_token(
    dev_server: DevServer, decided: Decided, tmp_path: Path
) -> None:
    users = tmp_path / "users.json"
    add_user(users, "ann")
    assert "HITL_CONSOLE_METRICS_TOKEN" not in os.environ
    server, _ = await start_console(
        ConsoleSettings(
            port=0,
            address=dev_server.address,
            auth="tokens",
            users_file=str(users),
            task_queues=[decided.queue],
        )
    )
    try:
        assert (await fetch(server.url + "/metrics"))[0] == 404
        assert (await fetch(server.url + "/metrics", ""))[0] == 404
        # The page is for people signed in: without a session, on to sign in.
        status, body = await fetch(server.url + "/insights")
        assert status == 200 and "Sign in" in body and "cancel_order" not in body
    finally:
        await server.stop()


async def test_without_a_worker_a_paused_run_counts_from_its_memo(
    dev_server: DevServer, dev_client: Client
) -> None:
    """With nobody to answer queries, a paused run's waiting calls come from its inbox memo,
    and a run that closed without a result is counted as unread, not guessed at."""
    async with serving(dev_client, support_agent) as queue:
        parked = await Runner.run(
            support_agent, "cancel order 7", client=dev_client, task_queue=queue, serve=False
        )
        stopped = await Runner.run(
            support_agent, "cancel order 8", client=dev_client, task_queue=queue, serve=False
        )
    await dev_client.get_workflow_handle(stopped.workflow_id).terminate("test")
    assert parked.interruptions
    data: dict[str, Any] = {}

    def counted() -> bool:
        nonlocal data
        out = hitl(dev_server.address, "insights", "--since", "1h", "--json", "--task-queue",
                   queue, "--timeout", "2")  # fmt: skip
        data = json.loads(out.stdout) if out.returncode == 0 else {}
        return bool(data) and data["runs"]["listed"] == 2

    await wait_for(counted, what="both runs listed")
    assert data["runs"] == {"listed": 2, "in_window": 2, "read": 1, "unread": 1, "limit": 500}
    assert data["pending"]["count"] == 1
    assert data["totals"]["approved"] == data["totals"]["rejected"] == 0
