"""A smoke test of the benchmark harness (not part of `make test`: run `pytest bench`).

It runs a tiny subset against a real dev server and checks that results come out; it never
asserts times (benchmarks measure, they do not judge).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_runs_our_side(tmp_path: Path) -> None:
    out = tmp_path / "smoke"
    cmd = [sys.executable, "-m", "bench.run", "--quick", "--only", "ours", "--runs", "3"]
    cmd += ["--sections", "latency,history", "--no-default-server", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.with_name("smoke.json").read_text())
    tuned = result["settings"]["tuned"]
    assert tuned["latency"]["ours"]["start_pending_ms"]["n"] == 3
    assert tuned["history_one_approval"]["ours"]["events"] > 0
    turns = max(result["meta"]["plan"]["long_turns"])  # the quick plan's longest run
    assert tuned["long_run"]["ours"]["final_output"] == f"Read {turns} chunks."
    md = out.with_name("smoke.md").read_text()
    assert "| start → pending visible" in md
    meta = result["meta"]
    imports = meta["imports"]
    assert imports["hitl"]["hitl_modules"] < imports["hitl.worker.build"]["hitl_modules"]
    assert set(meta["console"]["pages"]) == {"first page", "search (one order)", "call page"}
    assert "| `import hitl.console.app` |" in md and "| call page |" in md
