"""Where a worker's CPU goes: `python -m bench.profile [--variant ours-client] [--runs 200]`.

Starts a tuned dev server, the variant's worker and driver (as `bench.run` does), runs the
throughput load while `py-spy` samples the worker, and prints the hottest Python frames
(inclusive and self time) with the worker's and server's CPU per run. Needs `py-spy` in the
virtualenv (`.venv/bin/pip install py-spy`); not part of `make bench`.

`--no-search-attributes` starts the server without our search attributes (the worker then skips
its upserts), to measure what they cost.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import proto
from bench.procs import BENCH, ensure_peer_venv
from bench.stack import VARIANTS, Stack, log

IDLE_LEAVES = ("_worker (concurrent/futures/thread.py", "EpollSelector.select", "wait (threading")


def top_frames(
    raw: Path, limit: int = 25
) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """Inclusive and self shares of each frame in py-spy's collapsed-stack output."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        if any(frames[-1].startswith(idle) for idle in IDLE_LEAVES):
            continue  # a thread waiting (idle pool threads, the event loop's select)
        total += n
        for f in set(frames):
            inclusive[f] += n
        own[frames[-1]] += n

    def share(c: collections.Counter[str]) -> list[tuple[str, float]]:
        return [(f, 100.0 * k / max(total, 1)) for f, k in c.most_common(limit)]

    return share(inclusive), share(own)


async def amain(args: argparse.Namespace) -> int:
    from hitl.worker.devserver import DevServer

    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.path.exists(spy):  # noqa: ASYNC240 (once, before anything runs)
        print("py-spy is not installed: .venv/bin/pip install py-spy", file=sys.stderr)
        return 2
    v = VARIANTS[args.variant]
    if v.side == "peer":
        ensure_peer_venv(BENCH / "results" / "peer-install.log.tmp")
    with tempfile.TemporaryDirectory(prefix="hitl-profile-") as tmp:
        logs = BENCH / "results" / "logs.tmp" / "profile"
        shutil.rmtree(logs, ignore_errors=True)
        logs.mkdir(parents=True)
        stack = Stack("profile", Path(tmp), logs)
        stack.extra_worker_args = tuple(args.worker_arg)
        try:
            server = DevServer(db_filename=stack.db, tuned=True, log_file=logs / "server.log")
            if args.no_search_attributes:
                server.search_attributes = {}
            stack.server = server.start()
            stack.start_wire()
            stack.start_worker(v.worker, v.worker, v.worker)
            await stack.start_driver(v.side)
            driver = stack.drivers[v.side]
            await driver.call("warmup", key=v.key, n=5, queue=stack.queue(args.variant), api=v.api)
            pids = stack.pids(args.variant)
            out = Path(tmp) / "spy.txt"
            rec = None
            if not args.no_spy:
                cmd = [spy, "record", "--nonblocking", "--format", "raw", "-r", "100"]
                cmd += ["-o", str(out), "-p", str(pids["worker"])]
                rec = subprocess.Popen(  # noqa: ASYNC220 (a sampler running beside the load)
                    cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
            await asyncio.sleep(1.0)
            before = proto.snapshot(pids)
            res = await driver.call(
                "throughput", key=v.key, n=args.runs, queue=stack.queue(args.variant), api=v.api
            )
            after = proto.snapshot(pids)
            if rec is not None:
                rec.send_signal(signal.SIGINT)
                rec.wait(30)
            done = len(res["e2e_ms"])
            for name in ("server", "worker", "client"):
                ms = (after[name]["cpu"] - before[name]["cpu"]) * 1000 / max(done, 1)
                log(f"{args.variant}: {name} CPU {ms:.1f} ms/run")
            log(
                f"{args.variant}: {done / res['wall_s']:.2f} runs/s ({done}/{args.runs}); "
                f"errors {res.get('error_kinds')} {res.get('errors')}"
            )
            if rec is None:
                return 0
            inc, own = top_frames(out)
            print("\ninclusive % of the worker's Python samples:")
            for f, pct in inc:
                print(f"  {pct:5.1f}  {f}")
            print("\nself %:")
            for f, pct in own[:15]:
                print(f"  {pct:5.1f}  {f}")
            modules, _ = top_frames(out, limit=400)
            print("\nmodules executed (re-imported into each new workflow sandbox), inclusive %:")
            for f, pct in [m for m in modules if m[0].startswith("<module> (")][:15]:
                print(f"  {pct:5.1f}  {f}")
        finally:
            await stack.close()
    return 0


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.splitlines()[0])
    p.add_argument("--variant", default="ours-client", choices=sorted(VARIANTS))
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--no-search-attributes", action="store_true")
    p.add_argument("--no-spy", action="store_true", help="measure CPU per run only")
    p.add_argument(
        "--worker-arg",
        action="append",
        default=[],
        help="extra `python -m hitl.worker` argument for our worker (repeatable)",
    )
    return asyncio.run(amain(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
