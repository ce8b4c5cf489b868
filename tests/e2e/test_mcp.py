"""MCP servers as tool sources, on the real dev server with real MCP servers (the official `mcp`
package): the example's back-office server over stdio (started by the worker) and over
streamable HTTP (started by the test), approvals that gate MCP calls, elicitation as a durable
question, and a parked approval that survives a worker restart and a server restart."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from hitl import Agent, Runner, RunState, ScriptedModel, UserError
from hitl.examples.mcp_desk import mcp_desk_script, refund_request
from hitl.mcp import MCPServerSse, MCPServerStdio, MCPServerStreamableHttp
from hitl.wire import AnswerInput, DecisionInput, RunOutput, RunStatus
from hitl.worker.devserver import DevServer, free_port
from tests.e2e.cli_support import hitl
from tests.helpers import (
    ROOT,
    WorkerProcess,
    history,
    queue_name,
    serving,
    tool_activity_count,
    wait_for,
)

REFUND = "Order 1001 arrived broken: refund $250."
CLOSE = "Please close the account of Ada Lovelace."


def operations(db: Path) -> list[tuple[str, str, int, float, str]]:
    """What the back office did (the MCP server's effects)."""
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT * FROM operations ORDER BY rowid"))


def desk(server: Any, name: str = "MCP desk") -> Agent[Any]:
    return Agent(
        name=name,
        mcp_servers=[server],
        model=ScriptedModel(mcp_desk_script, "tests.mcp_desk"),
    )


def stdio_server(db: Path, **options: Any) -> MCPServerStdio:
    options.setdefault(
        "require_approval", {"find_order": "never", "close_account": "never", "*": "always"}
    )
    return MCPServerStdio(
        "backoffice",
        command=sys.executable,
        args=["-m", "hitl.examples.mcp_server"],
        env={"HITL_BACKOFFICE_DB": str(db)},
        tool_overrides={"refund_order": {"approval_request": refund_request}},
        **options,
    )


class HttpServer:
    """`python -m hitl.examples.mcp_server --http` (or `--sse`) on a free loopback port."""

    def __init__(self, db: Path, port: int | None = None, sse: bool = False) -> None:
        self.db, self.port, self.sse = db, port or free_port(), sse
        self.process: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{'sse' if self.sse else 'mcp'}"

    def client(self, name: str = "probe", **options: Any) -> Any:
        if self.sse:
            return MCPServerSse(name, params={"url": self.url}, **options)
        return MCPServerStreamableHttp(name, url=self.url, **options)

    def start(self) -> HttpServer:
        flag = "--sse" if self.sse else "--http"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "hitl.examples.mcp_server", flag, "--port", str(self.port)],
            cwd=ROOT,
            env={**os.environ, "HITL_BACKOFFICE_DB": str(self.db)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        return self

    async def ready(self) -> None:
        probe = self.client(connect_timeout=2)

        async def answers() -> bool:
            try:
                await probe.list_tools(refresh=True)
            except Exception:
                return False
            return True

        await wait_for(answers, timeout=30, what="the MCP HTTP server")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[HttpServer]:
    server = HttpServer(tmp_path / "backoffice.sqlite").start()
    try:
        yield server
    finally:
        server.stop()


async def test_stdio_tools_are_gated_like_function_tools(
    dev_client: Client, tmp_path: Path
) -> None:
    db = tmp_path / "backoffice.sqlite"
    agent = desk(stdio_server(db))
    async with serving(dev_client, agent) as tq:
        result = await Runner.run(agent, REFUND, client=dev_client, task_queue=tq, serve=False)
        [item] = result.interruptions
        assert item.name == "refund_order"
        assert item.request is not None and item.request.title == "Refund $250.00 on order 1001"
        handle = dev_client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        hist = await history(handle)
        # find_order needed nobody and ran; the refund waits and no tool activity ran for it.
        assert tool_activity_count(hist, "find_order") == 1
        assert tool_activity_count(hist, "refund_order") == 0
        assert operations(db) == []
        # The pinned graph lists the server's tools, with their approval modes.
        status = await handle.query("status", result_type=RunStatus)
        assert status.phase == "awaiting_approval"
        state = result.to_state()
        state.approve(item, approver="ops")
        result = await Runner.run(agent, state, client=dev_client, task_queue=tq, serve=False)
        assert "Refunded $250.00 for order 1001" in str(result.final_output)
    [(key, kind, order, amount, _)] = operations(db)
    assert (key, kind, order, amount) == (
        f"{result.workflow_id}:{item.call_id}",
        "mcp-refund",
        1001,
        250.0,
    )


async def test_sse_tools_are_gated_like_function_tools(dev_client: Client, tmp_path: Path) -> None:
    # The seeds' `MCPServerSse(params={"url": ...}, require_approval=...)`.
    server = HttpServer(tmp_path / "backoffice.sqlite", sse=True).start()
    try:
        await server.ready()
        gated = server.client(
            "backoffice",
            require_approval={"find_order": "never", "close_account": "never", "*": "always"},
        )
        agent = desk(gated, name="SSE desk")
        async with serving(dev_client, agent) as tq:
            result = await Runner.run(agent, REFUND, client=dev_client, task_queue=tq, serve=False)
            [item] = result.interruptions
            assert item.name == "refund_order"
            hist = await history(dev_client.get_workflow_handle(result.workflow_id))
            assert tool_activity_count(hist, "find_order") == 1
            assert tool_activity_count(hist, "refund_order") == 0
            assert operations(server.db) == []
            state = result.to_state()
            state.approve(item, approver="ops")
            result = await Runner.run(agent, state, client=dev_client, task_queue=tq, serve=False)
    finally:
        server.stop()
    assert "Refunded $250.00 for order 1001" in str(result.final_output)
    [(key, kind, *_)] = operations(server.db)
    assert (key, kind) == (f"{result.workflow_id}:{item.call_id}", "mcp-refund")


async def test_a_rejected_mcp_call_never_reaches_the_server(
    dev_client: Client, tmp_path: Path
) -> None:
    db = tmp_path / "backoffice.sqlite"
    agent = desk(stdio_server(db))
    async with serving(dev_client, agent) as tq:
        result = await Runner.run(agent, REFUND, client=dev_client, task_queue=tq, serve=False)
        [item] = result.interruptions
        state = result.to_state()
        state.reject(item, message="Not without a photo.", approver="ops")
        result = await Runner.run(agent, state, client=dev_client, task_queue=tq, serve=False)
        hist = await history(dev_client.get_workflow_handle(result.workflow_id))
    assert "Not without a photo." in str(result.final_output)
    assert tool_activity_count(hist, "refund_order") == 0
    assert operations(db) == []


async def test_elicitation_waits_for_a_person_and_acts_once(
    dev_client: Client, tmp_path: Path
) -> None:
    db = tmp_path / "backoffice.sqlite"
    agent = desk(stdio_server(db))
    async with serving(dev_client, agent) as tq:
        result = await Runner.run(agent, CLOSE, client=dev_client, task_queue=tq, serve=False)
        handle = dev_client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        status = await handle.query("status", result_type=RunStatus)
        [pending] = status.pending
        assert pending.kind == "input" and pending.tool_name == "close_account"
        assert pending.input_request is not None
        assert "Close the account of Ada Lovelace (#7001)?" in pending.input_request.message
        assert set(pending.input_request.requested_schema["properties"]) == {"confirm", "reason"}
        assert operations(db) == []  # the server was told nobody answered: it did nothing
        # `hitl show` says since when it waits: since the question (it had no approval).
        address = dev_client.service_client.config.target_host
        shown = await asyncio.to_thread(hitl, address, "show", result.workflow_id)
        assert shown.returncode == 0, shown.stderr
        assert f"waiting since {pending.input_request.since}" in shown.stdout
        assert "hitl answer" in shown.stdout and "since None" not in shown.stdout

        # A hostile or mistaken answer is refused and changes nothing.
        for bad, error in [
            ({"call_id": pending.call_id, "content": {"confirm": "yes"}}, "InvalidDecision"),
            ({"call_id": pending.call_id}, "InvalidDecision"),
            ({"call_id": "nope", "content": {"confirm": True}}, "UnknownCall"),
            ({"call_id": pending.call_id, "action": "decline", "content": {}}, "InvalidDecision"),
        ]:
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await handle.execute_update("answer", bad)
            assert isinstance(err.value.cause, ApplicationError)
            assert err.value.cause.type == error, bad
        assert (await handle.query("status", result_type=RunStatus)).pending[0].kind == "input"

        answer = AnswerInput(
            call_id=pending.call_id,
            content={"confirm": True, "reason": "customer asked"},
            approver="ops",
        )
        await handle.execute_update("answer", answer)
        out = await handle.result()
        hist = await history(handle)
        # The answer stays in the audit after the run ended (its call's turn is long over).
        audit = await asyncio.to_thread(hitl, address, "audit", result.workflow_id)
        assert audit.returncode == 0, audit.stderr
    rows = [json.loads(line) for line in audit.stdout.splitlines()]
    [row] = [r for r in rows if r["event"] == "action"]
    assert (row["kind"], row["call_id"], row["approver"], row["outcome"]) == (
        "answer",
        pending.call_id,
        "ops",
        "accept",
    )
    assert json.loads(row["arguments"]) == {"confirm": True, "reason": "customer asked"}
    [asked] = out.actions
    assert (asked.kind, asked.text) == ("answer", pending.input_request.message)
    assert "Closed the account of Ada Lovelace" in str(out.final_output)
    assert "customer asked" in str(out.final_output)
    [(key, kind, account, _, _)] = operations(db)
    assert (key, kind, account) == (f"{result.workflow_id}:{pending.call_id}", "mcp-close", 7001)
    # Asked once (parked), answered, called again: two attempts of the one call.
    assert tool_activity_count(hist, "close_account") == 2


async def test_a_declined_question_leaves_the_account_open(
    dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    db = tmp_path / "backoffice.sqlite"
    agent = desk(stdio_server(db))
    async with serving(dev_client, agent) as tq:
        result = await Runner.run(agent, CLOSE, client=dev_client, task_queue=tq, serve=False)
        handle = dev_client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        [item] = result.interruptions
        assert item.kind == "input" and item.question is not None
        # The operator's view says what is asked and how to answer it.
        shown = await asyncio.to_thread(hitl, dev_server.address, "show", result.workflow_id)
        assert shown.returncode == 0, shown.stderr
        assert "ASKS (backoffice): Close the account of Ada Lovelace" in shown.stdout
        assert f"hitl answer {result.workflow_id} {item.call_id} --set confirm=" in shown.stdout
        # The Temporal UI's current details show the question and the update that answers it.
        meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        assert "**The tool asks:** Close the account of Ada Lovelace" in meta.current_details
        assert "*Send an Update* named `answer`" in meta.current_details
        form = '"content": {\n    "confirm": "...",\n    "reason": "..."\n  }'
        assert form in meta.current_details
        # Approving is the wrong verb for a question: refused, typed, nothing changes.
        wrong = await asyncio.to_thread(
            hitl, dev_server.address, "approve", result.workflow_id, item.call_id
        )
        assert wrong.returncode == 1 and "NotPending" in wrong.stderr + wrong.stdout
        done = await asyncio.to_thread(
            hitl,
            dev_server.address,
            "answer",
            result.workflow_id,
            item.call_id,
            "--decline",
            "--as",
            "ops",
        )
        assert done.returncode == 0, done.stderr
        assert "declined" in done.stdout
        out = await handle.result()
    assert "stays open (decline)" in str(out.final_output)
    assert operations(db) == []


async def test_runner_answers_a_question_like_a_decision(
    dev_client: Client, tmp_path: Path
) -> None:
    db = tmp_path / "backoffice.sqlite"
    agent = desk(stdio_server(db))
    async with serving(dev_client, agent) as tq:
        result = await Runner.run(agent, CLOSE, client=dev_client, task_queue=tq, serve=False)
        [item] = result.interruptions
        state = await RunState.from_string(agent, result.to_state().to_string())
        with pytest.raises(UserError):
            state.approve(item.call_id)  # a question is answered, not approved
        state.answer(item.call_id, {"confirm": True, "reason": "duplicate account"})
        result = await Runner.run(agent, state, client=dev_client, task_queue=tq, serve=False)
    assert "Closed the account of Ada Lovelace" in str(result.final_output)
    [(key, kind, _, _, _)] = operations(db)
    assert (key, kind) == (f"{result.workflow_id}:{item.call_id}", "mcp-close")


async def test_an_unreachable_server_fails_the_start_clearly(dev_client: Client) -> None:
    dead = MCPServerStreamableHttp(
        "crm", url=f"http://127.0.0.1:{free_port()}/mcp", connect_timeout=1
    )
    agent = desk(dead, name="Dead desk")
    async with serving(dev_client, agent) as tq:
        with pytest.raises(Exception) as err:
            await Runner.run(agent, REFUND, client=dev_client, task_queue=tq, serve=False)
    text = str(err.value) + str(getattr(err.value, "cause", ""))
    assert "MCP server 'crm' (streamable-http) failed" in text, text


async def test_a_parked_mcp_approval_survives_worker_and_server_restarts(
    dev_server: DevServer, dev_client: Client, http_server: HttpServer
) -> None:
    await http_server.ready()
    tq = queue_name("mcp")
    env = {"HITL_MCP_URL": http_server.url, "HITL_BACKOFFICE_DB": str(http_server.db)}
    agents = "hitl.examples.mcp_desk:agent"
    from hitl.examples.mcp_desk import agent

    with WorkerProcess(dev_server.address, tq, agents=agents, env=env):
        result = await Runner.run(agent, REFUND, client=dev_client, task_queue=tq, serve=False)
    [item] = result.interruptions
    assert item.name == "refund_order"
    # Nothing is left running: the worker is gone, then the server restarts on the same port.
    http_server.stop()
    restarted = HttpServer(http_server.db, http_server.port).start()
    try:
        await restarted.ready()
        handle = dev_client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        with WorkerProcess(dev_server.address, tq, agents=agents, env=env):
            await handle.execute_update(
                "approve", DecisionInput(call_id=item.call_id, approver="ops")
            )
            out = await handle.result()
    finally:
        restarted.stop()
    assert "Refunded $250.00 for order 1001" in str(out.final_output)
    [(key, kind, _, _, _)] = operations(http_server.db)
    assert (key, kind) == (f"{result.workflow_id}:{item.call_id}", "mcp-refund")
