"""Markdown tables from a `bench.run` result (and their copy in docs/benchmarks.md)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from bench import client_costs

START = "<!-- bench:results:start -->"
END = "<!-- bench:results:end -->"
DOCS_PAGE = Path(__file__).parent.parent / "docs" / "benchmarks.md"
"""The page whose results block `make bench` rewrites."""


def _get(d: Any, *path: Any) -> Any:
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def _num(x: Any, digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{digits}f}"


def _ratio(a: Any, b: Any) -> float | None:
    if a is None or b is None or not b or (isinstance(a, float) and math.isnan(a)):
        return None
    return float(a) / float(b)


def _verdict(ratio: float | None, target: str | None) -> str:
    if ratio is None or not target:
        return ""
    m = re.match(r"([<>]=)\s*([\d.]+)", target)
    if not m:
        return ""
    op, bound = m.group(1), float(m.group(2))
    ok = ratio <= bound if op == "<=" else ratio >= bound
    return "met" if ok else "**missed**"


def _row(label: str, ours: Any, peer: Any, digits: int, target: str | None = None) -> str:
    r = _ratio(ours, peer)
    return (
        f"| {label} | {_num(ours, digits)} | {_num(peer, digits)} | "
        f"{_num(r, 2) + 'x' if r is not None else '-'} | "
        f"{('ratio ' + target.replace('>=', '≥ ').replace('<=', '≤ ') + 'x') if target else ''} | "
        f"{_verdict(r, target)} |"
    )


def _abs_row(
    label: str,
    ours: Any,
    peer: Any,
    digits: int,
    target: str,
    ok: bool | None,
    ratio: bool = True,
) -> str:
    r = _ratio(ours, peer) if ratio else None
    verdict = "" if ok is None else ("met" if ok else "**missed**")
    return (
        f"| {label} | {_num(ours, digits)} | {_num(peer, digits)} | "
        f"{_num(r, 2) + 'x' if r is not None else '-'} | {target} | {verdict} |"
    )


def _slope(at: dict[str, Any] | None, a: int, b: int) -> float | None:
    if not at or str(a) not in at or str(b) not in at:
        return None
    return (at[str(b)]["bytes"] - at[str(a)]["bytes"]) / (b - a)


def main_table(res: dict[str, Any]) -> list[str]:
    s = res["settings"].get("tuned", {})
    lat, tp, park = s.get("latency", {}), dict(s.get("throughput", {})), s.get("parked", {})
    runner = tp.get("ours")  # the public API; the headline rows use the operator path
    tp["ours"] = tp.get("ours-client") or tp.get("ours")
    hist, long_, floor = (
        s.get("history_one_approval", {}),
        s.get("long_run", {}),
        s.get("floor", {}),
    )
    lines = [
        "| metric (tuned dev server, each side's default configuration, real model path) | ours "
        "| peer | "
        "ours/peer | target | |",
        "|---|---:|---:|---:|---|---|",
    ]
    for leg, name in (
        ("start_pending_ms", "start → pending visible"),
        ("decide_complete_ms", "decision → completed"),
    ):
        for q in ("p50", "p95"):
            lines.append(
                _row(
                    f"{name}, {q} (ms)",
                    _get(lat, "ours", leg, q),
                    _get(lat, "peer", leg, q),
                    0,
                    "<=0.7" if q == "p50" else None,
                )
            )
    runs = _get(tp, "ours", "runs") or _get(tp, "peer", "runs")
    lines.append(
        _row(
            f"throughput, {runs} runs at once (runs/s)",
            _get(tp, "ours", "runs_per_s"),
            _get(tp, "peer", "runs_per_s"),
            2,
            ">=1.5",
        )
    )
    api = _ratio(_get(runner, "runs_per_s"), _get(tp, "ours", "runs_per_s"))
    done = f"{runner['completed']} of {runner['runs']} completed" if runner else ""
    lines.append(
        _abs_row(
            f"`Runner.run` (the public API), {runs} runs at once: runs/s ÷ the operator path's "
            f"(ours; {done})",
            api,
            None,
            2,
            "ours ≥ 0.9",
            None
            if api is None or not runner
            else api >= 0.9 and runner["completed"] == runner["runs"],
            ratio=False,
        )
    )
    lines.append(
        _row(
            "server CPU per run (ms)",
            _get(tp, "ours", "server_cpu_ms_per_run"),
            _get(tp, "peer", "server_cpu_ms_per_run"),
            0,
            "<=0.7",
        )
    )
    for key, label in (
        ("persistence_requests", "server database operations per run"),
        ("visibility_persistence_requests", "… of which visibility (search) writes/reads"),
        ("task_requests", "server history tasks per run (transfer, timer, visibility)"),
    ):
        lines.append(
            _row(
                label,
                _get(tp, "ours", "server_counters_per_run", key, "total"),
                _get(tp, "peer", "server_counters_per_run", key, "total"),
                1,
            )
        )
    lines.append(
        _row(
            "frontend RPCs per run (client + worker calls)",
            _get(tp, "ours", "server_counters_per_run", "frontend_rpcs"),
            _get(tp, "peer", "server_counters_per_run", "frontend_rpcs"),
            1,
        )
    )
    for what, label in (("worker", "worker"), ("client", "client (driver)")):
        lines.append(
            _row(
                f"{label} CPU per run (ms)",
                _get(tp, "ours", f"{what}_cpu_ms_per_run"),
                _get(tp, "peer", f"{what}_cpu_ms_per_run"),
                0,
            )
        )
    n = _get(park, "ours-default", "runs") or _get(park, "peer-default", "runs")
    oc = _get(park, "ours-default", "max_cached_workflows")
    # The target is judged on the second half of the runs: by then our cache (100) is full,
    # so each further parked run adds what a parked run costs at any scale. The overall
    # average also carries the cache's 100 runs, spread over N: it depends on N (0.16x at
    # 1,000 runs, 0.43x at 300), so it is shown, not judged.
    lines.append(
        _row(
            f"worker RSS per parked run, default worker config, second half of {n} parked "
            f"(KB; cache: ours {oc if oc != 'default' else '100'}, peer 1000)",
            _get(park, "ours-default", "worker_rss_kb_per_run_second_half"),
            _get(park, "peer-default", "worker_rss_kb_per_run_second_half"),
            1,
            "<=0.25",
        )
    )
    lines.append(
        _row(
            f"worker RSS per parked run, default worker config, overall ({n} parked; "
            "includes the cached runs)",
            _get(park, "ours-default", "worker_rss_kb_per_run"),
            _get(park, "peer-default", "worker_rss_kb_per_run"),
            1,
        )
    )
    flat_o = _get(park, "ours-bounded", "worker_rss_kb_per_run_second_half")
    flat_p = _get(park, "peer-bounded", "worker_rss_kb_per_run_second_half")
    lines.append(
        _abs_row(
            "worker RSS growth per run with cache 50, second half of the runs (KB; runs "
            f"replayed by a fresh worker: {_get(park, 'ours-bounded', 'runs')})",
            flat_o,
            flat_p,
            1,
            "flat (≈ 0)",
            None if flat_o is None else flat_o < 5.0,
            ratio=False,
        )
    )
    lines.append(
        _row(
            "worker RSS per parked run, cache 50, overall (KB)",
            _get(park, "ours-bounded", "worker_rss_kb_per_run"),
            _get(park, "peer-bounded", "worker_rss_kb_per_run"),
            1,
        )
    )
    lines.append(
        _row(
            "server storage per parked run (KB)",
            _get(park, "ours-default", "server_storage_kb_per_run"),
            _get(park, "peer-default", "server_storage_kb_per_run"),
            1,
        )
    )
    inbox = _get(park, "ours-default", "hitl_pending")
    lines.append(
        _abs_row(
            f"list every pending call of the {n} parked runs (ms; ours: `hitl pending --json` "
            "with no worker, from the runs' memos, process start included; peer: list the "
            "running runs + the `pending` query of each)",
            None if inbox is None else inbox["wall_s"] * 1000,
            _get(park, "peer-default", "listing", "list_and_query_ms"),
            0,
            "ours < 1,000",
            None if inbox is None else inbox["wall_s"] < 1.0 and inbox["calls"] >= (n or 0),
        )
    )
    sample = _get(park, "ours-default", "listing", "queried")
    lines.append(
        _row(
            f"query one parked run's pending calls, default worker: wall ms per run, 16 at a time "
            f"(ours: `status`, {sample} of the {n} runs, evicted but the last 100; peer: "
            "`pending`, all cached)",
            _get(park, "ours-default", "listing", "query_ms_per_run"),
            _get(park, "peer-default", "listing", "query_ms_per_run"),
            1,
            "<=1.0",
        )
    )
    lines.append(
        _row(
            "… worker CPU per query (ms)",
            _get(park, "ours-default", "listing", "worker_cpu_ms_per_run"),
            _get(park, "peer-default", "listing", "worker_cpu_ms_per_run"),
            1,
        )
    )
    lines.append(
        _row(
            "… by a fresh worker with cache 50 (every run replayed): worker CPU per query (ms)",
            _get(park, "ours-bounded", "listing", "worker_cpu_ms_per_run"),
            _get(park, "peer-bounded", "listing", "worker_cpu_ms_per_run"),
            1,
        )
    )
    for key in ("events", "bytes"):
        lines.append(
            _row(
                f"one-approval run: history {key}",
                _get(hist, "ours", key),
                _get(hist, "peer", key),
                0,
                "<=0.8",
            )
        )
    lines.append(
        _row(
            "one-approval run: workflow tasks",
            _get(hist, "ours", "workflow_tasks"),
            _get(hist, "peer", "workflow_tasks"),
            0,
        )
    )
    turns = sorted(
        int(k) for k in (_get(long_, "ours", "at_turn") or _get(long_, "peer", "at_turn") or {})
    )
    shown = [t for t in turns if t in (turns[0], 50, turns[-1])] if turns else []
    if len(shown) != 3:
        shown = turns[:1] + turns[len(turns) // 2 : len(turns) // 2 + 1] + turns[-1:]
    for t in shown:
        lines.append(
            _row(
                f"long run, 5 KB tool outputs: history after {t} turns (KB)",
                _kb(_get(long_, "ours", "at_turn", str(t), "bytes")),
                _kb(_get(long_, "peer", "at_turn", str(t), "bytes")),
                0,
            )
        )
    if len(shown) == 3:
        a, b, c = shown
        so = _growth(long_.get("ours"), a, b, c)
        sp = _growth(long_.get("peer"), a, b, c)
        lines.append(
            _abs_row(
                f"… bytes per turn {b}→{c} ÷ bytes per turn {a}→{b} (1 = linear)",
                so,
                sp,
                2,
                "ours linear",
                None if so is None else so < 1.25,
            )
        )
    fl = floor
    if fl:
        lines += [
            "",
            "| the floor (same server) | p50 (ms) | p95 (ms) |",
            "|---|---:|---:|",
        ]
        sdk = fl.get("sdk_in_process")
        if sdk:
            for leg, what in (
                ("start_pending_ms", "start → pending"),
                ("decide_complete_ms", "decision → completed"),
            ):
                lines.append(
                    f"| OpenAI Agents SDK in-process, no Temporal: {what} | "
                    f"{_num(sdk[leg]['p50'], 1)} | {_num(sdk[leg]['p95'], 1)} |"
                )
        for key, label in (
            ("raw_update_ms", "raw update round trip (bare workflow, handler returns at once)"),
            ("raw_update_with_start_ms", "raw update-with-start (start + first workflow task)"),
        ):
            if key in fl:
                lines.append(f"| {label} | {_num(fl[key]['p50'], 1)} | {_num(fl[key]['p95'], 1)} |")
        peer_lat = lat.get("peer", {})
        for key, what in (
            ("raw_steps", "no-op regular activities"),
            ("raw_steps_local_tool", "no-op activities, the tool a local one"),
        ):
            for leg, name in (
                ("start_pending_ms", "start → pending"),
                ("decide_complete_ms", "decision → completed"),
            ):
                x = _get(fl, key, leg)
                if not x:
                    continue
                r = _ratio(x["p50"], _get(peer_lat, leg, "p50"))
                lines.append(
                    f"| the one-approval run's steps and nothing else ({what}; bare workflow): "
                    f"{name} (p50 = {_num(r, 2)}x the peer's) | {_num(x['p50'], 1)} | "
                    f"{_num(x['p95'], 1)} |"
                )
        burst = fl.get("raw_steps_throughput")
        peer_tp = s.get("throughput", {}).get("peer", {})
        if burst:
            lines += [
                "",
                f"| the floor under load: the bare workflow's steps, {burst['runs']} runs at once "
                "(no-op regular activities) | bare workflow | peer | bare/peer |",
                "|---|---:|---:|---:|",
            ]
            bare = _get(fl, "raw_steps", "history") or {}
            peer_h = s.get("history_one_approval", {}).get("peer", {})
            for label, b, p, digits in (
                ("runs/s", burst.get("runs_per_s"), peer_tp.get("runs_per_s"), 2),
                (
                    "server CPU per run (ms)",
                    burst.get("server_cpu_ms_per_run"),
                    peer_tp.get("server_cpu_ms_per_run"),
                    0,
                ),
                ("one run's history events", bare.get("events"), peer_h.get("events"), 0),
                ("one run's history bytes", bare.get("bytes"), peer_h.get("bytes"), 0),
            ):
                lines.append(
                    f"| {label} | {_num(b, digits)} | {_num(p, digits)} | "
                    f"{_num(_ratio(b, p), 2)}x |"
                )
    return lines


def local_tool_table(res: dict[str, Any]) -> list[str]:
    """The opt-in local tool (`ours-local-tool`) against the same peer run, with the targets."""
    s, o = res["settings"].get("tuned", {}), "ours-local-tool"
    lat, tp, hist = s.get("latency", {}), s.get("throughput", {}), s.get("history_one_approval", {})
    if o not in lat and o not in tp:
        return []
    rows: list[tuple[str, dict[str, Any], tuple[str, ...], int, str | None]] = [
        ("start → pending visible, p50 (ms)", lat, ("start_pending_ms", "p50"), 0, "<=0.7"),
        ("decision → completed, p50 (ms)", lat, ("decide_complete_ms", "p50"), 0, "<=0.7"),
        (
            f"throughput, {_get(tp, o, 'runs')} runs at once (runs/s)",
            tp,
            ("runs_per_s",),
            2,
            ">=1.5",
        ),
        ("server CPU per run (ms)", tp, ("server_cpu_ms_per_run",), 0, "<=0.7"),
        ("worker CPU per run (ms)", tp, ("worker_cpu_ms_per_run",), 0, None),
        ("one-approval run: history events", hist, ("events",), 0, "<=0.8"),
        ("one-approval run: history bytes", hist, ("bytes",), 0, "<=0.8"),
        ("one-approval run: workflow tasks", hist, ("workflow_tasks",), 0, None),
    ]
    return [
        "| metric (tuned dev server, real model path; ours: `Runner.run`, the tool as a local "
        "activity) | ours | peer | ours/peer | target | |",
        "|---|---:|---:|---:|---|---|",
        *(_row(label, _get(d, o, *k), _get(d, "peer", *k), n, t) for label, d, k, n, t in rows),
    ]


def _kb(x: Any) -> float | None:
    return None if x is None else x / 1024


def _growth(run: dict[str, Any] | None, a: int, b: int, c: int) -> float | None:
    if not run:
        return None
    s1, s2 = _slope(run.get("at_turn"), a, b), _slope(run.get("at_turn"), b, c)
    return _ratio(s2, s1)


VARIANT_ORDER = (
    "ours",
    "ours-client",
    "ours-local-tool",
    "ours-uncapped",
    "peer",
    "peer-inline",
    "ours-scripted",
    "ours-regular",
    "peer-scripted",
    "peer-local",
)


def variants_table(res: dict[str, Any]) -> list[str]:
    s = res["settings"].get("tuned", {})
    names = [
        n
        for n in VARIANT_ORDER
        if n in s.get("latency", {}) or n in s.get("throughput", {}) or n in s.get("long_run", {})
    ]
    if not names:
        return []
    labels = res["meta"]["variants"]
    lines = [
        "| variant (tuned server) | start → pending p50 / p95 (ms) "
        "| decision → completed p50 / p95 (ms) | runs/s | server / worker CPU per run (ms) "
        "| events, bytes (one approval) | "
        "history after "
        + str(max(int(k) for k in res["meta"]["plan"]["long_turns"]))
        + " turns (KB) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    top = str(max(int(k) for k in res["meta"]["plan"]["long_turns"]))
    for n in names:
        lat = s.get("latency", {}).get(n, {})
        tp = s.get("throughput", {}).get(n) or {}
        h = s.get("history_one_approval", {}).get(n, {})
        lr = s.get("long_run", {}).get(n, {})
        failed = (
            f" ({tp['n_errors']} of {tp['runs']} failed: {tp.get('error_kinds')})"
            if tp.get("n_errors")
            else ""
        )
        sp, dc = lat.get("start_pending_ms", {}), lat.get("decide_complete_ms", {})
        cpu = f"{_num(tp.get('server_cpu_ms_per_run'))} / {_num(tp.get('worker_cpu_ms_per_run'))}"
        lines.append(
            f"| `{n}`: {labels[n]['label']} | "
            f"{_num(sp.get('p50'))} / {_num(sp.get('p95'))} | "
            f"{_num(dc.get('p50'))} / {_num(dc.get('p95'))} | "
            f"{_num(tp.get('runs_per_s'), 2)}{' (' + str(tp['runs']) + ' at once)' if tp else ''}"
            f"{failed} | {cpu} | "
            f"{_num(h.get('events'))}, {_num(h.get('bytes'))} | "
            f"{_num(_kb(_get(lr, 'at_turn', top, 'bytes')))} |"
        )
    return lines


def default_server_table(res: dict[str, Any]) -> list[str]:
    s = res["settings"].get("default")
    if not s:
        return []
    lat, tp = s.get("latency", {}), dict(s.get("throughput", {}))
    tp["ours"] = tp.get("ours-client") or tp.get("ours")
    lines = [
        "| metric (untuned dev server: transferProcessorMaxPollRPS = 20) | ours | peer "
        "| ours/peer |",
        "|---|---:|---:|---:|",
    ]
    for leg, name in (
        ("start_pending_ms", "start → pending"),
        ("decide_complete_ms", "decision → completed"),
    ):
        for q in ("p50", "p95"):
            o, p = _get(lat, "ours", leg, q), _get(lat, "peer", leg, q)
            r = _ratio(o, p)
            lines.append(f"| {name}, {q} (ms) | {_num(o)} | {_num(p)} | {_num(r, 2)}x |")
    for key, label, d in (
        ("runs_per_s", "throughput (runs/s)", 2),
        ("server_cpu_ms_per_run", "server CPU per run (ms)", 0),
        ("worker_cpu_ms_per_run", "worker CPU per run (ms)", 0),
    ):
        o, p = _get(tp, "ours", key), _get(tp, "peer", key)
        r = _ratio(o, p)
        lines.append(f"| {label} | {_num(o, d)} | {_num(p, d)} | {_num(r, 2)}x |")
    n = _get(lat, "ours", "start_pending_ms", "n")
    runs = _get(tp, "ours", "runs")
    lines.append(f"| (latency over {n} sequential runs; throughput with {runs} runs) | | | |")
    return lines


def header(res: dict[str, Any]) -> list[str]:
    m = res["meta"]
    mach = m["machine"]
    ov, pv = m["versions"].get("ours", {}), m["versions"].get("peer", {})
    lat = _get(res, "settings", "tuned", "latency") or {}
    ns = sorted({v["start_pending_ms"]["n"] for v in lat.values() if "start_pending_ms" in v})
    lat_n = " or ".join(str(n) for n in reversed(ns)) if ns else "-"
    dirty = ov.get("uncommitted_runtime_files")
    commit = f"commit {ov.get('hitl_commit')}" + (
        f" + uncommitted changes to {len(dirty)} runtime files (diff "
        f"{ov.get('uncommitted_runtime_diff_sha256')})"
        if dirty
        else ""
    )
    out = [
        f"Measured {m['date']}{' (quick run: small N, not for quoting)' if m.get('quick') else ''}"
        f" in {m.get('duration_s', 0):.0f} s on {mach['cores']} cores ({mach['cpu']}), "
        f"{mach['memory_gb']} GB, {mach['os']}, Python {mach['python']}; load average "
        f"{mach['load_average_at_start'][0]:.2f} at start, "
        f"{(mach.get('load_average_at_end') or [0.0])[0]:.2f} at end "
        "(a shared machine: read the ratios).",
        "",
        f"- ours: hitl {ov.get('hitl-temporal')} ({commit}), temporalio "
        f"{ov.get('temporalio')}, {ov.get('temporal_cli')}",
    ]
    if pv:
        out.append(
            f"- peer: temporalio-openai-agents {pv.get('temporalio-openai-agents')}, "
            f"openai-agents {pv.get('openai-agents')}, temporalio {pv.get('temporalio')}"
        )
    imp = m.get("client_import")
    if imp:
        out.append(
            f"- `import hitl` in a fresh interpreter: {imp['median_ms']:.0f} ms (median; "
            f"fastest {imp['min_ms']:.0f} ms), {imp['hitl_modules']} `hitl` modules loaded "
            "(client code only: no workflow, activity, worker or console module)"
        )
    out.append(
        "- the real model path on both sides: our `OpenAIModel` and the peer's default OpenAI "
        "Responses model, each through the `openai` client, against one local server speaking "
        "the OpenAI wire format (`bench.wire`, its own process) that answers at once with the "
        "script; the peer's tracing export is off (this machine cannot reach api.openai.com)"
    )
    out.append(
        f"- one dev server process for both sides per setting, SQLite in a temp dir; latency = "
        f"{lat_n} sequential runs per variant (the most for ours and the peer), interleaved in "
        "blocks of 5"
    )
    spent = _get(res, "settings", "tuned", "section_seconds") or {}
    if spent:
        took = [f"client costs {m['client_costs_s']:.0f}"] if "client_costs_s" in m else []
        took += [f"{k.replace('_', ' ')} {v:.0f}" for k, v in spent.items()]
        out.append(f"- where this run's time went (s): {', '.join(took)}")
    return out


def bytes_table(res: dict[str, Any]) -> list[str]:
    h = res["settings"].get("tuned", {}).get("history_one_approval", {})
    lines = []
    for name in ("ours", "peer"):
        by = _get(h, name, "bytes_by_type")
        if not by:
            continue
        counts = _get(h, name, "by_type") or {}
        cells = ", ".join(
            f"{k.lower()}{' (' + str(counts[k]) + ')' if counts.get(k, 1) > 1 else ''} {v:,}"
            for k, v in by.items()
        )
        lines.append(f"- {name} ({h[name]['bytes']:,} bytes): {cells}")
    return lines


def steps_table(res: dict[str, Any]) -> list[str]:
    """The sample one-approval run, step by step (the server's event times)."""
    h = res["settings"].get("tuned", {}).get("history_one_approval", {})
    lines = []
    for name in ("ours", "ours-local-tool", "peer"):
        st = _get(h, name, "steps")
        if not st:
            continue
        cells = " → ".join(
            (f"[{_num(x['wait_ms'], 1)}] " if x["wait_ms"] >= 0.5 else "")
            + f"{x['step']} {_num(x['ms'], 1)}"
            for x in st
        )
        tasks = sum(x["ms"] for x in st if x["step"] == "workflow task")
        acts = sum(x["ms"] for x in st if x["step"] != "workflow task")
        n_tasks = sum(1 for x in st if x["step"] == "workflow task")
        lines.append(
            f"- {name}: {cells} (workflow tasks: {n_tasks}, {_num(tasks, 1)} ms; activities: "
            f"{len(st) - n_tasks}, {_num(acts, 1)} ms)"
        )
    return lines


def notes(res: dict[str, Any]) -> list[str]:
    s = res["settings"].get("tuned", {})
    out = []
    tp = s.get("throughput", {})
    if "ours-client" in tp:
        out.append(
            "- ours' throughput, CPU and server-work rows use the operator path (client updates, "
            "as the peer's driver does); the public `Runner.run` under the same load has its own "
            "row above and in the variants table."
        )
    for setting, r in res["settings"].items():
        for what in r.get("skipped", []):
            out.append(f"- skipped ({setting} server) to stay within the time budget: {what}.")
    if res["meta"].get("skipped"):
        out.append(f"- skipped: {res['meta']['skipped']}.")
    return out


def markdown(res: dict[str, Any]) -> str:
    parts = [*header(res), "", *main_table(res)]
    lt = local_tool_table(res)
    if lt:
        parts += [
            "",
            "The same job with the refund tool as a local activity (opt-in, "
            "`function_tool(local_activity=True)`: an approved call runs inside the decision's "
            "workflow task), against the same peer runs:",
            "",
            *lt,
        ]
    extra = notes(res)
    if extra:
        parts += ["", *extra]
    costs = client_costs.markdown(res["meta"])
    if costs:
        parts += ["", *costs]
    hb = bytes_table(res)
    if hb:
        parts += [
            "",
            "Where the one-approval run's history bytes go (bytes by event type):",
            "",
            *hb,
        ]
    tt = steps_table(res)
    if tt:
        parts += [
            "",
            "Where the sample one-approval run's time went (ms, by the server's event times: each "
            "workflow task from started to completed, each activity from scheduled to completed, "
            "[the wait before a step]; the long wait is the driver deciding):",
            "",
            *tt,
        ]
    vt = variants_table(res)
    if vt:
        parts += ["", "Like-for-like variants (same job, same server):", "", *vt]
    dt = default_server_table(res)
    if dt:
        parts += ["", "The same on the untuned dev server (its defaults):", "", *dt]
    return "\n".join(parts) + "\n"


def update_docs(path: Path, md: str) -> None:
    """Replace the results block between the markers of a docs page (if present)."""
    if not path.exists():
        return
    text = path.read_text()
    if START not in text or END not in text:
        return
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    path.write_text(f"{before}{START}\n{md}{END}{after}")


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.report [RESULT.json]`: re-render the markdown (and the docs block)."""
    import json
    import sys

    args = sys.argv[1:] if argv is None else argv
    src = Path(args[0]) if args else Path(__file__).parent / "results" / "latest.json"
    res = json.loads(src.read_text())
    md = markdown(res)
    src.with_suffix(".md").write_text(md)
    if src.name == "latest.json":
        update_docs(DOCS_PAGE, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
