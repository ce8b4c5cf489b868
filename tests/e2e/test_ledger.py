"""Limits across runs on the real dev server: 50 concurrent reservations on one key, with the
worker serving the ledger killed in the middle and the ledger continuing as new under load.

Checked from the ledger's own histories (every run of its chain): each reservation was
accepted and answered exactly once, and the amounts answered "fits" never exceed the limit.
"""

from __future__ import annotations

import asyncio
import uuid
from decimal import Decimal

import pytest
from temporalio.client import Client

from hitl.ledger import LedgerClient
from hitl.wire import LimitSpec, ReservationRef, ReserveAnswer, ledger_workflow_id
from hitl.worker.devserver import DevServer
from tests.helpers import WorkerProcess, queue_name, wait_for
from tests.ledger_history import chain, reservations

KEY = "an-e2e-ledger-key-0123456789"
CALLS = 50
AMOUNT = Decimal("120.50")
THRESHOLD = Decimal("2000")
"""16 calls of 120.50 fit (1928.00); the 17th would make 2048.50."""


@pytest.mark.timeout(240)  # two worker starts and a crash recovery: 28 to 54 s measured here
async def test_fifty_concurrent_reservations_never_exceed_the_limit_across_a_worker_crash(
    dev_server: DevServer, dev_client: Client
) -> None:
    tq = queue_name("ledger50")
    env = {"HITL_LEDGER_KEY": KEY}
    limit = LimitSpec(key=f"refund:customer:C-{uuid.uuid4().hex[:6]}", window_seconds=86400)
    # A short history budget: the ledger continues as new several times during the burst.
    ledger = LedgerClient(dev_client, task_queue=tq, key=KEY.encode(), continue_after_events=100)
    done: list[ReserveAnswer] = []

    async def reserve(n: int) -> ReserveAnswer:
        answer = await ledger.reserve(f"r-{n}", limit, amount=str(AMOUNT), threshold=str(THRESHOLD))
        done.append(answer)
        return answer

    first = WorkerProcess(dev_server.address, tq, env=env).start()
    try:
        tasks = [asyncio.create_task(reserve(n)) for n in range(CALLS)]
        await wait_for(lambda: len(done) >= 10, timeout=60, what="10 answers")
    finally:
        first.kill()  # mid-burst: some requests are in a workflow task that never completes
    at_crash = len(done)
    assert at_crash < CALLS, "the crash came in the middle of the burst"
    with WorkerProcess(dev_server.address, tq, env=env):
        answers = await asyncio.wait_for(asyncio.gather(*tasks), 180)
        # Settle as the runs would: the calls that fit ran, the others were refused.
        for n, ans in enumerate(answers):
            ref = ReservationRef(reservation_id=f"r-{n}", limit=limit, amount=str(AMOUNT))
            await ledger.settle(ref, commit=ans.fits, reason="" if ans.fits else "rejected")
        status = await ledger.status(limit)

    fitting = [a for a in answers if a.fits]
    assert len(fitting) == int(THRESHOLD // AMOUNT) == 16
    assert status is not None and Decimal(status.total) == 16 * AMOUNT <= THRESHOLD

    # The ledger's histories: each reservation accepted and answered once, in one order in
    # which every "fits" answer saw the total of the reservations before it.
    wid = ledger_workflow_id(limit)
    runs = await chain(dev_client, wid)
    assert len(runs) >= 2, "the ledger continued as new during the burst"
    seen = await reservations(dev_client, wid)
    assert set(seen.accepted_per_reservation().values()) == {1}
    assert len(seen.accepted) == CALLS and len(seen.answers) == CALLS
    total = Decimal(0)
    for req, update_id in zip(seen.accepted, seen.update_ids, strict=True):
        answer = seen.answers[update_id]
        assert Decimal(answer.before) == total, "each saw every reservation before it"
        total += Decimal(req.amount)
        if answer.fits:
            assert total <= THRESHOLD
    recorded_fits = sum(
        Decimal(seen.answers[u].amount) for u in seen.update_ids if seen.answers[u].fits
    )
    assert recorded_fits == 16 * AMOUNT <= THRESHOLD
    # What the clients were told is what the history says.
    pairs = zip(seen.accepted, seen.update_ids, strict=True)
    recorded = sorted(r.reservation_id for r, u in pairs if seen.answers[u].fits)
    assert sorted(a.reservation_id for a in fitting) == recorded
