"""The pinned resolution (`ResolvedRun`) stores its level instead of the flags it implies."""

from __future__ import annotations

import json

from hitl.converter import HitlPayloadConverter
from hitl.wire import (
    LEVEL_1_ATTRIBUTES,
    RESOLVED_LEVEL,
    SEARCH_ATTRIBUTES,
    AgentGraph,
    ResolvedRun,
)

CONV = HitlPayloadConverter()
GRAPH = AgentGraph(root="a", agents={}, fingerprint="f")
FLAGS = ("search_attributes", "outcomes_attribute", "inbox_memo", "run_call_ids", "inbox_rounds")


def round_trip(run: ResolvedRun) -> tuple[dict[str, object], ResolvedRun]:
    [payload] = CONV.to_payloads([run])
    return json.loads(payload.data), CONV.from_payloads([payload], [ResolvedRun])[0]


def flags(run: ResolvedRun) -> tuple[object, ...]:
    return tuple(getattr(run, f) for f in FLAGS)


def test_level_one_knows_every_attribute_of_ours() -> None:
    # A new search attribute needs a new level: a level-1 resolution that left `attributes`
    # out means exactly these, forever.
    assert tuple(SEARCH_ATTRIBUTES) == LEVEL_1_ATTRIBUTES
    assert RESOLVED_LEVEL == 1


def test_all_attributes_are_stored_as_the_level_alone() -> None:
    data, back = round_trip(ResolvedRun(graph=GRAPH, attributes=list(SEARCH_ATTRIBUTES), level=1))
    assert set(data) == {"graph", "level"}
    assert back.attributes == list(LEVEL_1_ATTRIBUTES)
    assert flags(back) == (True, True, True, True, True)


def test_some_or_no_attributes_are_stored_and_say_what_is_kept() -> None:
    core = [a for a in LEVEL_1_ATTRIBUTES if a != "HitlOutcomes"]
    data, back = round_trip(ResolvedRun(graph=GRAPH, attributes=core, level=1))
    assert data["attributes"] == core and not set(FLAGS) & set(data)
    assert flags(back) == (True, False, True, True, True)
    data, back = round_trip(ResolvedRun(graph=GRAPH, attributes=[], level=1))
    assert data["attributes"] == [] and not set(FLAGS) & set(data)
    assert flags(back) == (False, False, True, True, True)


def test_a_resolution_recorded_by_older_code_reads_as_it_was() -> None:
    old = {"graph": json.loads(GRAPH.model_dump_json()), "inbox_memo": True}
    back = ResolvedRun.model_validate_json(json.dumps(old))
    assert (back.level, back.attributes) == (0, None)
    assert flags(back) == (False, False, True, False, False)
    data, again = round_trip(back)
    assert "level" not in data and data["inbox_memo"] is True and flags(again) == flags(back)
