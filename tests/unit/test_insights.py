"""Decision insights without a server: counting, percentiles, bounded labels, and a Prometheus
exposition that hostile tool and approver names cannot break out of."""

from __future__ import annotations

import math
import re
from collections import Counter
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

from hitl.cli.insights import (
    Reading,
    _join_verdicts,
    as_json,
    figures_of,
    span_text,
    text_report,
    window_query,
)
from hitl.insights import (
    MAX_LABEL_CHARS,
    MAX_LABELS,
    OTHER,
    PendingCall,
    aggregate,
    bound,
    exposition,
    percentile,
    policy_hit,
)
from hitl.wire import ApproverDirectory, ApproverEntry, CallRecord, DecisionRecord, RunStatus
from hitl.workflows.metrics import approver_label

T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
UNTIL = T0 + timedelta(days=1)


def decision(
    tool: str,
    kind: str,
    waited: float | None,
    *,
    approver: str | None = "alice",
    source: str = "person",
    at: datetime = T0 + timedelta(hours=1),
    **more: object,
) -> DecisionRecord:
    return DecisionRecord(
        call_id=f"c{id(more)}",
        tool_name=tool,
        kind=kind,  # type: ignore[arg-type]
        approver=approver,
        source=source,  # type: ignore[arg-type]
        decided_at=at,
        requested_at=at - timedelta(seconds=waited) if waited is not None else None,
        **more,  # type: ignore[arg-type]
    )


def test_counts_each_outcome_edit_and_escalation_in_the_window() -> None:
    records = [
        decision("refund", "approve", 10),
        decision("refund", "approve", 30, arguments='{"amount": 5}', original_arguments="{}"),
        decision("refund", "reject", 50, approver="bob", escalated_at=T0),
        decision("refund", "expired", 3600, approver=None, source="deadline"),
        decision("close", "approve", None, approver=None, source="auto_approval"),
        # Outside the window, and an approval that still waits for a second person.
        decision("refund", "approve", 5, at=T0 - timedelta(minutes=1)),
        decision("refund", "approve", 5, still_needed=1),
    ]
    fig = aggregate(records, [], T0, UNTIL)
    assert fig.totals() == {
        "approved": 3,
        "rejected": 1,
        "expired": 1,
        "edited": 1,
        "escalated": 1,
    }
    assert fig.sources == Counter(person=3, deadline=1, auto_approval=1)
    # Time to decision: a person's decisions that know when the call started waiting.
    assert sorted(fig.by_tool["refund"]) == [10, 30, 50]
    assert "close" not in fig.by_tool
    assert sorted(fig.by_approver["alice"]) == [10, 30] and fig.by_approver["bob"] == [50]
    assert not fig.policy_fields and not fig.rule_hits and not fig.shadow_disagreements


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50 and percentile(values, 0.95) == 95
    assert percentile([7.0], 0.95) == 7
    assert math.isnan(percentile([], 0.5))


def test_pending_calls_and_the_age_of_the_oldest() -> None:
    pending = [
        PendingCall("refund", UNTIL - timedelta(minutes=5)),
        PendingCall("refund", UNTIL - timedelta(hours=2)),
        PendingCall("refund", None, "uncertain"),
    ]
    fig = aggregate([], pending, T0, UNTIL)
    assert fig.pending == Counter({("refund", "approval"): 2, ("refund", "uncertain"): 1})
    assert fig.oldest[("refund", "approval")] == 7200
    data = as_json(fig)
    assert data["pending"]["count"] == 3 and data["pending"]["oldest_seconds"] == 7200
    assert "pending now: 3 calls, oldest waiting 2h" in "\n".join(text_report(data, "1d"))


def test_label_values_are_bounded_whatever_the_payloads_name() -> None:
    # A thousand names someone put in decisions: at most MAX_LABELS of them plus `other`.
    counts = Counter({f"approver-{i}": i + 1 for i in range(1000)})
    labels = bound(counts)
    assert len(set(labels.values())) == MAX_LABELS + 1 and OTHER in labels.values()
    assert labels["approver-999"] == "approver-999" and labels["approver-0"] == OTHER
    # With the approver directory: only its names, whatever else is frequent.
    assert set(bound(counts, ["approver-3"]).values()) == {"approver-3", OTHER}
    assert len(bound(Counter({"x" * 500: 1}))["x" * 500]) == MAX_LABEL_CHARS

    records = [decision("refund", "approve", 1, approver=f"mallory-{i}") for i in range(300)]
    text = exposition(aggregate(records, [], T0, UNTIL), approvers=["alice"])
    approvers = set(re.findall(r'approver="([^"]*)"', text))
    assert approvers == {OTHER}
    # The window's summary still counts every decision, under `other`.
    assert 'hitl_time_to_decision_by_approver_seconds_count{approver="other"} 300' in text


SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r'(\{(?P<labels>([a-zA-Z_][a-zA-Z0-9_]*="(\\\\|\\"|\\n|[^"\\\n])*",?)*)\})?'
    r" (?P<value>[-+0-9.eENa]+|NaN)$"
)
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:\\\\|\\"|\\n|[^"\\\n])*)"')


def parse(text: str) -> list[tuple[str, dict[str, str], str]]:
    """A strict reading of the text exposition format: every line a comment or one sample."""
    samples = []
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        labels = {
            k: v.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
            for k, v in LABEL.findall(match.group("labels") or "")
        }
        samples.append((match.group("name"), labels, match.group("value")))
    return samples


def test_hostile_tool_and_approver_names_cannot_inject_samples() -> None:
    evil_tool = 'refund"} 1\nhitl_pending_calls{tool="forged'
    evil_who = 'eve\\"} 99\n# TYPE injected counter\ninjected 1'
    records = [
        decision(evil_tool, "approve", 12, approver=evil_who),
        decision(evil_tool, "reject", 3, approver=evil_who),
    ]
    pending = [PendingCall(evil_tool, UNTIL - timedelta(seconds=30))]
    text = exposition(aggregate(records, pending, T0, UNTIL))
    lines = text.splitlines()
    assert len([x for x in lines if x.startswith("# TYPE ")]) == 12
    assert len([x for x in lines if x.startswith("# HELP ")]) == 12
    samples = parse(text)
    names = {name for name, _, _ in samples}
    assert "injected" not in names
    pending_samples = [s for s in samples if s[0] == "hitl_pending_calls"]
    assert len(pending_samples) == 1
    # The names arrive whole as label values (cut to the label's length), never as syntax.
    assert pending_samples[0][1]["tool"] == evil_tool[:MAX_LABEL_CHARS]
    who = {lab["approver"] for name, lab, _ in samples if "approver" in lab}
    assert who == {evil_who[:MAX_LABEL_CHARS]}


def test_every_family_is_present_even_when_empty() -> None:
    text = exposition(aggregate([], [], T0, UNTIL))
    for family in (
        "hitl_decisions_window",
        "hitl_time_to_decision_seconds",
        "hitl_pending_calls",
        "hitl_pending_oldest_seconds",
        "hitl_rule_hits_window",
        "hitl_shadow_disagreements_window",
    ):
        assert f"# TYPE {family} " in text
    assert [s for s in parse(text) if s[0].startswith("hitl_rule")] == []


class PolicyRecord(DecisionRecord):
    """A decision record as policies will write it (the fields `policy_hit` reads)."""

    rule_id: str | None = None
    rule_effect: str | None = None
    shadow_rule_id: str | None = None
    shadow_effect: str | None = None


def test_rule_hits_and_shadow_disagreements_come_from_the_record_fields() -> None:
    base = decision("refund", "approve", 5).model_dump()
    by_person = PolicyRecord(**base, rule_id="four-eyes", rule_effect="ask", shadow_effect="allow",
                             shadow_rule_id="small-refunds")  # fmt: skip
    agreeing = PolicyRecord(**base, shadow_rule_id="small-refunds", shadow_effect="ask")
    assert policy_hit(decision("refund", "approve", 5)) is None
    assert policy_hit(by_person) == ("four-eyes", "ask", "small-refunds", True)
    assert policy_hit(agreeing) == ("", "", "small-refunds", False)
    fig = aggregate([by_person, agreeing], [], T0, UNTIL)
    assert fig.policy_fields
    assert fig.rule_hits == Counter({("four-eyes", "ask"): 1})
    assert fig.shadow_disagreements == Counter({"small-refunds": 1})
    text = exposition(fig)
    assert 'hitl_rule_hits_window{effect="ask",rule="four-eyes"} 1' in text
    assert 'hitl_shadow_disagreements_window{rule="small-refunds"} 1' in text


