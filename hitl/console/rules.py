"""Who may see what in the console: a call is shown to those who may decide it, and to viewers.

A call names who may decide it (`PendingApproval.approvers`): people by name and groups as
`group:NAME`, which the approver directory fills (the file the workers read, `HITL_APPROVERS`;
the console reads the same file, `--approvers`). An empty list means anyone. This is the rule
the run itself applies (`hitl.rules.may_decide`); the run stays the judge of every decision, and
the console's rule only decides what it shows. Viewers (`--viewers NAME`, `--viewers
group:NAME`) see every call and decide only what the rule lets them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from hitl import rules
from hitl.rules import GROUP
from hitl.wire import ApproverDirectory, DecisionRecord

__all__ = ["GROUP", "Rules"]


@dataclass(frozen=True)
class Rules:
    """The approver directory and the viewers a console shows calls by."""

    directory: ApproverDirectory | None = None
    viewers: frozenset[str] = field(default_factory=frozenset)
    """Names, and groups as `group:NAME`, who see every call."""

    @classmethod
    def of(cls, directory: ApproverDirectory | None, viewers: Iterable[str] = ()) -> Rules:
        """Rules from a directory (or none) and viewer entries (blank ones are ignored)."""
        return cls(directory, frozenset(v.strip() for v in viewers if v.strip()))

    def groups(self, person: str) -> list[str]:
        """The groups the directory puts `person` in."""
        entry = self.directory.approvers.get(person) if self.directory is not None else None
        return list(entry.groups) if entry is not None else []

    def is_viewer(self, person: str) -> bool:
        """Whether `person` sees every call (by name, or through a group)."""
        if person in self.viewers:
            return True
        return any(GROUP + g in self.viewers for g in self.groups(person))

    def may_decide(self, person: str, approvers: list[str]) -> bool:
        """Whether `person` may decide a call whose approver list is `approvers`.

        The run's rule (`hitl.rules.may_decide`): an empty list means anyone; else the person is
        named, or is in a group the list names.
        """
        return rules.may_decide(person, approvers, self.directory)

    def may_see(self, person: str, approvers: list[str]) -> bool:
        """Whether `person` may see a call whose approver list is `approvers`."""
        return self.is_viewer(person) or self.may_decide(person, approvers)

    @staticmethod
    def took_part(person: str, d: DecisionRecord) -> bool:
        """Whether `person` decided, or approved towards, a recorded decision."""
        return d.approver == person or any(a.approver == person for a in d.approvals)
