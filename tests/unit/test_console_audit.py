"""The console's audit page: an expiry is its own outcome, and every action on a call is listed
(to the people who may see that call), with whom refused attempts named."""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.testclient import TestClient

from hitl.console.app import create_app
from hitl.console.auth import COOKIE, Authenticator
from hitl.console.data import ConsoleData
from hitl.console.rules import Rules
from hitl.console.urls import audit_url
from hitl.wire import (
    CallAction,
    DecisionRecord,
    PendingApproval,
    PolicyVerdict,
    RefusedDecision,
    RunSnapshot,
    RunStatus,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DIGEST = "sha256:" + "b" * 64


def _snapshot() -> RunSnapshot:
    """ann approved t1.1 (then resolved it); t1.2 waits for cy; t1.3 expired (recorded by an
    older version: `reject` with `expired` set); a late approval of t1.3 by bob was refused."""
    waiting = PendingApproval(
        call_id="t1.2", tool_name="note", agent_id="A", agent_name="A", turn=1,
        arguments="{}", approvers=["cy"],
    )  # fmt: skip
    expiry = DecisionRecord.model_validate(
        {"call_id": "t1.3", "tool_name": "wire", "kind": "reject", "expired": True,
         "source": "deadline", "via": "workflow", "decided_at": NOW.isoformat(),
         "message": "Approval for wire expired after 60s without a decision."}
    )  # fmt: skip
    return RunSnapshot(
        status=RunStatus(
            workflow_id="w", run_id="r", phase="awaiting_approval", agent="A", pending=[waiting],
            decisions=[
                DecisionRecord(call_id="t1.1", tool_name="pay", kind="approve", approver="ann",
                               decided_at=NOW, policy_rule="four-eyes",
                               policy_version="desk@1 sha256:aaaaaaaaaaaa"),
                expiry,
            ],
            actions=[
                CallAction(kind="resolve", call_id="t1.1", tool_name="pay", at=NOW,
                           approver="<b>ann</b>", outcome="happened", text="paid-ref-77"),
                CallAction(kind="extend", call_id="t1.2", tool_name="note", at=NOW,
                           approver="cy", previous=NOW, deadline=NOW, reason="cy-extended"),
            ],
            verdicts=[
                PolicyVerdict(call_id="t1.2", policy="desk", version="1", digest=DIGEST,
                              rule="<i>ask-cy</i>", effect="ask", matched=["<i>ask-cy</i>"],
                              shadow_effect="deny", shadow_rule="would-deny", outcome="asked"),
                PolicyVerdict(call_id="t1.3", policy="desk", version="1", digest=DIGEST,
                              rule="secret-rule", effect="ask", matched=["secret-rule"]),
            ],
            refused=[
                RefusedDecision(received_at=NOW, name="approve", payload="{}",
                                error_type="DeadlinePassed", message="late", call_id="t1.3",
                                approver="bob-the-late", via="update"),
            ],
        ),
        input_items=[], new_items=[],
    )  # fmt: skip


def _page(who: str) -> str:
    snap = _snapshot()

    class Canned(ConsoleData):
        async def snapshot(self, namespace: str, workflow_id: str) -> RunSnapshot:
            return snap

    auth = Authenticator(mode="link", user="ann")
    app = create_app(Canned({"default": None}), auth, rules=Rules.of(None, ["olga"]))  # type: ignore[dict-item]
    cookie, _ = auth.sessions.issue(who)
    with TestClient(app, base_url="http://127.0.0.1:8090", cookies={COOKIE: cookie}) as c:
        page = c.get(audit_url("default", "w"))
    assert page.status_code == 200
    return page.text


def test_the_audit_page_shows_an_expiry_as_its_own_outcome_and_every_action() -> None:
    page = _page("olga")  # a viewer: everything
    row = page[page.index("<code>t1.3</code>") :]
    assert row[: row.index("</tr>")].count("expired") == 2, "kind expired, and its message"
    assert "<td>reject" not in page
    assert "resolve: happened" in page and "paid-ref-77" in page
    assert "&lt;b&gt;ann&lt;/b&gt;" in page and "<b>ann</b>" not in page, "escaped"
    assert "extend" in page and "cy-extended" in page
    assert "from bob-the-late" in page, "a refused row names whom it refused"


def test_a_person_sees_the_actions_of_the_calls_they_may_see() -> None:
    ann = _page("ann")  # she decided t1.1; t1.2 is cy's
    assert "paid-ref-77" in ann and "cy-extended" not in ann
    cy = _page("cy")  # her call waits (no decision yet): its extension, nothing of ann's
    assert "paid-ref-77" not in cy and "cy-extended" in cy


def test_the_audit_page_names_the_policy_rule_and_version_of_the_calls_one_may_see() -> None:
    olga = _page("olga")
    assert "policy rule four-eyes · desk@1 sha256:aaaaaaaaaaaa" in olga
    assert "&lt;i&gt;ask-cy&lt;/i&gt;" in olga and "<i>ask-cy</i>" not in olga, "escaped"
    assert "deny (would-deny)" in olga, "what a log-only rule would have decided"
    cy = _page("cy")  # t1.2 is hers; t1.3's verdict is not
    assert "would-deny" in cy and "secret-rule" not in cy