def test_a_worker_labels_only_approvers_its_directory_or_the_call_names() -> None:
    directory = ApproverDirectory(approvers={"dana": ApproverEntry(groups=["finance"])})
    call = CallRecord(
        call_id="c1",
        tool_name="refund",
        agent_id="a",
        agent_name="A",
        arguments="{}",
        turn=1,
        state="awaiting_approval",
        approvers=["erin"],
    )
    assert approver_label("dana", call, directory) == "dana"
    assert approver_label("erin", call, directory) == "erin"
    assert approver_label("anyone-else", call, directory) == OTHER
    assert approver_label("anyone-else", None, None) == OTHER
    assert approver_label(None, call, directory) == "unnamed"


def test_the_window_query_and_spans() -> None:
    query = window_query(T0, ["hitl", "it's"])
    assert "ExecutionStatus = 'Running' OR CloseTime >= '2026-11-20T09:00:00+00:00'" in query
    assert "ExecutionStatus != 'ContinuedAsNew'" in query
    assert (
        span_text(0.42) == "0.4s"
        and span_text(45) == "45s"
        and span_text(725) == "12m 5s"
        and span_text(90000) == "1d 1h"
    )
    assert span_text(math.nan) == "-"


def test_the_workers_exporter_escapes_what_a_label_holds() -> None:
    """The worker's endpoint is the SDK core's exporter: a label value with quotes, newlines
    and backslashes stays one label value (the worker bounds which names get there at all)."""
    import socket
    import urllib.request

    from hitl.worker.telemetry import metrics_runtime

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    runtime = metrics_runtime("127.0.0.1", port)
    evil = 'cancel"} 1\ninjected_total{x="1'
    runtime.metric_meter.create_counter("hitl_decisions_total").add(1, {"tool": evil})

    def scraped() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            return str(answer.read().decode())

    text = scraped()
    mine = [s for s in parse(text) if s[0] == "hitl_decisions_total"]
    assert [labels["tool"] for _, labels, _ in mine] == [evil]
    assert not [s for s in parse(text) if s[0] == "injected_total"]


class Verdict(BaseModel):
    """A policy verdict as the policy work records one per matched call (`PolicyVerdict`)."""

    call_id: str
    rule: str | None = None
    effect: str | None = None
    shadow_rule: str | None = None
    shadow_effect: str | None = None
    outcome: str | None = None


class RuledRecord(DecisionRecord):
    """A decision record naming its rule as the policy work names it."""

    policy_rule: str | None = None
    policy_version: str | None = None


class PolicyStatus(RunStatus):
    """A `status` answer of a run under a policy (it lists its verdicts)."""

    verdicts: list[Verdict] = []


def test_verdicts_count_rule_hits_and_shadow_disagreements_per_run() -> None:
    asked = RuledRecord(**decision("refund", "approve", 30).model_dump(), policy_rule="four-eyes",
                        policy_version="refunds@3 sha256:abc")  # fmt: skip
    status = PolicyStatus(
        workflow_id="w",
        run_id="r",
        phase="completed",
        agent="desk",
        decisions=[asked],
        verdicts=[
            Verdict(call_id=asked.call_id, rule="four-eyes", effect="ask", outcome="asked",
                    shadow_rule="auto-small", shadow_effect="allow"),
            Verdict(call_id="t2.1", rule="too-big", effect="deny", outcome="refused",
                    shadow_rule="deny-all", shadow_effect="deny"),
        ],
    )  # fmt: skip
    reading = Reading()
    reading.decisions += status.decisions
    _join_verdicts(reading, status)
    fig = figures_of(reading, T0, UNTIL, 10)
    assert fig.rule_hits == Counter({("four-eyes", "ask"): 1, ("too-big", "deny"): 1})
    assert fig.shadow_disagreements == Counter({"auto-small": 1})  # deny-all agreed
    # Without verdicts (a completed run read from its result), the record's rule still counts.
    alone = aggregate([asked], [], T0, UNTIL)
    assert alone.rule_hits == Counter({("four-eyes", ""): 1}) and not alone.shadow_disagreements
