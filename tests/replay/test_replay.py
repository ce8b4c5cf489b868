"""Replay recorded histories (completed, parked, continued-as-new) against today's code.

A failure here means a change to `AgentRun` would break runs already in flight: wrap it in
`workflow.patched(...)` (see docs/production.md) or re-record only if no such runs exist.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

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
