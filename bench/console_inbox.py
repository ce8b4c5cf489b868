"""How fast the console's inbox renders: `python -m bench.console_inbox [--rows 10000]`.

The inbox page (filters, counts, one row per pending call) is rendered from one reading of the
runs, which the console keeps for two seconds and shares between browsers. This measures the
page itself over HTTP (Starlette's test client: routing, session check, filtering, sorting, the
Jinja2 template, escaping) with N pending calls in memory, so the figure is the console's own
cost, apart from how long Temporal takes to answer the reading (the scale soak,
`tests/e2e/test_parked_at_scale.py`, measures that against a dev server). The call page is
rendered from a run's snapshot held in memory likewise. `make bench` runs `measure` at 10,000
calls (`bench.client_costs`); the docs quote this module's output (`docs/console.md`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.testclient import TestClient

from hitl.console.app import PAGE_SIZE, create_app
from hitl.console.auth import COOKIE, Authenticator
from hitl.console.data import ConsoleData, Inbox, Row
from hitl.console.rules import Rules
from hitl.console.urls import CALL
from hitl.wire import ApprovalRequestData, PendingApproval, RunSnapshot, RunStatus


class Canned(ConsoleData):
    """A console data layer whose inbox is `rows` and whose runs are `runs` (no Temporal)."""

    def __init__(self, rows: list[Row], runs: dict[str, list[PendingApproval]]) -> None:
        super().__init__({"default": None})  # type: ignore[dict-item]
        self.rows = rows
        self.runs = runs

    async def inbox(self) -> Inbox:
        return Inbox(rows=self.rows, read_at=time.monotonic())

    async def snapshot(self, namespace: str, workflow_id: str) -> RunSnapshot:
        pending = self.runs[workflow_id]
        status = RunStatus(
            workflow_id=workflow_id,
            run_id="r-" + workflow_id,
            phase="awaiting_approval",
            agent="Refund desk",
            turn=1,
            pending=pending,
        )
        first = pending[0].request
        said = first.title if first else ""
        return RunSnapshot(
            status=status, input_items=[{"role": "user", "content": said}], new_items=[]
        )


def rows(n: int) -> tuple[list[Row], dict[str, list[PendingApproval]]]:
    """`n` pending calls, two per run: the inbox's rows and each run's calls."""
    now = datetime.now(UTC)
    out, runs = [], {}
    for i in range(n):
        call = PendingApproval(
            call_id=f"t1.{i % 2 + 1}",
            tool_name=("refund", "cancel_order", "send_email")[i % 3],
            agent_id="Refund desk",
            agent_name="Refund desk",
            arguments=f'{{"order_id": {1000 + i}, "amount": {i % 500}.0, "reason": "broken"}}',
            turn=1,
            requested_at=now - timedelta(minutes=i),
            request=ApprovalRequestData(
                title=f"Refund ${i % 500}.00 to customer {i} (order {1000 + i})",
                message="The agent wants to refund the order because it arrived broken.",
            ),
            approvers=["group:finance"] if i % 2 else [],
        )
        run = f"refund-{i // 2}"  # two calls per parked run
        out.append(Row.of_pending("default", run, "Refund desk", "hitl", call))
        runs.setdefault(run, []).append(call)
    return out, runs


def pages_for(n: int) -> dict[str, str]:
    """The pages measured, by name: the inbox's (first, searches, a view, last) and a call's."""
    run = f"refund-{n // 4}"
    return {
        "first page": "/",
        "search (one order)": f"/?q=order+{1000 + n // 2}",
        "search (many), newest first": "/?q=refund&sort=newest",
        "waiting for me": "/?view=mine",
        "last page": f"/?page={-(-n // PAGE_SIZE)}",
        "call page": f"{CALL}?ns=default&run={run}&call=t1.1",
    }


def measure(n: int, repeat: int, only: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Median and max milliseconds, and bytes, of each page with `n` pending calls."""
    auth = Authenticator(mode="link", user="ann")
    cookie, _ = auth.sessions.issue("ann")
    # The bench's person sees every row (a viewer): rows name approver groups it is not in.
    app = create_app(Canned(*rows(n)), auth, rules=Rules(viewers=frozenset({"ann"})))
    pages = {k: v for k, v in pages_for(n).items() if only is None or k in only}
    out: dict[str, Any] = {}
    with TestClient(app, base_url="http://127.0.0.1:8090", cookies={COOKIE: cookie}) as client:
        for query in pages.values():
            assert client.get(query).status_code == 200, query
        first = client.get("/").text
        assert first.count("<tr data-call=") == min(n, PAGE_SIZE)
        for what, query in pages.items():
            times, size = [], 0
            for _ in range(repeat):
                started = time.perf_counter()
                page = client.get(query)
                times.append(1000 * (time.perf_counter() - started))
                size = len(page.content)
            out[what] = {
                "median_ms": statistics.median(times),
                "max_ms": max(times),
                "repeat": repeat,
                "bytes": size,
            }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args()
    for what, m in measure(args.rows, args.repeat).items():
        print(
            f"{what} of {args.rows} pending calls ({args.rows // 2} runs): median "
            f"{m['median_ms']:.0f} ms, max {m['max_ms']:.0f} ms over {args.repeat}, "
            f"{m['bytes'] / 1024:.0f} KiB"
        )


if __name__ == "__main__":
    main()
