"""The run's pinned approval policy, evaluated for one call while it is planned.

Planning runs in an activity, so a limit rule may ask the worker's ledger (I/O). The pinned
document travels with the planning input; it is checked against its digest before use (a
document that does not match what the run pinned is refused, never evaluated), and kept parsed
per digest so a busy worker validates each version once.
"""

from __future__ import annotations

import json
import logging
import os
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from hitl.policy import (
    CallFacts,
    LimitAnswer,
    LimitCheck,
    LimitLedger,
    PolicyDocument,
    PolicyError,
    Verdict,
    canonical,
    digest_of,
    evaluate,
    from_data,
    load_policy,
)
from hitl.wire import (
    ACT_REEVALUATE_POLICY,
    LimitHold,
    PinnedPolicy,
    PolicyVerdict,
    ReevaluateInput,
    ReevaluateOutput,
)

log = logging.getLogger("hitl.activities")

_PARSED: OrderedDict[str, PolicyDocument] = OrderedDict()
_KEEP = 16


@dataclass(frozen=True)
class PlanPolicy:
    """What planning needs to apply the run's policy to its calls."""

    pinned: PinnedPolicy
    categories: dict[str, list[str]]
    ledger: LimitLedger | None = None
    workflow_id: str = ""


def pinned_document(pinned: PinnedPolicy) -> PolicyDocument:
    """The pinned document, validated and matching its digest (else a non-retryable failure)."""
    doc = _PARSED.get(pinned.digest)
    if doc is not None:
        _PARSED.move_to_end(pinned.digest)
        return doc
    try:
        doc = from_data(pinned.document, source=f"pinned policy {pinned.name}")
    except PolicyError as exc:
        raise ApplicationError(str(exc), type="PolicyError", non_retryable=True) from None
    if digest_of(doc) != pinned.digest:
        raise ApplicationError(
            f"the pinned policy {pinned.name} does not match its digest {pinned.digest}",
            type="PolicyError",
            non_retryable=True,
        )
    _PARSED[pinned.digest] = doc
    while len(_PARSED) > _KEEP:
        _PARSED.popitem(last=False)
    return doc


def call_arguments(arguments: str) -> Any:
    """The call's arguments as the model sent them, numbers as Decimal (never float)."""
    if not arguments.strip():
        return {}
    return json.loads(arguments, parse_float=Decimal, parse_int=Decimal)


async def verdict_for(
    policy: PlanPolicy, agent: str, tool: str, call_id: str, arguments: str
) -> PolicyVerdict:
    """What the pinned policy says about one call (limits asked of the worker's ledger)."""
    doc = pinned_document(policy.pinned)
    facts = CallFacts(
        agent=agent,
        tool=tool,
        arguments=call_arguments(arguments),
        categories=policy.categories.get(tool, ()),
        workflow_id=policy.workflow_id,
        call_id=call_id,
        at=datetime.now(UTC),
    )
    verdict = await evaluate(doc, policy.pinned.digest, facts, policy.ledger)
    wire = to_wire(verdict)
    wire.categories, wire.at = list(facts.categories), facts.at
    return wire


def to_wire(v: Verdict) -> PolicyVerdict:
    """A verdict as the run records it (without the per-rule reasons: `explain` recomputes)."""
    return PolicyVerdict(
        policy=v.policy,
        version=v.version,
        digest=v.digest,
        effect=v.effect,
        rule=v.rule,
        message=v.message,
        approvers=v.approvers,
        required_approvals=v.required_approvals,
        approval_timeout_seconds=v.approval_timeout_seconds,
        escalate_after_seconds=v.escalate_after_seconds,
        escalate_to=v.escalate_to,
        shadow_effect=v.shadow_effect,
        shadow_rule=v.shadow_rule,
        matched=v.matched,
        reservations=[
            LimitHold.model_validate(h.check.model_dump())
            for h in v.limits
            if h.reserved and h.check is not None
        ],
    )


async def release_all(policy: PlanPolicy, verdict: PolicyVerdict, reason: str) -> None:
    """Give back the call's limit reservations (it will not run)."""
    if policy.ledger is None:
        return
    for hold in verdict.reservations:
        try:
            await policy.ledger.release(LimitCheck.model_validate(hold.model_dump()), reason)
        except Exception as exc:  # the hold lapses on the ledger's side
            log.warning("releasing limit reservation of %s failed: %r", hold.key, exc)
    verdict.reservations = []


POLICY_ENV = "HITL_POLICY"
"""The environment variable naming the worker's policy file (`build_worker(policy=None)`)."""


def pin(doc: PolicyDocument) -> PinnedPolicy:
    """A document as runs pin it: name, version, digest and the canonical document."""
    return PinnedPolicy(
        name=doc.policy, version=doc.version, digest=digest_of(doc), document=canonical(doc)
    )


def worker_policy(
    policy: str | Path | PolicyDocument | None, ledger: LimitLedger | None
) -> PinnedPolicy | None:
    """The policy a worker's runs pin: given, else the file `HITL_POLICY` names, else none.

    A policy with limit rules needs the worker's limit ledger (`PolicyError` otherwise).
    """
    if policy is None:
        path = os.environ.get(POLICY_ENV, "").strip()
        if not path:
            return None
        policy = path
    doc = policy if isinstance(policy, PolicyDocument) else load_policy(policy)
    if doc.has_limits and ledger is None:
        rule = next(r for r in doc.rules if r.limit is not None)
        raise PolicyError(
            f"rule {rule.id!r} has a limit, and this worker has no limit ledger "
            "(pass build_worker(ledger=...))",
            source=f"policy {doc.policy}",
        )
    return pin(doc)


class LookOnly:
    """A ledger that only looks: re-evaluating a parked call reserves nothing new.

    The call keeps the reservations it was planned with (released if it is now rejected); a
    limit rule the new version adds is checked against the key's totals, this call included.
    """

    def __init__(self, inner: LimitLedger) -> None:
        self.inner = inner

    async def check_and_reserve(self, check: LimitCheck) -> LimitAnswer:
        """The inner ledger's answer to `check`, asked without reserving."""
        return await self.inner.check_and_reserve(check.model_copy(update={"reserve": False}))

    async def release(self, check: LimitCheck, reason: str) -> None:
        """Nothing to give back: nothing was reserved here."""

    async def commit(self, check: LimitCheck) -> None:
        """Nothing to commit: nothing was reserved here."""


class PolicyActivities:
    """`reevaluate_policy`: what a new policy version says about a run's pending calls."""

    def __init__(self, ledger: LimitLedger | None) -> None:
        self.ledger = LookOnly(ledger) if ledger is not None else None

    @activity.defn(name=ACT_REEVALUATE_POLICY)
    async def reevaluate_policy(self, inp: ReevaluateInput) -> ReevaluateOutput:
        """The verdict of `inp.policy` (checked against its digest) on each call, in order."""
        verdicts = []
        for call in inp.calls:
            plan = PlanPolicy(
                pinned=inp.policy,
                categories={call.tool: list(call.categories)},
                ledger=self.ledger,
                workflow_id=inp.workflow_id,
            )
            verdicts.append(
                await verdict_for(plan, call.agent, call.tool, call.call_id, call.arguments)
            )
        return ReevaluateOutput(verdicts=verdicts)
