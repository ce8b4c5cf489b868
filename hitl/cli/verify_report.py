"""What `hitl verify` found, and how it says so: a line per executed call, or one JSON document.

A `Report` per root run (its chain and nested runs) holds a `CallReport` per executed call,
each with the `Verdict` its proof gave, and the notes about what verify could not read or
follow. `render` is the text output (every value escaped onto its line), `as_json` the
`--json` document.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from hitl.cli.common import one_line
from hitl.cli.verify_terms import Counted, Verdict

RanAs = Literal["activity", "local activity", "agent tool"]
"""How a call ran: an `execute_tool` activity, a local activity, or an agent tool's nested run."""


# ----------------------------------------------------------------------------- findings


@dataclass
class CallReport:
    """The verdict on one executed call."""

    workflow_id: str
    run_id: str
    call_id: str
    """As decided: the run's own id, qualified for calls of nested runs."""
    tool: str
    agent: str
    kind: RanAs
    where: str
    verdict: Verdict


@dataclass
class Report:
    """`hitl verify`'s findings for one root run and everything under it."""

    workflow_id: str
    runs: int
    calls: list[CallReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pinned_keys_missing: list[str] = field(default_factory=list)
    """Keys of the pinned directory that the operator's directory file lacks."""

    @property
    def ok(self) -> bool:
        """Every executed call is proven."""
        return all(c.verdict.ok for c in self.calls)


def counted_text(c: Counted) -> str:
    """`ann (signed key 1a2b3c4d...)`, `bob`."""
    who = c.approver or "someone unnamed"
    if c.verified:
        return f"{who} (signed key {(c.key_id or '')[:8]}...)"
    return who


# ----------------------------------------------------------------------------- output


def _how(c: CallReport) -> str:
    v = c.verdict
    if v.how == "person":
        who = ", ".join(counted_text(a) for a in v.approvals) or "someone unnamed"
        return (
            f"approved by {who} for arguments sha256:{v.arguments_sha256[:12]}..  "
            f"[{len(v.approvals)} of {v.required}]"
        )
    if v.how == "always_rule":
        return f"approved by a standing rule: {v.reason}"
    if v.how == "policy":
        return f"approved by {v.reason}"
    if v.how == "auto_approval":
        return "auto-approved (the run's preset and the tool both allow it)"
    return v.reason


def line(c: CallReport) -> str:
    """One line: `OK   t1.1  refund (Refund desk)  approved by ...`, escaped."""
    v = c.verdict
    head = f"{'OK  ' if v.ok else 'FAIL'} {one_line(c.call_id)}  {one_line(c.tool)}"
    head += f" ({one_line(c.agent)})"
    if v.ok:
        return f"{head}  {one_line(_how(c))}"
    why = v.reason
    if v.notes:
        why += " (" + "; ".join(v.notes) + ")"
    return f"{head}  {one_line(why)}"


def render(reports: list[Report]) -> list[str]:
    """The text output: a header per root run, a line per executed call, notes, a summary."""
    out: list[str] = []
    calls = failed = 0
    for r in reports:
        n = len(r.calls)
        out.append(
            f"run {one_line(r.workflow_id)}: {r.runs} run(s) read, "
            + (f"{n} executed call(s)" if n else "no executed calls")
        )
        out += [line(c) for c in r.calls]
        out += [f"note: {one_line(note)}" for note in r.notes]
        out += [
            f"note: pinned key {one_line(k)} is not in the --approvers file"
            for k in r.pinned_keys_missing
        ]
        calls += n
        failed += sum(not c.verdict.ok for c in r.calls)
    if not reports:
        out.append("no runs")
    elif failed:
        out.append(f"FAIL: {failed} of {calls} executed call(s) cannot be proven")
    else:
        out.append(f"ok: {calls} executed call(s) proven in {len(reports)} run(s)")
    return out


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when is not None else None


def as_json(reports: list[Report]) -> dict[str, Any]:
    """The `--json` document."""
    return {
        "ok": all(r.ok for r in reports),
        "runs": [
            {
                "workflow_id": r.workflow_id,
                "ok": r.ok,
                "runs_read": r.runs,
                "notes": r.notes,
                "pinned_keys_missing": r.pinned_keys_missing,
                "calls": [
                    {
                        "ok": c.verdict.ok,
                        "call_id": c.call_id,
                        "tool": c.tool,
                        "agent": c.agent,
                        "workflow_id": c.workflow_id,
                        "run_id": c.run_id,
                        "ran_as": c.kind,
                        "at": c.where,
                        "how": c.verdict.how,
                        "reason": c.verdict.reason,
                        "required": c.verdict.required,
                        "approvals": [
                            {
                                "approver": a.approver,
                                "signed": a.verified,
                                "key_id": a.key_id,
                                "at": a.at.isoformat(),
                                "via": a.via,
                                "event": a.where,
                            }
                            for a in c.verdict.approvals
                        ],
                        "arguments_sha256": c.verdict.arguments_sha256,
                        "deadline": _iso(c.verdict.deadline),
                        "notes": c.verdict.notes,
                    }
                    for c in r.calls
                ],
            }
            for r in reports
        ],
    }
