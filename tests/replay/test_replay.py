"""Replay recorded histories (completed, parked, continued-as-new) against today's code.

A failure here means a change to `AgentRun` would break runs already in flight: wrap it in
`workflow.patched(...)` (see docs/production.md) or re-record only if no such runs exist.

`hitl verify` also reads every recorded history: each executed call must be proven, except
where a history cannot prove it (named in `UNPROVABLE`, with the reason).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from hitl.cli.history import load_tree, prove_tree
from hitl.client import data_converter
from hitl.wire import RunInput, RunOutput
from hitl.worker.build import workflow_runner
from hitl.workflows.agent_run import AgentRun

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_histories_are_present() -> None:
    names = {p.stem for p in HISTORIES}
    assert {
        "completed_approved",
        "parked_after_handoff",
        "completed_rejected",
        "continued_as_new",
        "continued_while_parked",
        "carried_on_after_parked_compaction",
        "completed_local_tools",
        "completed_expired",
    } <= names


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_replays_cleanly(path: Path) -> None:
    text = path.read_text()
    workflow_id = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"].get(
        "workflowId", path.stem
    )
    result = await Replayer(
        workflows=[AgentRun], data_converter=data_converter(), workflow_runner=workflow_runner()
    ).replay_workflow(WorkflowHistory.from_json(workflow_id, text), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


@workflow.defn(name="AgentRun", sandboxed=False)
class ChangedAgentRun:
    """AgentRun after an incompatible change: a timer where history has a local activity."""

    @workflow.run
    async def run(self, inp: RunInput) -> RunOutput:
        await workflow.sleep(1)
        raise RuntimeError("unreachable")


async def test_an_incompatible_change_is_caught() -> None:
    """The replayer really detects non-determinism (so the test above can fail)."""
    path = next(p for p in HISTORIES if p.stem == "completed_approved")
    result = await Replayer(
        workflows=[ChangedAgentRun], data_converter=data_converter()
    ).replay_workflow(
        WorkflowHistory.from_json("x", path.read_text()), raise_on_replay_failure=False
    )
    assert result.replay_failure is not None


# ----------------------------------------------------------------------------- hitl verify

EXECUTED = {
    "completed_approved": ["OK call_30309073f177_0 cancel_order"],
    "completed_approved_inbox_patch": ["OK call_30309073f177_0 cancel_order"],
    "completed_local_tools": [
        "OK call_a5cb5d5c799a_1 send_email",  # approval "never"; a local activity
        "OK call_a5cb5d5c799a_0 cancel_order",  # a local activity, after root's approval
    ],
    "completed_rejected": [],  # both calls rejected: nothing ran
    # wire_funds expired (nothing ran); pay_supplier ran once, turned uncertain, was resolved
    "completed_expired": ["OK t1.2 pay_supplier"],
    "continued_as_new": ["OK call_0c9fbb563a83_0 cancel_order"],
    # a hosted MCP server's request, approved by a person (its answer ran as a local activity)
    "completed_hosted_mcp": ["OK t1.1 hosted_mcp_deepwiki"],
    "parked_after_handoff": ["OK call_889383c01643_0 get_weather"],  # the predicate said no
    "parked_inbox_patch": ["OK call_889383c01643_0 get_weather"],
    # Parked: nothing ran in it; the run after it is read too (the chain goes on), and
    # judged as below.
    "continued_while_parked": [
        "FAIL call_c67296a3e01c_1 wire_money",
        "FAIL call_8058bf324132_0 refund",
    ],
    # The run that carried on after a parked run continued as new. Its chain began runs
    # earlier, and those histories were not recorded (`record_parked_compaction` saves the run
    # that was current when the wire parked, itself a continuation): what they decided cannot
    # be proven from this corpus, and verify says so instead of believing the carried state.
    "carried_on_after_parked_compaction": [
        # planned (and given its approvers and deadline) in a run that was not recorded
        "FAIL call_c67296a3e01c_1 wire_money",
        # run by the standing rule `always_approve` granted in a run that was not recorded
        "FAIL call_8058bf324132_0 refund",
    ],
}
"""Every executed call of each recorded history, as `hitl verify` judges it."""
UNPROVABLE = {
    "call_c67296a3e01c_1": "it ran, but it was planned in a run of the chain that verify could",
    "call_8058bf324132_0": "no valid approval for the arguments that ran (refund needs a person)",
}


def _links(hist: WorkflowHistory) -> tuple[str | None, str | None]:
    """The run ids a history names before and after it in its continue-as-new chain."""
    prev = hist.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
    after = None
    for e in hist.events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            after = e.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return prev or None, after


def _corpus() -> dict[str, WorkflowHistory]:
    out = {}
    for path in HISTORIES:
        text = path.read_text()
        started = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]
        out[path.stem] = WorkflowHistory.from_json(started.get("workflowId", path.stem), text)
    return out


CHAINED = {"continued_while_parked": "carried_on_after_parked_compaction"}
"""Recorded runs that follow each other in one continue-as-new chain (first: next)."""


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_verify_proves_every_executed_call(path: Path) -> None:
    corpus = _corpus()
    hist = corpus[path.stem]
    # A history does not hold its own run id: the runs around it name it.
    by_run: dict[str, WorkflowHistory] = {}
    for first, then in CHAINED.items():
        (_, after), (before, _) = _links(corpus[first]), _links(corpus[then])
        assert after is not None and before is not None
        by_run[after], by_run[before] = corpus[then], corpus[first]

    async def fetch(workflow_id: str, run_id: str | None) -> tuple[str, WorkflowHistory]:
        if run_id is None:
            return "recorded", hist
        if run_id in by_run and by_run[run_id] is not hist:
            return run_id, by_run[run_id]
        raise LookupError(run_id)

    report = prove_tree(await load_tree(fetch, hist.workflow_id, data_converter()))
    got = [f"{'OK' if c.verdict.ok else 'FAIL'} {c.call_id} {c.tool}" for c in report.calls]
    assert got == EXECUTED[path.stem], [c.verdict.reason for c in report.calls]
    for c in report.calls:
        if not c.verdict.ok:
            assert c.verdict.reason.startswith(UNPROVABLE[c.call_id]), c.verdict.reason
    if path.stem in CHAINED or path.stem in CHAINED.values():
        [refund] = [c for c in report.calls if c.tool == "refund"]
        assert refund.verdict.notes == [
            "a standing rule (always_approve by root) carried from a run verify could not "
            "read covers it: not trusted"
        ]


def test_every_history_has_its_verdicts() -> None:
    assert set(EXECUTED) == {p.stem for p in HISTORIES}
