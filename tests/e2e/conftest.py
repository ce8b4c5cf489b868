"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hitl.worker.devserver import DevServer
from tests.e2e.cli_support import start_worker
from tests.helpers import queue_name


@pytest.fixture(scope="module")
def cli_stack(
    dev_server: DevServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, Path]]:
    """A worker of the CLI tests' agents on its own task queue, for one test module: the
    server's address, the queue, and the worker's scratch folder."""
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "workspace").mkdir()
    (tmp / "workspace" / "notes.txt").write_text("hello world\nsecond line\n")
    tq = queue_name("cli")
    worker = start_worker(dev_server.address, tq, tmp)
    try:
        yield dev_server.address, tq, tmp
    finally:
        worker.stop()
