"""The approval rules, stated once: who may decide a call, how many must, and when a callback may.

Pure functions of the pinned tool, the run's configuration and the call's plan, importing only
`hitl.wire`. The run applies them (`hitl.workflows.turn`, `hitl.workflows.approvers`), `hitl
verify` judges recorded histories by them (`hitl.cli.proof`), and the console shows each person
the calls they may decide by them (`hitl.console.rules`): one statement, so the three can never
disagree about who may decide.
"""

from __future__ import annotations

from hitl.wire import (
    ApproverDirectory,
    CallPlan,
    PolicyDecision,
    PolicyVerdict,
    RunConfigSpec,
    ToolSpec,
)

GROUP = "group:"
"""An approver list entry naming a group of the directory: `group:finance`."""


def may_decide(
    approver: str | None, allowed: list[str], directory: ApproverDirectory | None = None
) -> bool:
    """Whether `approver` may decide a call whose approver list is `allowed` (empty: anyone).

    An entry is an approver's name or `group:<name>`, which the worker's directory fills.
    """
    if not allowed:
        return True
    if approver is None:
        return False
    if approver in allowed:
        return True
    entry = directory.approvers.get(approver) if directory is not None else None
    return entry is not None and any(
        a.startswith(GROUP) and a[len(GROUP) :] in entry.groups for a in allowed
    )


def names_approvers(tool: ToolSpec) -> bool:
    """Whether the tool says itself who may decide its calls (a list, or a callable)."""
    return bool(tool.approvers) or tool.approvers_by_call


def escalation_targets(
    tool: ToolSpec, cfg: RunConfigSpec, verdict: PolicyVerdict | None = None
) -> list[str]:
    """Who joins a call's approvers when it escalates.

    The tool's own `escalate_to`; the run's only for a tool that names no approvers of its own:
    whoever starts a run may narrow who decides, never widen it past what the tool says. The
    `escalate_to` of the policy rule that asked about the call joins on the same terms.
    """
    if tool.escalate_to or names_approvers(tool):
        return list(tool.escalate_to)
    targets = list(cfg.escalate_to)
    if verdict is not None and verdict.effect == "ask":
        targets += [a for a in verdict.escalate_to if a not in targets]
    return targets


def escalate_after(
    tool: ToolSpec, cfg: RunConfigSpec, verdict: PolicyVerdict | None = None
) -> float | None:
    """Seconds a call waits before it escalates: the tool's, else the run's.

    A policy rule that asked about the call may make it sooner, never later.
    """
    seconds = tool.escalate_after_seconds or cfg.escalate_after_seconds
    ruled = verdict.escalate_after_seconds if verdict is not None else None
    if ruled and verdict is not None and verdict.effect == "ask":
        return min(seconds, ruled) if seconds else ruled
    return seconds


def policy_may_decide(tool: ToolSpec, policy: PolicyDecision | None, several: bool) -> bool:
    """Whether an approver callback's answer decides the call.

    A rejection always does; an approval only when one person would do, and the run's approver
    (named by whoever started the run) only on a tool that names no approvers of its own.
    """
    if policy is None:
        return False
    if policy.kind == "reject":
        return True
    return not several and not (policy.run_level and names_approvers(tool))


def needs_person(tool: ToolSpec, plan: CallPlan | None) -> bool | None:
    """Whether a call needs a person: the pinned mode, or its plan (`None`: no plan found).

    A tool whose code never asks is planned only when the run pinned an approval policy, which
    may ask about its calls: then its plan says.
    """
    if tool.approval == "always":
        return True
    if tool.approval == "never":
        return plan is not None and plan.needs_approval
    return None if plan is None else plan.needs_approval


def required_approvals(tool: ToolSpec, plan: CallPlan | None) -> int:
    """Distinct approvers a call needs: the pinned number is a floor its plan may raise."""
    asked = plan.required_approvals if plan is not None else None
    return max(tool.required_approvals, asked or 1)


def call_approvers(tool: ToolSpec, plan: CallPlan | None, cfg: RunConfigSpec) -> list[str]:
    """Who may decide a call: its plan's list, else the tool's, else the run's (empty: anyone)."""
    by_call = plan.approvers if plan is not None else None
    return list(by_call) if by_call is not None else list(tool.approvers or cfg.approvers)


def narrow_approvers(
    allowed: list[str], policy: list[str], directory: ApproverDirectory | None = None
) -> list[str] | None:
    """Who may decide a call that both the code's list and a policy rule's list admit.

    A policy narrows who decides, never widens it: with both lists set, only the people each
    admits (groups filled from the directory). Empty means anyone, as everywhere; `None`: no
    one is admitted by both (the call cannot be decided, so it is refused).
    """
    if not policy:
        return list(allowed)
    if not allowed:
        return list(policy)
    named = {a for a in [*allowed, *policy] if not a.startswith(GROUP)}
    people = named | set(directory.approvers if directory is not None else ())
    both = sorted(
        p for p in people if may_decide(p, allowed, directory) and may_decide(p, policy, directory)
    )
    return both or None


def signatures_required(tool: ToolSpec, cfg: RunConfigSpec) -> bool:
    """Whether every decision on the tool's calls must be signed (the tool's or the run's)."""
    return tool.signed_decisions or cfg.signed_decisions
