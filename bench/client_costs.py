"""What a client pays before any run: `import hitl` (and the worker's and the console's entry
modules) in a fresh interpreter, and the console's pages with 10,000 pending calls.

Part of `make bench` (`bench.run`); `python -m bench.client_costs [--quick]` runs it alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from bench import console_inbox
from bench.procs import ROOT

MODULES = ("hitl", "hitl.worker", "hitl.worker.build", "hitl.console", "hitl.console.app")
"""The packages load lazily: `hitl.worker.build` is what a worker process loads (workflows,
activities), `hitl.console.app` what the console's server loads."""
PROBE = (
    "import importlib, sys, time; t = time.perf_counter(); importlib.import_module({mod!r}); "
    "print(time.perf_counter() - t, sum(m.split('.')[0] == 'hitl' for m in sys.modules), "
    "len(sys.modules))"
)
CONSOLE_ROWS = 10_000
CONSOLE_PAGES = ("first page", "search (one order)", "call page")


def _wall(argv: list[str]) -> tuple[float, str, str]:
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
    return time.perf_counter() - t0, done.stdout, done.stderr


def import_times(repeat: int, profile: bool = True) -> dict[str, Any]:
    """Per module: the median import alone and the whole `python -c "import M"` process over
    `repeat` fresh interpreters (runs interleaved, so each module sees the same noise), the
    modules it loads, and (`profile`) its slowest imports by `-X importtime` (one more run)."""
    samples: dict[str, dict[str, list[float]]] = {
        m: {"import": [], "process": []} for m in ("(none)", *MODULES)
    }
    loaded: dict[str, tuple[int, int]] = {}
    for _ in range(repeat):
        for mod in samples:
            code = "pass" if mod == "(none)" else PROBE.format(mod=mod)
            wall, out, _ = _wall([sys.executable, "-c", code])
            samples[mod]["process"].append(1000 * wall)
            if mod != "(none)":
                seconds, ours, total = out.split()
                samples[mod]["import"].append(1000 * float(seconds))
                loaded[mod] = (int(ours), int(total))
    result: dict[str, Any] = {
        "repeat": repeat,
        "bare_interpreter_ms": statistics.median(samples["(none)"]["process"]),
    }
    for mod in MODULES:
        result[mod] = {
            "import_ms": statistics.median(samples[mod]["import"]),
            "import_min_ms": min(samples[mod]["import"]),
            "process_ms": statistics.median(samples[mod]["process"]),
            "hitl_modules": loaded[mod][0],
            "modules": loaded[mod][1],
            "slowest": slowest_imports(mod) if profile else [],
        }
    return result


def slowest_imports(mod: str, top: int = 5) -> list[tuple[str, float]]:
    """The top-level packages whose import took longest (`-X importtime`, cumulative ms)."""
    _, _, err = _wall([sys.executable, "-X", "importtime", "-c", f"import {mod}"])
    best: dict[str, float] = {}
    for line in err.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2].strip()
        if "." in name or name == mod.split(".")[0]:
            continue  # a package's first import counts its submodules
        best[name] = max(best.get(name, 0.0), int(parts[1]) / 1000)
    return sorted(best.items(), key=lambda kv: -kv[1])[:top]


def console_pages(repeat: int, rows: int = CONSOLE_ROWS) -> dict[str, Any]:
    """The console's pages with `rows` pending calls in memory (`bench.console_inbox`)."""
    return {"rows": rows, "pages": console_inbox.measure(rows, repeat, CONSOLE_PAGES)}


def measure(quick: bool) -> dict[str, Any]:
    # Fresh interpreters are most of `make bench`'s first minute on a loaded machine: the median
    # of 3 (5 before 2026-11-26), one run with `--quick` (no median: not for quoting).
    return {
        "imports": import_times(1 if quick else 3, profile=not quick),
        "console": console_pages(3 if quick else 5),
    }


# ----------------------------------------------------------------------------- report


def markdown(meta: dict[str, Any]) -> list[str]:
    """The tables of `measure`'s figures (empty for results from before they existed)."""
    imports, console = meta.get("imports"), meta.get("console")
    lines: list[str] = []
    if imports:
        lines += [
            f"Startup, fresh interpreter ({_of(imports['repeat'])}; a bare `python -c "
            f"pass` takes {imports['bare_interpreter_ms']:.0f} ms):",
            "",
            "| import | the import alone (ms) | whole process (ms) | `hitl` modules | "
            "modules | slowest packages (`-X importtime`, cumulative ms) |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for mod in MODULES:
            m = imports[mod]
            slow = ", ".join(f"{name} {ms:.0f}" for name, ms in m["slowest"])
            lines.append(
                f"| `import {mod}` | {m['import_ms']:.0f} | {m['process_ms']:.0f} | "
                f"{m['hitl_modules']} | {m['modules']} | {slow} |"
            )
    if console:
        if lines:
            lines.append("")
        pages = console["pages"]
        repeat = next(iter(pages.values()))["repeat"] if pages else 0
        lines += [
            f"The console's pages with {console['rows']:,} pending calls held in memory (its "
            f"own cost: routing, session, filtering, template; {_of(repeat)}):",
            "",
            "| page | median (ms) | max (ms) | size (KiB) |",
            "|---|---:|---:|---:|",
        ]
        for what, m in pages.items():
            lines.append(
                f"| {what} | {m['median_ms']:.0f} | {m['max_ms']:.0f} | {m['bytes'] / 1024:.0f} |"
            )
    return lines


def _of(repeat: int) -> str:
    return "one run" if repeat == 1 else f"median of {repeat}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.client_costs", description=__doc__)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    got = measure(args.quick)
    print(json.dumps(got, indent=1))
    print("\n".join(markdown(got)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
