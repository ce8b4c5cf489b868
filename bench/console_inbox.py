"""How fast the console's inbox renders: `python -m bench.console_inbox [--rows 10000]`.

The inbox page (filters, counts, one row per pending call) is rendered from one reading of the
runs, which the console keeps for two seconds and shares between browsers. This measures the
page itself over HTTP (Starlette's test client: routing, session check, filtering, sorting, the
Jinja2 template, escaping) with N pending calls in memory, so the figure is the console's own
cost, apart from how long Temporal takes to answer the reading. Not part of `make bench`; the
docs quote its output (`docs/console.md`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime, timedelta

from starlette.testclient import TestClient

from hitl.console.app import PAGE_SIZE, create_app
from hitl.console.auth import COOKIE, Authenticator
from hitl.console.data import ConsoleData, Inbox, Row
from hitl.console.rules import Rules
from hitl.wire import ApprovalRequestData, PendingApproval


class Canned(ConsoleData):
    """A console data layer whose inbox is `rows` (no Temporal)."""

    def __init__(self, rows: list[Row]) -> None:
        super().__init__({"default": None})  # type: ignore[dict-item]
        self.rows = rows

    async def inbox(self) -> Inbox:
        return Inbox(rows=self.rows, read_at=time.monotonic())


def rows(n: int) -> list[Row]:
    now = datetime.now(UTC)
    out = []
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
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args()
    auth = Authenticator(mode="link", user="ann")
    cookie, _ = auth.sessions.issue("ann")
    # The bench's person sees every row (a viewer): rows name approver groups it is not in.
    app = create_app(Canned(rows(args.rows)), auth, rules=Rules(viewers=frozenset({"ann"})))
    pages = {
        "first page": "/",
        "search (one order)": f"/?q=order+{1000 + args.rows // 2}",
        "search (many), newest first": "/?q=refund&sort=newest",
        "waiting for me": "/?view=mine",
        "last page": f"/?page={-(-args.rows // PAGE_SIZE)}",
    }
    with TestClient(app, base_url="http://127.0.0.1:8090", cookies={COOKIE: cookie}) as client:
        for query in pages.values():
            assert client.get(query).status_code == 200
        first = client.get("/").text
        assert first.count("<tr data-call=") == min(args.rows, PAGE_SIZE)
        for what, query in pages.items():
            times, size = [], 0
            for _ in range(args.repeat):
                started = time.perf_counter()
                page = client.get(query)
                times.append(1000 * (time.perf_counter() - started))
                size = len(page.content)
            print(
                f"{what} of {args.rows} pending calls ({args.rows // 2} runs): median "
                f"{statistics.median(times):.0f} ms, max {max(times):.0f} ms over {args.repeat}, "
                f"{size / 1024:.0f} KiB"
            )


if __name__ == "__main__":
    main()
