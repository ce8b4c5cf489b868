"""Limits across runs on the time-skipping server: windows of hours and days, releases on
rejection, expiry and tool failure, commits, and idempotent retries (history-checked).

Every test runs twice (cached and with a replay on every workflow task).
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from hitl.ledger import LedgerRefused, TemporalLimitLedger
from hitl.wire import (
    ACT_LEDGER_COMMIT,
    ACT_LEDGER_RELEASE,
    LEDGER_STATUS,
    LedgerStatus,
    LimitSpec,
    ReservationRef,
    ledger_reservation_id,
    ledger_workflow_id,
)
from tests.helpers import event_count, queue_name
from tests.workflows.ledger_support import (
    DAY,
    CallInput,
    CallOutput,
    Hold,
    LimitedCall,
    daily,
    ledger_client,
    ledger_worker,
)

ACCEPTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED


def unique(limit: LimitSpec) -> LimitSpec:
    """The same limit on a key no other test uses (ledgers outlive tests on the shared server)."""
    return limit.model_copy(update={"key": f"{limit.key}:{uuid.uuid4().hex[:8]}"})


async def status(env: WorkflowEnvironment, limit: LimitSpec) -> LedgerStatus:
    handle = env.client.get_workflow_handle(ledger_workflow_id(limit))
    result: LedgerStatus = await handle.query(LEDGER_STATUS, result_type=LedgerStatus)
    return result


async def test_a_daily_sum_counts_committed_amounts_until_they_leave_the_window(
    ts_env: WorkflowEnvironment, worker_cache: int
) -> None:
    tq = queue_name("ledger")
    limit = unique(daily())
    ledger = ledger_client(ts_env.client, tq)
    async with ledger_worker(ts_env.client, tq, worker_cache):
        first = await ledger.reserve("r-a", limit, amount="3000.00", threshold="5000")
        assert (first.fits, first.before, first.total) == (True, "0", "3000.00")
        await ledger.settle(ReservationRef(reservation_id="r-a", limit=limit), commit=True)
        over = await ledger.reserve("r-b", limit, amount="2500.50", threshold="5000")
        assert (over.fits, over.before, over.total) == (False, "3000.00", "5500.50")
        await ledger.settle(ReservationRef(reservation_id="r-b", limit=limit), commit=False)
        await ts_env.sleep(timedelta(hours=23))
        assert (await status(ts_env, limit)).total == "3000.00", "still inside the day"
        await ts_env.sleep(timedelta(hours=1, seconds=1))
        assert (await status(ts_env, limit)).total == "0", "the commit left the window"
        again = await ledger.reserve("r-c", limit, amount="2500.50", threshold="5000")
        assert (again.fits, again.before) == (True, "0")


async def test_at_most_three_per_hour_then_the_fourth_does_not_fit(
    ts_env: WorkflowEnvironment, worker_cache: int
) -> None:
    tq = queue_name("ledger")
    limit = unique(LimitSpec(key="close:account", kind="count", window_seconds=3600))
    ledger = ledger_client(ts_env.client, tq)
    async with ledger_worker(ts_env.client, tq, worker_cache):
        for n in range(3):
            ans = await ledger.reserve(f"r-{n}", limit, amount="1", threshold="3")
            assert ans.fits and ans.total == str(n + 1)
            await ledger.settle(ReservationRef(reservation_id=f"r-{n}", limit=limit), commit=True)
        fourth = await ledger.reserve("r-3", limit, amount="1", threshold="3")
        assert (fourth.fits, fourth.total) == (False, "4")
        await ledger.settle(ReservationRef(reservation_id="r-3", limit=limit), commit=False)
        await ts_env.sleep(timedelta(minutes=61))
        fifth = await ledger.reserve("r-4", limit, amount="1", threshold="3")
        assert (fifth.fits, fifth.before) == (True, "0"), "the hour passed"


async def test_a_week_window_keeps_a_commit_for_seven_days_and_a_held_call_as_long_as_it_waits(
    ts_env: WorkflowEnvironment, worker_cache: int
) -> None:
    tq = queue_name("ledger")
    limit = unique(daily(days=7))
    ledger = ledger_client(ts_env.client, tq)
    async with ledger_worker(ts_env.client, tq, worker_cache):
        await ledger.reserve("r-ran", limit, amount="100", threshold="1000")
        await ledger.settle(ReservationRef(reservation_id="r-ran", limit=limit), commit=True)
        await ledger.reserve("r-waits", limit, amount="40", threshold="1000")
        await ts_env.sleep(timedelta(days=6))
        assert (await status(ts_env, limit)).total == "140"
        await ts_env.sleep(timedelta(days=2))
        # The commit left its week; the call still waiting for a decision counts until settled.
        assert (await status(ts_env, limit)).total == "40"
        await ledger.settle(ReservationRef(reservation_id="r-waits", limit=limit), commit=True)
        assert (await status(ts_env, limit)).total == "40", "re-timed to when it ran"
        await ts_env.sleep(timedelta(days=7, seconds=1))
        assert (await status(ts_env, limit)).total == "0"


@pytest.mark.parametrize(
    ("how", "state", "reason"),
    [
        ("reject", "released", "rejected"),
        ("expire", "released", "expired"),
        ("fails", "released", "failed"),
        ("guardrail", "released", "refused"),
        ("approve", "committed", ""),
    ],
)
async def test_a_call_releases_its_reservation_unless_its_tool_ran(
    ts_env: WorkflowEnvironment, worker_cache: int, how: str, state: str, reason: str
) -> None:
    tq = queue_name("ledger")
    limit = unique(daily())
    ledger = ledger_client(ts_env.client, tq)
    hold = Hold(key=limit.key, amount="700", reservation_id=f"run-1:t1.1:{limit.key}")
    rid = ledger_reservation_id(hold.reservation_id)
    async with ledger_worker(ts_env.client, tq, worker_cache):
        held = await ledger.reserve(rid, limit, amount="700", threshold="1000")
        assert held.fits
        blocked = await ledger.reserve("r-other", limit, amount="400", threshold="1000")
        assert not blocked.fits, "the held call counts while it waits"
        await ledger.settle(ReservationRef(reservation_id="r-other", limit=limit), commit=False)
        handle = await ts_env.client.start_workflow(
            LimitedCall.run,
            CallInput(holds=[hold], deadline_seconds=2 * 3600, tool=how),
            id=f"call-{uuid.uuid4().hex[:8]}",
            task_queue=tq,
        )
        # No time skipping while waiting for the result: it would also fire the ledger's timer
        # (the day is over) before the test reads the entry.
        with ts_env.auto_time_skipping_disabled():
            if how == "expire":
                await ts_env.sleep(timedelta(hours=2, seconds=1))
            else:
                await handle.signal(LimitedCall.decide, "reject" if how == "reject" else "approve")
            out: CallOutput = await handle.result()
        assert out.settled is not None and [a.state for a in out.settled.answers] == [state]
        entry = (await status(ts_env, limit)).entries[rid]
        assert (entry.state, entry.reason) == (state, reason)
        after = await ledger.reserve("r-next", limit, amount="400", threshold="1000")
        assert after.fits is (state == "released")
        settles = [ACT_LEDGER_COMMIT if state == "committed" else ACT_LEDGER_RELEASE]
        assert scheduled_activities(await handle.fetch_history()) == (
            settles if how in ("reject", "expire") else ["limited_tool", *settles]
        )


async def test_a_call_without_holds_schedules_nothing_for_the_ledger(
    ts_env: WorkflowEnvironment, worker_cache: int
) -> None:
    tq = queue_name("ledger")
    async with ledger_worker(ts_env.client, tq, worker_cache):
        handle = await ts_env.client.start_workflow(
            LimitedCall.run, CallInput(holds=[]), id=f"call-{uuid.uuid4().hex[:8]}", task_queue=tq
        )
        await handle.signal(LimitedCall.decide, "approve")
        out: CallOutput = await handle.result()
    assert out.settled is None
    assert scheduled_activities(await handle.fetch_history()) == ["limited_tool"]


def scheduled_activities(hist: WorkflowHistory) -> list[str]:
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def test_resent_requests_are_applied_once_even_across_continue_as_new(
    ts_env: WorkflowEnvironment, worker_cache: int
) -> None:
    tq = queue_name("ledger")
    limit = unique(daily())
    ledger = ledger_client(ts_env.client, tq, continue_after_events=100)
    async with ledger_worker(ts_env.client, tq, worker_cache):
        first = await ledger.reserve("r-once", limit, amount="10", threshold="100")
        again = await ledger.reserve("r-once", limit, amount="10", threshold="100")
        assert again == first
        handle = ts_env.client.get_workflow_handle(ledger_workflow_id(limit))
        assert event_count(await handle.fetch_history(), ACCEPTED) == 1, "same update id"
        # Fill the history until the ledger continues as new, then resend: the new run answers
        # from the carried entry (update ids are only de-duplicated within one run).
        for n in range(40):
            await ledger.reserve(f"r-fill-{n}", limit, amount="1", threshold="100")
        started = (await handle.fetch_history()).events[0]
        assert started.workflow_execution_started_event_attributes.continued_execution_run_id
        resent = await ledger.reserve("r-once", limit, amount="10", threshold="100")
        assert resent == first
        assert (await status(ts_env, limit)).total == "50"
        ref = ReservationRef(reservation_id="r-once", limit=limit)
        released = await ledger.settle(ref, commit=False)
        twice = await ledger.settle(ref, commit=False)
        assert (released.state, twice.state) == ("released", "released")
        assert (await status(ts_env, limit)).total == "40"


async def test_a_conflicting_reservation_is_refused_and_changes_nothing(
    ts_env: WorkflowEnvironment, worker_cache: int
) -> None:
    tq = queue_name("ledger")
    limit = unique(daily())
    ledger = ledger_client(ts_env.client, tq)
    async with ledger_worker(ts_env.client, tq, worker_cache):
        await ledger.reserve("r-x", limit, amount="10", threshold="100")
        handle = ts_env.client.get_workflow_handle(ledger_workflow_id(limit))
        before = event_count(await handle.fetch_history(), ACCEPTED)
        # Another amount, or the same id made with another claim (someone without the key
        # who got there first): refused by the validator, not answered with the first answer.
        other = ledger_client(ts_env.client, tq, key=b"someone-else's-key-0123456789")
        for attempt in (
            ledger.reserve("r-x", limit, amount="90", threshold="100"),
            other.reserve("r-x", limit, amount="10", threshold="100"),
        ):
            with pytest.raises(LedgerRefused) as refused:
                await attempt
            assert refused.value.type == "ReservationConflict"
        # (The time-skipping server records the workflow task a refused update ran in; the dev
        # server does not: tests/hostile/test_ledger.py counts every event there.)
        assert event_count(await handle.fetch_history(), ACCEPTED) == before, "none accepted"
        assert (await status(ts_env, limit)).total == "10"


class Check(Hold):
    """A stand-in for the policy's `LimitCheck`."""

    threshold: str
    reserve: bool = True


