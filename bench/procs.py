"""Processes the benchmark starts: the peer's virtualenv, workers, drivers, the dev server's files.

Everything is stopped by its own process id (SIGTERM, then SIGKILL), never by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PEER_VENV = BENCH / ".peer-venv"
PEER_PYTHON = PEER_VENV / "bin" / "python"

# The peer as its users install it. openai-agents: the newest release that
# temporalio-openai-agents 1.1.0 accepts (it requires openai-agents>=0.22,<0.23).
PEER_REQUIREMENTS = [
    "temporalio==1.35.0",
    "temporalio-openai-agents==1.1.0",
    "openai-agents==0.22.3",
]


class BenchError(RuntimeError):
    """Something the benchmark needs did not work."""


def ensure_peer_venv(log: Path) -> dict[str, str]:
    """Create `bench/.peer-venv` with the peer installed (once); return its package versions."""
    stamp = PEER_VENV / ".bench-installed"
    wanted = "\n".join(PEER_REQUIREMENTS)
    if not (stamp.exists() and stamp.read_text() == wanted and PEER_PYTHON.exists()):
        print(f"bench: installing the peer into {PEER_VENV.relative_to(ROOT)} ...", flush=True)
        base = getattr(sys, "_base_executable", None) or "python3"
        with open(log, "ab") as out:
            subprocess.run([base, "-m", "venv", str(PEER_VENV)], check=True, stdout=out, stderr=out)
            subprocess.run(
                [str(PEER_PYTHON), "-m", "pip", "install", "--quiet", *PEER_REQUIREMENTS],
                check=True,
                stdout=out,
                stderr=out,
            )
        stamp.write_text(wanted)
    return package_versions(
        PEER_PYTHON, ["temporalio", "temporalio-openai-agents", "openai-agents", "openai"]
    )


def package_versions(python: Path | str, names: list[str]) -> dict[str, str]:
    code = (
        "import json, sys\n"
        "from importlib.metadata import version, PackageNotFoundError\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try: out[n] = version(n)\n"
        "    except PackageNotFoundError: out[n] = None\n"
        "print(json.dumps(out))\n"
    )
    res = subprocess.run(
        [str(python), "-c", code, *names], capture_output=True, text=True, check=True
    )
    return dict(json.loads(res.stdout))


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for child processes: no model keys, the repo importable."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "HITL_", "TEMPORAL_")) and k != "PYTHONPATH"
    }
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def stop_pid(proc: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


class Worker:
    """A worker subprocess; ready once its log shows `worker ready`."""

    def __init__(
        self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = argv
        self.log = log
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def spawn(self) -> Worker:
        with open(self.log, "ab") as out:
            out.write(f"$ {' '.join(self.argv)}\n".encode())
            self.proc = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=clean_env(**self.env),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        return self

    def _is_ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise BenchError(f"worker {self.name} exited ({self.proc.returncode}); see {self.log}")
        return b"worker ready" in self.log.read_bytes()

    def _not_ready(self, timeout: float) -> BenchError:
        self.stop()
        return BenchError(f"worker {self.name} not ready after {timeout:g}s; see {self.log}")

    def wait_ready(self, timeout: float = 60.0) -> Worker:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._is_ready():
                return self
            time.sleep(0.05)
        raise self._not_ready(timeout)

    async def ready(self, timeout: float = 60.0) -> Worker:
        """`wait_ready` without blocking the event loop (drivers start meanwhile)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._is_ready():
                return self
            await asyncio.sleep(0.05)
        raise self._not_ready(timeout)

    def start(self, timeout: float = 60.0) -> Worker:
        return self.spawn().wait_ready(timeout)

    def stop(self) -> None:
        stop_pid(self.proc)
        self.proc = None


class Driver:
    """A driver subprocess speaking `bench.proto`'s JSON lines."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name = name
        self.argv = argv
        self.log = log
        self.proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, timeout: float = 60.0) -> Driver:
        err = _open_append(self.log)
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            cwd=ROOT,
            env=clean_env(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
            limit=1 << 26,
        )
        err.close()
        await asyncio.wait_for(self._read(), timeout)
        return self

    async def _read(self) -> Any:
        assert self.proc is not None and self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if not line:
            raise BenchError(f"driver {self.name} exited; see {self.log}")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise BenchError(
                f"driver {self.name}: {reply.get('error')}\n{reply.get('traceback', '')}"
            )
        return reply.get("result")

    async def call(self, op: str, **args: Any) -> Any:
        assert self.proc is not None and self.proc.stdin is not None
        async with self._lock:
            self.proc.stdin.write((json.dumps({"op": op, "args": args}) + "\n").encode())
            await self.proc.stdin.drain()
            return await self._read()

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.call("exit"), 5)
        try:
            await asyncio.wait_for(self.proc.wait(), 5)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


def proc_cmdline(pid: int) -> list[str]:
    """The command line of a running process."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")


def _open_append(path: Path) -> Any:
    return open(path, "ab")


def sqlite_used_bytes(path: Path) -> int:
    """Bytes in use in a SQLite database (pages minus free pages, WAL content included)."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)) as db:
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
    return int((pages - free) * page_size)


def files_bytes(path: Path) -> int:
    """Size on disk of a SQLite database with its -wal/-shm files."""
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())
