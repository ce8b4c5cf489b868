"""What a run knows about the nested runs it started (agents used as tools), for its book."""

from __future__ import annotations

from dataclasses import dataclass, field

from hitl.wire import Approval, ChildReport, DecisionRecord, PendingApproval


@dataclass
class ChildView:
    """What a run knows about one nested run it started (an agent-tool call in flight)."""

    call_id: str
    workflow_id: str
    report: ChildReport | None = None
    """The nested run's pending calls and phase, as last read from it (never from a signal)."""
    seq: int = 0
    """Bumped whenever decisions or rules for the nested run change."""
    decided: dict[str, DecisionRecord] = field(default_factory=dict)
    """Decisions for the nested run, by its (relative) call id: its mail."""
    approvals: dict[str, list[Approval]] = field(default_factory=dict)
    """Approvals given here for its calls that need several, while more are needed."""
    stale: bool = False
    """The nested run asked to be read again."""
    done: bool = False

    def pending(self) -> list[PendingApproval]:
        """The nested run's reported pending calls not yet decided here."""
        if self.done or self.report is None:
            return []
        return [
            p.model_copy(update={"approvals": self.approvals.get(p.call_id, [])})
            for p in self.report.pending
            if p.call_id not in self.decided
        ]

    def waiting_for_person(self) -> bool:
        """True when the nested run is blocked on a person and knows every decision sent."""
        return (
            not self.done
            and self.report is not None
            and self.report.phase == "awaiting_approval"
            and self.report.seen == self.seq
            and bool(self.pending())
        )

    def has_mail(self) -> bool:
        """True when the nested run has not yet read everything decided for it."""
        return not self.done and self.report is not None and self.report.seen != self.seq
