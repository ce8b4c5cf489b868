"""Approval policies on the wire: the version a run pins, and each call's recorded verdict."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from hitl.wire.base import WireModel
from hitl.wire.graph import ApproverDirectory

__all__ = [
    "ACT_REEVALUATE_POLICY",
    "ACT_REGISTRY_DIRECTORY",
    "ADMINS_GROUP",
    "POLICY_REGISTRY_ID",
    "POLICY_REGISTRY_TYPE",
    "QUERY_CURRENT_POLICY",
    "UPDATE_APPLY_POLICY",
    "UPDATE_PUBLISH_POLICY",
    "ApplyPolicy",
    "CallChange",
    "CurrentPolicy",
    "LimitHold",
    "PinnedPolicy",
    "PolicyChange",
    "PolicyPublication",
    "PublishPolicy",
    "ReevaluateCall",
    "ReevaluateInput",
    "ReevaluateOutput",
    "RegistryInput",
    "RegistryState",
    "PolicyEffect",
    "PolicyVerdict",
]

PolicyEffect = Literal["allow", "ask", "deny"]


class PinnedPolicy(WireModel):
    """The approval policy a run started with (docs/policies.md), pinned like its graph.

    The document travels with the run (in its resolution, and with each planning step), so a
    run keeps deciding by the version it started with whatever the worker has loaded since;
    planning checks the document against `digest` before it uses it.
    """

    name: str
    version: str
    digest: str
    """`sha256:<hex>` of the document's canonical JSON (`hitl.policy.digest_of`)."""
    document: dict[str, Any]


class LimitHold(WireModel):
    """A reservation a limit rule holds for a call in the worker's ledger.

    The `LimitCheck` (`hitl.policy.limits`) that made it, handed back to release or commit it.
    """

    key: str
    window_seconds: int
    measure: Literal["count", "sum"]
    amount: str
    threshold: str
    reservation_id: str
    reserve: bool = True
    at: datetime


class PolicyVerdict(WireModel):
    """What the run's policy said about one call (enforced or not), for the record and audit."""

    call_id: str = ""
    """The run's call id (set by the run; planning knows the model's)."""
    at: datetime | None = None
    """When planning asked the policy."""
    policy: str
    version: str
    digest: str
    effect: PolicyEffect | None = None
    """The enforced verdict (`None`: no enforced rule matched; the tool's code decided)."""
    rule: str | None = None
    """The deciding rule."""
    message: str | None = None
    approvers: list[str] = Field(default_factory=list)
    required_approvals: int | None = None
    approval_timeout_seconds: int | None = None
    escalate_after_seconds: int | None = None
    escalate_to: list[str] = Field(default_factory=list)
    shadow_effect: PolicyEffect | None = None
    """What `log_only` rules would have made it, had they been enforced."""
    shadow_rule: str | None = None
    matched: list[str] = Field(default_factory=list)
    """Every rule that matched, in document order."""
    categories: list[str] = Field(default_factory=list)
    """The tool's pinned categories the rules were matched against."""
    deferred: bool = False
    """The tool's code deferred to the policy (`needs_approval="policy"`)."""
    outcome: Literal["refused", "asked", "free"] | None = None
    """What the call's plan became, the code's say included (set by planning)."""
    reservations: list[LimitHold] = Field(default_factory=list)
    """Limit-ledger reservations held for the call (released if it does not run)."""


POLICY_REGISTRY_TYPE = "PolicyRegistry"
"""The workflow type of a namespace's policy registry (one run, id `POLICY_REGISTRY_ID`)."""
POLICY_REGISTRY_ID = "hitl-policy-registry"
UPDATE_PUBLISH_POLICY = "publish_policy"
QUERY_CURRENT_POLICY = "current_policy"
ACT_REGISTRY_DIRECTORY = "registry_directory"
ADMINS_GROUP = "admins"
"""The approver directory's group whose members may publish a policy to the registry."""


class PublishPolicy(WireModel):
    """The `publish_policy` update: a document an admin signed (`hitl.policy_signing`)."""

    document: dict[str, Any]
    admin: str
    key_id: str
    signature: str
    expires_at: datetime
    reason: str | None = None


class PolicyPublication(WireModel):
    """One accepted publication, as the registry keeps it (newest last)."""

    name: str
    version: str
    digest: str
    admin: str
    at: datetime
    reason: str | None = None


class RegistryState(WireModel):
    """What a policy registry keeps, and carries across continue-as-new."""

    current: PinnedPolicy | None = None
    log: list[PolicyPublication] = Field(default_factory=list)
    directory: ApproverDirectory | None = None
    """The worker's approver directory when the registry started (who may publish)."""


class RegistryInput(WireModel):
    """Input of the `PolicyRegistry` workflow (`state` is believed only on continue-as-new)."""

    state: RegistryState | None = None


class CurrentPolicy(WireModel):
    """Answer of the `current_policy` query."""

    policy: PinnedPolicy | None = None
    log: list[PolicyPublication] = Field(default_factory=list)
    ready: bool = False
    """The registry has read the approver directory: it can take publications."""


UPDATE_APPLY_POLICY = "apply_policy"
"""A run's update: an admin's signed change of its pinned policy, re-evaluating pending calls."""
ACT_REEVALUATE_POLICY = "reevaluate_policy"


class ApplyPolicy(PublishPolicy):
    """The `apply_policy` update: a document an admin signed for this one run.

    Signed like a publication, under its own domain and with the run's workflow id in place of
    the registry's (`hitl.policy_signing.sign_apply`): a publication never verifies as an
    apply, and an apply for one run never verifies at another.
    """


class CallChange(WireModel):
    """What applying a new policy version did to one pending call, and why."""

    call_id: str
    tool_name: str
    change: Literal["rejected", "asked", "unchanged", "decided"]
    """`rejected`: the new version denies it (or no one may decide it now); `asked`: it waits
    with the approvers, count and deadline the new version asks; `unchanged`: the new version
    does not ask (an apply never frees a waiting call); `decided`: decided meanwhile."""
    effect: PolicyEffect | None = None
    rule: str | None = None
    reason: str
    approvers: list[str] = Field(default_factory=list)
    """Who may decide it now (`asked`)."""
    required_approvals: int | None = None
    dropped_approvals: list[str] = Field(default_factory=list)
    """Approvals already given by people the new version no longer admits (they no longer
    count)."""


class PolicyChange(WireModel):
    """One accepted `apply_policy`.

    Who changed the run's pinned policy, when and why, and what it did to each pending call.
    """

    admin: str
    key_id: str
    at: datetime
    reason: str | None = None
    before: str | None = None
    """The version pinned before (`<policy>@<version> sha256:...`; `None`: no policy)."""
    after: str
    calls: list[CallChange] = Field(default_factory=list)


class ReevaluateCall(WireModel):
    """One pending call, as `reevaluate_policy` asks the new version about it."""

    call_id: str
    """The model's id (the reservation ids of its limits are made from it, as in planning)."""
    agent: str
    tool: str
    arguments: str
    categories: list[str] = Field(default_factory=list)


class ReevaluateInput(WireModel):
    """Input of `reevaluate_policy`: the new version and the calls it is asked about."""

    policy: PinnedPolicy
    workflow_id: str
    calls: list[ReevaluateCall]


class ReevaluateOutput(WireModel):
    """The new version's verdict on each call, in order (limits looked at, nothing reserved)."""

    verdicts: list[PolicyVerdict]