async def test_the_policy_protocol_reserves_once_peeks_for_shadow_rules_and_settles(
    ts_env: WorkflowEnvironment, worker_cache: int
) -> None:
    tq = queue_name("ledger")
    key = f"refund:customer:{uuid.uuid4().hex[:8]}"
    policy = TemporalLimitLedger(ledger_client(ts_env.client, tq))

    def check(call: str, amount: str, **kw: object) -> Check:
        rid = f"run-1:{call}:{key}"
        return Check.model_validate(
            {"key": key, "amount": amount, "reservation_id": rid, "threshold": "5000", **kw}
        )

    async with ledger_worker(ts_env.client, tq, worker_cache):
        shadow = await policy.check_and_reserve(check("t1.1", "6000", reserve=False))
        assert shadow.model_dump() == {
            "total_before": "0", "total_after": "6000", "exceeded": True, "reserved": False
        }, "a shadow check of a ledger that does not exist yet"  # fmt: skip
        first = await policy.check_and_reserve(check("t1.1", "3000"))
        again = await policy.check_and_reserve(check("t1.1", "3000"))
        assert first == again and (first.exceeded, first.reserved) == (False, True)
        # A second rule on the same ledger with a lower threshold: its own answer, no second
        # reservation.
        strict = await policy.check_and_reserve(check("t1.1", "3000", threshold="2000"))
        assert strict.exceeded and strict.total_after == "3000"
        over = await policy.check_and_reserve(check("t2.1", "2500"))
        assert (over.total_before, over.total_after, over.exceeded) == ("3000", "5500", True)
        peek = await policy.check_and_reserve(check("t3.1", "1", reserve=False))
        assert (peek.total_before, peek.reserved) == ("5500", False)
        limit = LimitSpec(key=key, window_seconds=DAY)
        assert len((await status(ts_env, limit)).entries) == 2, "the shadow checks held nothing"
        await policy.release(check("t2.1", "2500"), "denied")
        await policy.release(check("t2.1", "2500"), "denied")  # at-least-once: a no-op
        await policy.commit(check("t1.1", "3000"))
        await policy.release(check("t1.1", "3000"), "rejected")  # it ran: stays counted
        await policy.release(check("t9.9", "1"), "rejected")  # unknown: a no-op
        final = await status(ts_env, limit)
        assert final.total == "3000"
        assert {e.state for e in final.entries.values()} == {"committed", "released"}
