"""What ran, judged for `hitl verify`: each execution matched to its call, and its verdict.

A tool runs as an `execute_tool` activity (its input names the call and its arguments), as a
local activity (its marker names the tool and the call, not the arguments: those are the ones
the run held), or, for an agent tool, as a nested run (its input is the call's). Each becomes a
`CallReport`: the call's proof asked at that moment, for the arguments that ran, with what the
execution itself shows against it (other arguments, a second run without a person's retry).
"""

from __future__ import annotations

import json

from hitl.cli.verify_calls import Call
from hitl.cli.verify_read import Fact, Run
from hitl.cli.verify_report import CallReport, RanAs
from hitl.cli.verify_terms import Verdict
from hitl.wire import ExecuteToolInput, RunInput


def judge_execution(calls: list[Call], run: Run, f: Fact) -> CallReport:
    """An `execute_tool` activity or a local tool's marker, among the turn's `calls`."""
    inp = f.data
    if isinstance(inp, ExecuteToolInput):
        return _activity(calls, run, f, inp)
    if f.unreadable:
        verdict = Verdict(ok=False, reason="it ran, but its input cannot be read")
        return CallReport(run.workflow_id, run.run_id, "?", "?", "?", "activity", f.where, verdict)
    return _local_activity(calls, run, f)


def _activity(calls: list[Call], run: Run, f: Fact, inp: ExecuteToolInput) -> CallReport:
    """An activity names its call and the arguments it ran with: they must be the call's."""
    call = next((c for c in calls if c.call_id == inp.call_id), None)
    if call is None:
        return _orphan(run, f, inp.tool_name, inp.call_id, "activity")
    problem = None
    if inp.arguments != call.held:
        problem = (
            "the arguments that ran are not the call's as history reconstructs them "
            "(the model's call and the edits the run took)"
        )
    return judge(call, run, f, inp.arguments, "activity", problem)


def _local_activity(calls: list[Call], run: Run, f: Fact) -> CallReport:
    """A local tool's marker: the call it names, else a call of its tool that may run by now."""
    # The marker's summary is `<tool> <call id>` (runs recorded before: the tool alone).
    tool, _, named = str(f.extra or "").partition(" ")
    candidates = [
        c for c in calls if c.name == tool and c.tool is not None and c.tool.local_activity
    ]
    if named:
        candidates = [c for c in candidates if c.call_id == named] or candidates
    fresh = [c for c in candidates if c.executions == 0]
    ready = [c for c in fresh if c.proof is not None and c.proof.verdict(c.held).ok]
    if not candidates:
        return _orphan(run, f, str(tool), "?", "local activity")
    pick = (ready or fresh or candidates)[0]
    return judge(pick, run, f, pick.held, "local activity", None)


def judge_agent_tool(call: Call, run: Run, f: Fact) -> CallReport:
    """A nested run started for an agent tool's call: its input must be the call's."""
    inp = f.extra
    problem = None
    if isinstance(inp, RunInput):
        expected = _agent_input(call.held)
        if inp.input != expected:
            problem = "the nested run's input is not the call's arguments"
    return judge(call, run, f, call.held, "agent tool", problem)


def _agent_input(arguments: str) -> str:
    """What a nested run receives as its input for an agent-tool call's arguments."""
    try:
        value = json.loads(arguments or "{}")
        text = value.get("input", "")
    except (ValueError, AttributeError):
        text = arguments
    return str(text)


def _orphan(run: Run, f: Fact, tool: str, call_id: str, kind: RanAs) -> CallReport:
    """Something ran for a call no turn made (as history shows the turns)."""
    verdict = Verdict(ok=False, reason="it ran for a call that history does not show")
    return CallReport(run.workflow_id, run.run_id, call_id, tool, "?", kind, f.where, verdict)


def judge(
    call: Call, run: Run, f: Fact, executed: str, kind: RanAs, problem: str | None
) -> CallReport:
    """The call ran (again, if it ran before) with arguments `executed`: its verdict then.

    `problem`: what the execution itself shows against it, which fails a call its proof
    would pass.
    """
    again = call.executions > 0
    call.executions += 1
    verdict = _verdict(call, f, executed, again, problem)
    return CallReport(
        run.workflow_id,
        run.run_id,
        call.qualified,
        call.name,
        call.agent.name,
        kind,
        f.where,
        verdict,
    )


def _verdict(call: Call, f: Fact, executed: str, again: bool, problem: str | None) -> Verdict:
    """The call's proof at the run's clock then, failed by `problem`; untrusted rules noted."""
    if call.proof is None:
        why = call.refused or "it was never planned as a call that may run"
        return Verdict(ok=False, reason=f"it ran, but {why}")
    call.proof.advance(f.clock)
    verdict = call.proof.verdict(executed, again=again)
    if problem is not None and verdict.ok:
        verdict.ok, verdict.reason = False, problem
    for rule in call.replay.untrusted:
        if not verdict.ok and rule.covers(call.agent.id, call.name):
            verdict.notes.append(
                f"a standing rule (always_{rule.kind} by {rule.approver}) carried from "
                "a run verify could not read covers it: not trusted"
            )
    return verdict
