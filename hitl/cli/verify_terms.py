"""The terms of `hitl verify`'s proof: what it takes about a call, and what it finds.

A call's pinned rules (`CallRules`) and every candidate decision about it (`Candidate`, in
history order) go into its `hitl.cli.proof.CallProof`; out come the decisions that counted
(`Counted`) and a `Verdict`, which `hitl.cli.verify_report` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from hitl.wire import (
    AnswerInput,
    CallPlan,
    DecisionInput,
    ExtendInput,
    ResolveInput,
    RunConfigSpec,
    StandingRule,
    ToolSpec,
)

CandidateKind = Literal["approve", "reject", "extend", "rule", "resolve", "answer"]
Via = Literal["update", "signal", "decide"]
How = Literal["not_needed", "person", "always_rule", "policy", "auto_approval"]


@dataclass(frozen=True)
class CallRules:
    """What the pinned graph and run configuration say about one call, and its plan."""

    tool: ToolSpec
    agent_id: str
    config: RunConfigSpec
    plan: CallPlan | None = None
    nested: bool = False
    """Decided at the root under a qualified id (no edits, no extensions there)."""


@dataclass(frozen=True)
class Candidate:
    """Something that may decide a call, as history holds it.

    `at` is the run's clock when the run took it (the start of the workflow task that
    processed it): deadlines, signature expiry and escalation are judged by it.
    """

    at: datetime
    kind: CandidateKind
    payload: DecisionInput | ExtendInput | ResolveInput | AnswerInput | StandingRule
    via: Via = "update"
    refused: bool = False
    """The run answered the update with a failure: it decided nothing (never counted)."""
    plan: CallPlan | None = None
    """An edit's own plan (the tool planned the edited arguments in an activity)."""
    where: str = ""
    """Where history holds it (`event 14`), for the reasons printed."""
    workflow_id: str = ""
    """The run it was sent to, when not the one decisions are made on (a nested run settles
    its own uncertain calls and questions); signatures name it."""


@dataclass(frozen=True)
class Counted:
    """A person's decision that counts."""

    approver: str | None
    verified: bool
    key_id: str | None
    at: datetime
    where: str
    via: Via


@dataclass
class Verdict:
    """Whether a call that executed had the decisions its rules required."""

    ok: bool
    reason: str
    how: How | None = None
    approvals: list[Counted] = field(default_factory=list)
    required: int = 1
    arguments_sha256: str = ""
    notes: list[str] = field(default_factory=list)
    requested_at: datetime | None = None
    """When the call started waiting (the run's clock when it was planned)."""
    deadline: datetime | None = None
    """Its deadline as verify derives it (request time, timeout, valid extensions)."""
