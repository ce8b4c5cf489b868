"""Charts from a `bench.run` result: `python -m bench.charts [RESULT.json]` (`make bench` runs it).

Three pictures for docs/benchmarks.md, drawn from the committed results file only:

- `bench-history.png`: history size against turns (the long run, 5 KB tool outputs), both sides;
- `bench-latency.png`: the latency distributions of the headline runs (every sample, sorted);
- `bench-scaling.png`: runs per second against runs started at once.

Needs matplotlib (`pip install -e ".[bench]"`, which `make bench` does); without it the charts
are skipped with a message and the tables are still written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

IMG = Path(__file__).resolve().parent.parent / "docs" / "img"
SIDES = {"ours": ("ours", "#1f6feb"), "peer": ("peer", "#d1242f")}
EXTRA = {
    "ours-scripted": ("ours, scripted model (local activity)", "#1f6feb"),
    "peer-local": ("peer, scripted model (local activity)", "#d1242f"),
}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _save(plt: Any, fig: Any, out: Path) -> bool:
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return True


def history_chart(s: dict[str, Any], out: Path) -> bool:
    runs = s.get("long_run", {})
    if not any(k in runs for k in SIDES):
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for name, (label, color) in {**SIDES, **EXTRA}.items():
        at = runs.get(name, {}).get("at_turn")
        if not at:
            continue
        turns = sorted(int(t) for t in at)
        kb = [at[str(t)]["bytes"] / 1024 for t in turns]
        style = "-" if name in SIDES else ":"
        ax.plot(turns, kb, style, marker="o", ms=3, color=color, label=label)
    ax.set_xlabel("turns (one tool call with a 5 KB output each)")
    ax.set_ylabel("history size (KB)")
    ax.set_title("History against turns: linear (ours) vs the whole conversation per call")
    ax.legend(frameon=False)
    return _save(plt, fig, out)


def latency_chart(s: dict[str, Any], out: Path) -> bool:
    lat = s.get("latency", {})
    if not all(lat.get(k, {}).get("samples_ms") for k in SIDES):
        return False
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 3.4), sharey=False)
    for ax, (leg, title) in zip(
        axes,
        (("start_pending", "start → pending visible"), ("decide_complete", "decision → completed")),
        strict=True,
    ):
        for name, (label, color) in SIDES.items():
            xs = sorted(lat[name]["samples_ms"][leg])
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.step(xs, ys, where="post", color=color, label=f"{label} (n={len(xs)})")
        ax.set_title(title)
        ax.set_xlabel("ms")
        ax.set_ylim(0, 1.02)
    axes[0].set_ylabel("share of runs at most this fast")
    axes[0].legend(frameon=False, loc="lower right")
    fig.suptitle("Latency, real model path, sequential runs (cumulative distribution)")
    return _save(plt, fig, out)


def scaling_chart(s: dict[str, Any], out: Path) -> bool:
    scaling = s.get("scaling", {})
    if not scaling:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.0, 3.4))
    for name, levels in scaling.items():
        side = "ours" if name.startswith("ours") else "peer"
        label, color = SIDES[side]
        ns = sorted(int(n) for n in levels)
        ax.plot(ns, [levels[str(n)] for n in ns], marker="o", ms=3, color=color, label=label)
    ax.set_xlabel("runs started at once")
    ax.set_ylabel("runs completed per second")
    ax.set_xscale("log", base=2)
    ticks = sorted({int(n) for levels in scaling.values() for n in levels})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput against concurrency (one approval each, operator path)")
    ax.legend(frameon=False)
    return _save(plt, fig, out)


def draw(res: dict[str, Any], img: Path = IMG) -> list[Path]:
    """Draw every chart the result has data for; the paths written."""
    try:
        _plt()
    except ImportError:
        print("bench: charts skipped (matplotlib is not installed: pip install -e '.[bench]')")
        return []
    s = res["settings"].get("tuned", {})
    img.mkdir(parents=True, exist_ok=True)
    written = []
    for name, fn in (
        ("bench-history.png", history_chart),
        ("bench-latency.png", latency_chart),
        ("bench-scaling.png", scaling_chart),
    ):
        if fn(s, img / name):
            written.append(img / name)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    src = Path(args[0]) if args else Path(__file__).parent / "results" / "latest.json"
    for path in draw(json.loads(src.read_text())):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
