"""A policy's limit across 50 concurrent agent runs on one customer key (issue 29), on the real
dev server, with the worker killed in the middle: no more refunds run than the limit allows.

`tests/e2e/test_ledger.py` drives the ledger directly; this drives whole runs, so what is
checked is the chain a run makes of it: the policy's rule reserves while the call is planned,
the tool runs only on a fit, the run commits what ran and releases what was denied. Checked
from the tools' own effects and from the ledger's histories, not from what the runs said.
"""

from __future__ import annotations

import asyncio
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from temporalio.client import Client

from hitl import Runner
from hitl.wire import LEDGER_WORKFLOW_TYPE
from hitl.worker.devserver import DevServer
from tests.helpers import Ledger, WorkerProcess, queue_name, wait_for
from tests.ledger_history import reservations
from tests.workflows.test_policy_limits import desk

RUNS = 50
AMOUNT = 120
ABOVE = 2000
FITS = ABOVE // AMOUNT
"""16 refunds of $120 fit under $2,000 (1,920); a 17th would make 2,040."""

POLICY = f"""
policy: capped
version: "1"
rules:
  - id: daily-cap
    tools: [refund]
    limit:
      key: "refunds:{{customer_id}}"
      window: 24h
      measure: sum
      of: amount
      above: {ABOVE}
    effect: deny
    message: This customer's refunds today reached the cap.
"""


@pytest.mark.timeout(240)  # two worker starts and a crash recovery
async def test_fifty_runs_on_one_customer_never_refund_past_the_cap_across_a_worker_crash(
    dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    tq, customer = queue_name("capped"), f"C-{uuid.uuid4().hex[:6]}"
    effects = tmp_path / "effects.db"
    policy = tmp_path / "capped.yaml"
    policy.write_text(POLICY)
    Ledger(effects)
    env = {"HITL_TEST_LEDGER": str(effects), "HITL_LEDGER_KEY": "an-e2e-cap-key-0123456789abcdef"}
    args = ["--policy", str(policy)]
    agents = "tests.workflows.test_policy_limits:desk"  # its refund tool; the cap is ours
    outputs: list[str] = []

    async def one() -> str:
        result = await Runner.run(
            desk, f"{customer}:{AMOUNT}", client=dev_client, task_queue=tq, serve=False
        )
        outputs.append(str(result.final_output))
        return str(result.final_output)

    first = WorkerProcess(dev_server.address, tq, agents=agents, env=env, extra_args=args).start()
    try:
        runs = [asyncio.create_task(one()) for _ in range(RUNS)]
        await wait_for(lambda: len(outputs) >= 8, timeout=120, what="8 runs to finish")
    finally:
        first.kill()  # mid-way: runs planning, reserving, running or committing
    assert len(outputs) < RUNS, "the crash came in the middle"
    with WorkerProcess(dev_server.address, tq, agents=agents, env=env, extra_args=args):
        finals = await asyncio.wait_for(asyncio.gather(*runs), 180)
        ledgers = [
            w.id
            async for w in dev_client.list_workflows(
                f'WorkflowType="{LEDGER_WORKFLOW_TYPE}" AND TaskQueue="{tq}"'
            )
        ]

    # What ran: the tools' own effects, one per idempotency key.
    ran = Ledger(effects).rows("refund")
    assert len(ran) == FITS, f"{len(ran)} refunds ran; the cap lets {FITS} through"
    assert sum(Decimal(str(AMOUNT)) for _ in ran) <= ABOVE
    assert sum(1 for f in finals if f.startswith("refunded")) == FITS
    others = [f for f in finals if not f.startswith("refunded") and "reached the cap" not in f]
    assert sum(1 for f in finals if "reached the cap" in f) == RUNS - FITS, others
    # What the ledger recorded: one reservation per run, each accepted and answered once, and
    # the "fits" answers never past the cap.
    (ledger_id,) = ledgers
    seen = await reservations(dev_client, ledger_id)
    assert set(seen.accepted_per_reservation().values()) == {1}
    # (Seen once with the suite at -n 3: 44 for 50 runs, every output "refunded" or "reached
    # the cap". A run whose rule failed closed now says "could not be checked" instead.)
    assert len(seen.accepted) == RUNS, f"{len(seen.accepted)} reservations for {RUNS} runs"
    fits = [seen.answers[u] for u in seen.update_ids if seen.answers[u].fits]
    assert len(fits) == FITS and sum(Decimal(a.amount) for a in fits) <= ABOVE
