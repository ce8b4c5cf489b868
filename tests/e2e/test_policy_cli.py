"""A worker process with `--policy`, and `hitl policy explain` on its runs (real dev server)."""

from __future__ import annotations

import json
from pathlib import Path

from hitl.worker.devserver import DevServer
from tests.e2e.cli_support import hitl, pending_json
from tests.helpers import ROOT, WorkerProcess, desk_approvers, queue_name

POLICY = """
policy: refund-desk-e2e
version: "7"
rules:
  - id: no-cancellations
    tools: [cancel_order]
    effect: deny
    message: Orders are not cancelled by the desk today.
  - id: two-of-finance
    tools: [refund]
    when: [{arg: amount, gt: 100}]
    effect: ask
    approvers: [ann, bob, cy]
    required_approvals: 2
  - id: would-ask-managers
    tools: [refund]
    when: [{arg: amount, ge: 250}]
    effect: ask
    approvers: [mia]
    mode: log_only
"""


def test_a_worker_serves_the_shipped_policy_with_its_limits(
    dev_server: DevServer, tmp_path: Path
) -> None:
    # The refund desk's policy has a limit rule: the stock worker answers it with the
    # namespace's ledger (HitlLedger), so it starts and serves.
    worker = WorkerProcess(
        dev_server.address,
        queue_name("limits"),
        agents="hitl.examples.refund_desk:agent",
        extra_args=["--policy", str(ROOT / "examples" / "policies" / "refund_desk.yaml")],
        env={"HITL_BACKOFFICE_DB": str(tmp_path / "backoffice.sqlite"), **desk_approvers(tmp_path)},
    ).start()
    try:
        assert worker.process is not None and worker.process.poll() is None
    finally:
        worker.stop()


async def test_explain_names_the_pinned_rule_and_why(dev_server: DevServer, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    tq, address = queue_name("policy"), dev_server.address
    worker = WorkerProcess(
        address,
        tq,
        agents="hitl.examples.refund_desk:agent",
        extra_args=["--policy", str(policy)],
        # The shipped refund desk: finance decides, signed (its approver directory).
        env={"HITL_BACKOFFICE_DB": str(tmp_path / "backoffice.sqlite"), **desk_approvers(tmp_path)},
    ).start()
    try:
        wid = f"{tq}-run"
        text = "Order 1001 arrived broken: refund $250. Also cancel order 1002."
        out = hitl(address, "--task-queue", tq, "run", "Refund desk", text, "--id", wid, "--wait")
        assert out.returncode == 0, out.stderr
        [row] = await pending_json(
            address, "--queue", tq, until=lambda rows: len(rows) == 1, what="the refund waits"
        )
        assert row["tool_name"] == "refund"
        policy.write_text(POLICY.replace('version: "7"', 'version: "8"'))  # pinned: no effect
        explained = hitl(address, "policy", "explain", wid, row["call_id"])
        assert explained.returncode == 0, explained.stderr
        text_out = explained.stdout
        assert "policy refund-desk-e2e@7 sha256:" in text_out
        assert "verdict: ask by rule two-of-finance" in text_out
        assert "amount gt 100: holds" in text_out
        assert "log_only rules would make it: ask (rule two-of-finance)" in text_out
        assert "rule no-cancellations (deny): no match" in text_out
        audit = hitl(address, "audit", wid)
        rows = [json.loads(line) for line in audit.stdout.splitlines()]
        verdicts = {r["kind"]: r for r in rows if r["event"] == "policy"}
        assert verdicts["deny"]["policy_rule"] == "no-cancellations"
        assert verdicts["deny"]["outcome"] == "refused"
        assert verdicts["ask"]["reason"] == "log_only: ask by two-of-finance"
        assert verdicts["ask"]["policy_version"].startswith("refund-desk-e2e@7 sha256:")
        denied = hitl(address, "policy", "explain", wid, verdicts["deny"]["call_id"])
        assert "verdict: deny by rule no-cancellations" in denied.stdout, denied.stderr
        unknown = hitl(address, "policy", "explain", wid, "t9.9")
        assert unknown.returncode == 1 and "no verdict for call t9.9" in unknown.stderr
    finally:
        worker.stop()
