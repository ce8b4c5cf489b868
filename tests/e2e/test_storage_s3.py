"""`HITL_STORAGE=s3://...` against a real S3-compatible server (moto's, on 127.0.0.1)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from hitl import Runner
from hitl.client import data_converter
from hitl.storage import S3BlobStore, close_storage, storage_from_env
from hitl.worker.devserver import DevServer, free_port
from tests.e2e.test_storage import CANARY, exporter, payload_sizes
from tests.helpers import serving

BUCKET = "hitl-payloads"


@pytest.fixture
def s3_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    binary = shutil.which("moto_server") or str(Path(__file__).parents[2] / ".venv/bin/moto_server")
    if not Path(binary).exists():
        pytest.skip("moto_server is not installed (it comes with the dev extra)")
    port = free_port()
    log = (tmp_path / "moto.log").open("w")
    proc = subprocess.Popen(
        [binary, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:  # until it accepts connections
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, "the S3 server exited"
                assert time.monotonic() < deadline, "the S3 server did not start"
                time.sleep(0.05)
        for key, value in {
            "AWS_ENDPOINT_URL": url,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            monkeypatch.setenv(key, value)
        urllib.request.urlopen(urllib.request.Request(f"{url}/{BUCKET}", method="PUT")).close()
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def bucket_keys(url: str) -> list[str]:
    import re

    with urllib.request.urlopen(f"{url}/{BUCKET}?list-type=2") as resp:
        return re.findall(r"<Key>([^<]+)</Key>", resp.read().decode())


async def test_large_payloads_go_to_an_s3_bucket_named_in_the_environment(
    dev_server: DevServer, s3_server: str, monkeypatch: pytest.MonkeyPatch, ledger: Any
) -> None:
    monkeypatch.setenv("HITL_STORAGE", f"s3://{BUCKET}/runs/prod")
    monkeypatch.setenv("HITL_STORAGE_THRESHOLD", "16384")
    storage = storage_from_env()
    assert storage is not None and isinstance(storage.drivers[0], S3BlobStore)
    client = await Client.connect(dev_server.address, data_converter=data_converter(codec=None))
    async with serving(client, exporter) as tq:
        paused = await Runner.run(
            exporter, "export acme", client=client, task_queue=tq, serve=False
        )
        state = paused.to_state()
        state.approve(paused.interruptions[0])
        done = await Runner.run(exporter, state, client=client, task_queue=tq, serve=False)
    await close_storage(client)
    assert str(done.final_output).startswith("exported")
    keys = bucket_keys(s3_server)
    assert keys and all(k.startswith("runs/prod/sha256/") for k in keys), keys
    hist = await client.get_workflow_handle(done.workflow_id).fetch_history()
    assert max(size for size, _ in payload_sizes(hist.to_json())) < 16384
    assert CANARY not in hist.to_json()
    assert ledger.count("export_report") == 1
