"""The worker's sandbox answers serialization-context lookups directly, with the SDK's answers.

Replays recorded histories (a parked run, a completed one with an activity, a continued one) in
a `Replayer` with the worker's runner, comparing every direct answer against the SDK's own
path (`exec` inside the sandbox) for the same command. Fails if the SDK's private layout
changed so the shortcut no longer applies (then nothing is asked directly).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from temporalio.worker._workflow_instance import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox._runner import _Instance

from hitl.client import data_converter
from hitl.worker.build import workflow_runner
from hitl.worker.sandbox import FastContextInstance, FastContextRunner
from hitl.workflows.agent_run import AgentRun

HISTORIES = Path(__file__).parent.parent / "replay" / "histories"


class Checked(FastContextInstance):
    """Asks both ways and records whether they agree."""

    asked: list[bool] = []

    def get_serialization_context(self, command_info: Any) -> Any:
        fast = super().get_serialization_context(command_info)
        Checked.asked.append(fast == _Instance.get_serialization_context(self, command_info))
        return fast

    def get_external_store_context(self, command_info: Any) -> Any:
        fast = super().get_external_store_context(command_info)
        Checked.asked.append(fast == _Instance.get_external_store_context(self, command_info))
        return fast


class CheckedRunner(FastContextRunner):
    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        inst = Checked(det, self.runner_class, self.restrictions)
        assert inst._in_sandbox() is not None, "the SDK's sandbox layout changed"
        return inst


def test_the_worker_runs_the_fast_runner() -> None:
    runner = workflow_runner()
    assert type(runner) is FastContextRunner
    assert "hitl" in runner.restrictions.passthrough_modules  # the sandbox otherwise as before


@pytest.mark.parametrize(
    "name", ["parked_inbox_patch", "completed_approved", "continued_while_parked"]
)
async def test_direct_answers_are_the_sdks(name: str) -> None:
    text = (HISTORIES / f"{name}.json").read_text()
    wid = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"].get(
        "workflowId", name
    )
    base = workflow_runner()
    runner = CheckedRunner(restrictions=base.restrictions)
    Checked.asked = []
    result = await Replayer(
        workflows=[AgentRun], data_converter=data_converter(), workflow_runner=runner
    ).replay_workflow(WorkflowHistory.from_json(wid, text), raise_on_replay_failure=False)
    assert result.replay_failure is None
    assert len(Checked.asked) > 5 and all(Checked.asked)
