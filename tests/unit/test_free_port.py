"""`free_port`: a port outside the kernel's ephemeral range, which outgoing connections share."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from hitl.worker import devserver
from hitl.worker.devserver import PICKED_FROM, free_port, port_free


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    low = int(devserver.EPHEMERAL_RANGE.read_text().split()[0])
    if low <= PICKED_FROM + 1_000:
        pytest.skip(f"this kernel's ephemeral range starts at {low}")
    ports = {free_port() for _ in range(20)}
    assert all(PICKED_FROM <= p < low for p in ports), ports
    assert len(ports) > 1, "picked at random, not always the same"
    with socket.socket() as s:  # what the server will do with it
        s.bind(("127.0.0.1", ports.pop()))


def test_a_port_someone_listens_on_is_not_free() -> None:
    """What `free_port` asks of each port it picks."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert not port_free(taken.getsockname()[1])


def test_without_the_range_the_kernel_picks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    low = int(devserver.EPHEMERAL_RANGE.read_text().split()[0])
    monkeypatch.setattr(devserver, "EPHEMERAL_RANGE", tmp_path / "absent")
    port = free_port()
    assert port >= low and port_free(port), "the kernel's choice, from its range"
