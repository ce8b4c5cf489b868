"""The pinned resolution: what `resolve_agent` records when a top-level run starts.

Split from `hitl.wire.activities` (it is the one activity result that is stored as a marker and
read back on every replay, so it carries its own storage rule: `ResolvedRun.level`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from hitl.wire.base import WireModel
from hitl.wire.graph import AgentGraph, ApproverDirectory, RunConfigSpec
from hitl.wire.names import SA_OUTCOMES
from hitl.wire.policy import PinnedPolicy

__all__ = [
    "LEVEL_1_ATTRIBUTES",
    "RESOLVED_LEVEL",
    "ResolveAgentInput",
    "ResolvedRun",
]


class ResolveAgentInput(WireModel):
    """Input of `resolve_agent`: which registered agent, plus references to check."""

    agent: str
    run_config: RunConfigSpec = Field(default_factory=RunConfigSpec)


class ResolvedRun(WireModel):
    """Output of `resolve_agent`: the pinned graph plus what the worker's cluster supports."""

    graph: AgentGraph
    search_attributes: bool = False
    """The custom search attributes are registered, so the run keeps them current."""
    tracing: bool = False
    """The worker traces with OpenTelemetry (the run records its own spans)."""
    directory: ApproverDirectory | None = None
    """The worker's approver directory (groups, public keys), pinned into the run."""
    policy: PinnedPolicy | None = None
    """The worker's approval policy (docs/policies.md), pinned into the run."""
    notify: bool = False
    """The worker has notifiers: the run starts `notify` activities for its waits."""
    outcomes_attribute: bool = False
    """`HitlOutcomes` is registered too, so the run keeps it current."""
    inbox_memo: bool = False
    """The worker's code keeps a paused run's pending calls in its memo (`hitl_inbox`).

    Recorded with the resolution, so a run knows its version from its own history without a
    patch marker (which would cost two events: the marker and core's `TemporalChangeVersion`
    upsert). A resolution recorded by older code lacks it: that run keeps the older behaviour."""
    attributes: list[str] | None = None
    """Our search attributes registered in the namespace when the run started: the run keeps
    these current and skips the others (`None`: recorded by older code, which kept all of them
    or none, as `search_attributes` says)."""
    run_call_ids: bool = False
    """The worker's code names each call itself (`t<turn>.<n>`, the model's id kept as data);
    recorded like `inbox_memo`, so runs recorded before keep the model's ids on replay."""
    inbox_rounds: bool = False
    """The worker's code writes the inbox memo anew when a listed call changes what it waits
    for (an approved call turns uncertain or asks a question; another question); recorded
    like `inbox_memo`, so runs recorded before write it as they did on replay."""
    level: int = 0
    """What the resolving code knew, so its resolution is stored without what that implies.

    From 1 (`RESOLVED_LEVEL`): `inbox_memo`, `run_call_ids` and `inbox_rounds` hold;
    `search_attributes` and `outcomes_attribute` say what `attributes` holds; `attributes` left
    out means all six of `LEVEL_1_ATTRIBUTES`. The stored resolution leaves all that out
    (about 200 bytes of every run's history); reading it back fills the fields in, so readers
    see what they saw before. Resolutions recorded by older code have no level: read as is."""

    @model_validator(mode="after")
    def _implied(self) -> ResolvedRun:
        if self.level >= 1:
            if self.attributes is None:
                self.attributes = list(LEVEL_1_ATTRIBUTES)
            self.search_attributes = bool(self.attributes)
            self.outcomes_attribute = SA_OUTCOMES in self.attributes
            self.inbox_memo = self.run_call_ids = self.inbox_rounds = True
        return self

    @model_serializer(mode="wrap")
    def _without_implied(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.level >= 1:
            for name in _IMPLIED:
                data.pop(name, None)
            if set(self.attributes or ()) == set(LEVEL_1_ATTRIBUTES):
                data.pop("attributes", None)
        return data


RESOLVED_LEVEL = 1
"""The level `resolve_agent` records (`ResolvedRun.level`)."""
LEVEL_1_ATTRIBUTES = (
    "HitlStatus",
    "HitlPendingTools",
    "HitlAgent",
    "HitlPendingSince",
    "HitlDeadline",
    "HitlOutcomes",
)
"""Our search attributes as level 1 knows them: never changed (a level-1 resolution that left
`attributes` out means these); a new attribute comes with a new level."""
_IMPLIED = ("search_attributes", "outcomes_attribute", "inbox_memo", "run_call_ids", "inbox_rounds")
