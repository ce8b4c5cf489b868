"""`hitl dev`, `hitl setup`, `hitl codec-server`: the local stack and cluster setup."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from hitl.cli.common import EXIT_FAILED, EXIT_OK, Refused
from hitl.wire import SEARCH_ATTRIBUTES


async def cmd_setup(client: Client, args: argparse.Namespace) -> int:
    """Register our search attributes on the connected namespace."""
    from hitl.admin import register_search_attributes

    try:
        added = await register_search_attributes(client)
    except RPCError as exc:
        wanted = ", ".join(f"{name} {kind}" for name, kind in SEARCH_ATTRIBUTES.items())
        raise Refused(
            f"cannot register search attributes in {client.namespace!r}: {exc.message}. On "
            f"Temporal Cloud add them with `tcld namespace search-attributes add` ({wanted})."
        ) from None
    if added:
        print(f"registered {', '.join(added)} in namespace {client.namespace!r}")
    else:
        print(f"search attributes already registered in namespace {client.namespace!r}")
    return EXIT_OK


def cmd_codec_server(args: argparse.Namespace) -> int:
    """Serve the payload codec (HITL_ENCRYPTION_KEY) to the temporal CLI and the Web UI."""
    from hitl.codec import EncryptionCodec, serve_codec

    codec = EncryptionCodec.from_env()
    if codec is None:
        print("hitl: HITL_ENCRYPTION_KEY is not set; nothing to encode or decode", file=sys.stderr)
        return EXIT_FAILED
    server = serve_codec(codec, args.host, args.port, tuple(args.cors_origin))
    url = f"http://{args.host}:{server.server_address[1]}"
    print(f"codec server on {url}", flush=True)
    print(f"  temporal workflow show -w RUN --codec-endpoint {url}")
    print(f"  temporal server start-dev --ui-codec-endpoint {url}  (or the UI's codec setting)")
    stop = {"now": False}
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    while not stop["now"]:
        time.sleep(0.2)
    server.shutdown()
    return EXIT_OK


def _signal_pending(stop: dict[str, bool], grace: float = 1.0) -> bool:
    """True when a stop was requested, allowing `grace` seconds for its handler to run."""
    deadline = time.monotonic() + grace
    while not stop["now"] and time.monotonic() < deadline:
        time.sleep(0.05)
    return stop["now"]


def cmd_dev(args: argparse.Namespace) -> int:
    """The local stack: dev server (persistent, UI), search attributes, a worker. Ctrl-C stops."""
    from hitl.serving import DevServer, free_port, port_free

    state = Path(args.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    port = args.port or (7233 if port_free(7233) else free_port())
    ui_port = args.ui_port or (8233 if port_free(8233) else free_port())
    # With payload encryption, the UI decodes through a codec server that admits its origin.
    codec_server = _codec_for_ui(ui_port)
    server = DevServer(
        port=port,
        ui_port=ui_port,
        db_filename=state / "dev.sqlite",
        log_file=state / "dev-server.log",
        ui_codec_endpoint=codec_server.url if codec_server else None,
    )
    stop = {"now": False}

    def on_signal(*_: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    server.start()
    agents = args.agents or os.environ.get("HITL_AGENTS", "hitl.examples.refund_desk:agent").split(
        ","
    )
    # Large payloads by reference, in the state dir (`hitl.storage`), unless configured.
    storage = os.environ.get("HITL_STORAGE") or (state / "blobs").absolute().as_uri()
    approvers, console_args, approver_lines = _approvers(state)
    worker = subprocess.Popen(
        _worker_command(server.address, args, agents),
        env={**os.environ, "HITL_STORAGE": storage, "HITL_APPROVERS": approvers},
    )
    console, console_lines = _start_console(
        server.address, args.console_port, args.task_queue, console_args
    )
    lines = [*console_lines, *approver_lines]
    if codec_server is not None:
        lines.append(
            f"Codec server         {codec_server.url}  (the UI decodes payloads through it)"
        )
    _print_stack(server.address, state, ui_port, lines, agents, args.task_queue, storage)
    try:
        return _watch(worker, server, stop)
    finally:
        for child in (worker, console):
            if child is not None and child.poll() is None:
                child.send_signal(signal.SIGTERM)
                try:
                    child.wait(20)
                except subprocess.TimeoutExpired:
                    child.kill()
        if codec_server is not None:
            codec_server.shutdown()
        server.stop()
        print("stopped")


def _approvers(state: Path) -> tuple[str, list[str], list[str]]:
    """The approver directory of the stack: its file, the console's options, the lines to print.

    `HITL_APPROVERS` when set (the console reads it too); else a local one in the state folder
    (`hitl.signing.local_directory`: ann and bob of finance, lee of finance-leads, keys under
    `keys/`), whose gateway key the console signs with, signing in ann: the refund desk's rules
    (group:finance, signed decisions) can then be met on this machine.
    """
    from hitl.signing import LOCAL_PEOPLE, local_directory

    given = os.environ.get("HITL_APPROVERS")
    if given:
        return given, [], [f"Approvers            {given}  (HITL_APPROVERS)"]
    path = local_directory(state)
    keys = state / "keys"
    user = next(iter(LOCAL_PEOPLE))
    people = ", ".join(f"{name} ({', '.join(groups)})" for name, groups in LOCAL_PEOPLE.items())
    console = ["--approvers", str(path), "--signing-key", str(keys / "console.key")]
    return (
        str(path),
        [*console, "--user", user],
        [
            f"Approvers            {people}: {path}",
            f"{'':21}decide as one: HITL_SIGNING_KEY={keys}/NAME.key hitl ... --as NAME",
        ],
    )


def _worker_command(address: str, args: argparse.Namespace, agents: list[str]) -> list[str]:
    """`python -m hitl.worker` for the dev server at `address`, serving `agents`."""
    cmd = [sys.executable, "-m", "hitl.worker", "--address", address]
    cmd += ["--task-queue", args.task_queue]
    for a in agents:
        cmd += ["--agents", a]
    for a in args.allow or []:
        cmd += ["--allow", a]
    if getattr(args, "policy", None):
        cmd += ["--policy", str(Path(args.policy).absolute())]
    return cmd


def _print_stack(
    address: str,
    state: Path,
    ui_port: int,
    lines: list[str],
    agents: list[str],
    task_queue: str,
    storage: str,
) -> None:
    """What runs where, and how to connect to it."""
    from hitl.storage import DEFAULT_THRESHOLD

    print(f"Temporal dev server  {address}  (SQLite {state / 'dev.sqlite'})")
    print(f"Web UI               http://127.0.0.1:{ui_port}")
    print(
        f"Approval inbox       http://127.0.0.1:{ui_port}/namespaces/default/workflows"
        "?query=HitlStatus%3D%22awaiting_approval%22%20AND%20ExecutionStatus%3D%22Running%22"
    )
    for line in lines:
        print(line)
    print(f"Worker               {', '.join(agents)} on task queue {task_queue!r}")
    print(f"Blob store           {storage}  (payloads over {DEFAULT_THRESHOLD // 1024} KiB)")
    print(f"Connect              export TEMPORAL_ADDRESS={address} HITL_STORAGE={storage}")
    print("Ctrl-C stops everything.", flush=True)


def _watch(worker: subprocess.Popen[bytes], server: Any, stop: dict[str, bool]) -> int:
    """Wait until a stop is requested (exit 0) or the worker or dev server exits (exit 1)."""
    while not stop["now"]:
        worker_gone = worker.poll() is not None
        server_gone = server.process is None or server.process.poll() is not None
        # Ctrl-C reaches the whole process group: the children may stop on their own signal a
        # moment before ours is handled. That is a requested stop, not a crash.
        if (worker_gone or server_gone) and _signal_pending(stop):
            break
        if worker_gone:
            print(f"the worker exited with code {worker.returncode}", file=sys.stderr)
            return EXIT_FAILED
        if server_gone:
            print("the dev server exited", file=sys.stderr)
            return EXIT_FAILED
        time.sleep(0.2)
    return EXIT_OK


def _codec_for_ui(ui_port: int) -> Any:
    """A codec server for the Web UI when `HITL_ENCRYPTION_KEY` is set (else `None`)."""
    from hitl.codec import EncryptionCodec, serve_codec

    codec = EncryptionCodec.from_env()
    if codec is None:
        return None
    return serve_codec(codec, "127.0.0.1", 0, (f"http://127.0.0.1:{ui_port}",))


def _start_console(
    address: str, port: int | None, task_queue: str, extra: list[str]
) -> tuple[Any, list[str]]:
    """The approval console as a child process (port 0: none); the lines that present it.

    It lists the runs of the task queue the stack's worker serves (the console lists only
    runs on the task queues it is told are ours).
    """
    from hitl.serving import free_port, port_free

    if port == 0:
        return None, []
    port = port or (8090 if port_free(8090) else free_port())
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hitl.cli",
            "--address",
            address,
            "--task-queue",
            task_queue,
            "console",
            "--port",
            str(port),
            *extra,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("approval console on "):
            lines.append(f"Approval console     {line.split(' on ', 1)[1].strip()}")
        elif line.startswith("sign in"):
            lines.append(f"Console sign-in      {line.split(': ', 1)[1].strip()}  (works once)")
            return proc, lines
    return proc, [*lines, "Approval console     did not start (see its output above)"]
