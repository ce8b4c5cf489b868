"""What the Temporal UI shows of a paused run (its current details), without a server."""

from __future__ import annotations

from datetime import UTC, datetime

from hitl.wire import Approval, ApprovalRequestData, PendingApproval
from hitl.workflows.details import WRAP, _call_lines, wrapped


def test_a_four_eyes_call_says_who_may_decide_and_who_approved() -> None:
    call = PendingApproval(
        call_id="t1.1", tool_name="release_funds", agent_id="a", agent_name="Treasury",
        arguments="{}", turn=1, requested_at=datetime(2026, 11, 26, tzinfo=UTC),
        approvers=["ann", "group:finance"], required_approvals=2,
        approvals=[Approval(approver="ann", approved_at=datetime(2026, 11, 26, tzinfo=UTC))],
        request=ApprovalRequestData(title="Release $9000", message="m",
                                    preview="+" + "x" * 300, preview_label="Diff"),
    )  # fmt: skip
    text = "\n".join(_call_lines("w", call))
    assert "Who may decide: `ann`, `group:finance`." in text
    assert "approved so far by `ann`" in text
    widest = max(len(line) for line in text.splitlines())
    assert widest <= WRAP + 2, "a long preview line is folded, not scrolled sideways"


def test_folding_keeps_a_diffs_marks_and_every_character() -> None:
    diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-" + "a" * 250 + "\n+" + "b" * 250 + "\n short"
    out = wrapped(diff, width=60)
    assert all(len(line) <= 62 for line in out.splitlines())
    removed = [line for line in out.splitlines() if line.startswith("-") and "---" not in line]
    added = [line for line in out.splitlines() if line.startswith("+") and "+++" not in line]
    assert "".join(line[1:].replace("↪", "").replace(" ", "") for line in removed) == "a" * 250
    assert "".join(line[1:].replace("↪", "").replace(" ", "") for line in added) == "b" * 250
    assert out.splitlines()[:3] == diff.splitlines()[:3] and out.endswith("\n short")
