"""Approval policies on the wire: the version a run pins, and each call's recorded verdict."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from hitl.wire.base import WireModel
from hitl.wire.graph import ApproverDirectory

__all__ = [
    "ACT_REGISTRY_DIRECTORY",
    "ADMINS_GROUP",
    "POLICY_REGISTRY_ID",
    "POLICY_REGISTRY_TYPE",
    "QUERY_CURRENT_POLICY",
    "UPDATE_PUBLISH_POLICY",
    "CurrentPolicy",
    "LimitHold",
    "PinnedPolicy",
    "PolicyPublication",
    "PublishPolicy",
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
