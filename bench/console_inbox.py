"""How fast the console's inbox page renders: `python -m bench.console_inbox [--rows 1000]`.

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

from hitl.console.app import create_app
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
            call_id=f"call_{i:06d}_0",
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
        out.append(Row.of_pending("default", f"refund-{i}", "Refund desk", "hitl", call))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args()
    auth = Authenticator(mode="link", user="ann")
    cookie, _ = auth.sessions.issue("ann")
    # The bench's person sees every row (a viewer): rows name approver groups it is not in.
    app = create_app(Canned(rows(args.rows)), auth, rules=Rules(viewers=frozenset({"ann"})))
    times, size = [], 0
    with TestClient(app, base_url="http://127.0.0.1:8090", cookies={COOKIE: cookie}) as client:
        for query in ["/", "/inbox/rows", "/?q=order+1999&sort=newest", "/?group=finance"]:
            assert client.get(query).status_code == 200
        for _ in range(args.repeat):
            started = time.perf_counter()
            page = client.get("/")
            times.append(1000 * (time.perf_counter() - started))
            size = len(page.content)
    assert page.text.count("<tr data-call=") == args.rows
    print(
        f"inbox page with {args.rows} pending calls: median {statistics.median(times):.0f} ms, "
        f"max {max(times):.0f} ms over {args.repeat} renders, {size / 1024:.0f} KiB of HTML"
    )


if __name__ == "__main__":
    main()
