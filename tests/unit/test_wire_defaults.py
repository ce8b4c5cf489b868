"""Wire defaults never change: payloads are stored without fields at their defaults.

`hitl.converter` omits every model field equal to its default, so a stored payload (a parked
run's pinned agent graph, its start input) is read back with whatever the default is *then*.
Changing a default would silently change runs already in flight; this test keeps the defaults
as recorded in `wire_defaults.json`. A new field is fine: record it with
`python -m tests.unit.test_wire_defaults --update`.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from hitl import wire
from hitl.client import data_converter
from hitl.wire import RunConfigSpec, RunInput, RunStatus, SettledStatus

SNAPSHOT = Path(__file__).with_name("wire_defaults.json")

RETIRED = {
    # Carried and never read (issue 13). Stored payloads may still hold them; `WireModel`
    # ignores unknown fields, so they are dropped on read. Their names are never reused.
    "CarriedState.continued_runs",
    "CarriedState.session_base",
}


def current_defaults() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, cls in sorted(vars(wire).items()):
        if name.startswith("_") or not (inspect.isclass(cls) and issubclass(cls, BaseModel)):
            continue
        if not cls.__module__.startswith(wire.__name__ + "."):
            continue
        fields: dict[str, Any] = {}
        for field, info in cls.model_fields.items():
            if info.default is not PydanticUndefined:
                value = info.default
            elif info.default_factory is not None:
                value = info.default_factory()  # type: ignore[call-arg]
            else:
                continue  # required
            fields[field] = json.loads(
                json.dumps(value.model_dump(mode="json") if isinstance(value, BaseModel) else value)
            )
        out[name] = fields
    return out


def test_wire_defaults_never_change() -> None:
    recorded = json.loads(SNAPSHOT.read_text())
    now = current_defaults()
    changed = [
        f"{model}.{field}: {recorded[model][field]!r} -> {now[model][field]!r}"
        for model in recorded
        for field in recorded[model]
        if model in now and field in now[model] and now[model][field] != recorded[model][field]
    ]
    assert not changed, (
        "a wire field's default changed; stored payloads omit defaults, so parked runs would "
        "read the new value. Add a new field instead:\n" + "\n".join(changed)
    )
    removed = [
        f"{m}.{f}"
        for m in recorded
        for f in recorded[m]
        if f not in now.get(m, {}) and f"{m}.{f}" not in RETIRED
    ]
    assert not removed, (
        f"wire fields lost their default or were removed: {removed}; a field may be retired "
        "only if no reader needs it (add it to RETIRED, so its name is never reused)"
    )
    reused = sorted(f"{m}.{f}" for m in now for f in now[m] if f"{m}.{f}" in RETIRED)
    assert not reused, f"retired wire field names came back: {reused}"
    new = [f"{m}.{f}" for m in now for f in now[m] if f not in recorded.get(m, {})]
    assert not new, (
        f"new wire fields {new}: record their defaults with "
        "`python -m tests.unit.test_wire_defaults --update`"
    )


def test_payloads_omit_defaults_but_operator_views_stay_complete() -> None:
    conv = data_converter(codec=None).payload_converter
    [start] = conv.to_payloads([RunInput(agent="Refund desk", input="hi")])
    assert json.loads(start.data) == {"agent": "Refund desk", "input": "hi"}
    [back] = conv.from_payloads([start], [RunInput])
    assert back == RunInput(agent="Refund desk", input="hi")
    assert back.run_config == RunConfigSpec()
    # An explicit None where the default is not None survives the round trip.
    spec = wire.ToolSpec(name="t", heartbeat_timeout_seconds=None)
    [p] = conv.to_payloads([spec])
    assert json.loads(p.data) == {"name": "t", "heartbeat_timeout_seconds": None}
    assert conv.from_payloads([p], [wire.ToolSpec])[0].heartbeat_timeout_seconds is None

    status = RunStatus(workflow_id="w", run_id="r", phase="running", agent="a", turn=0)
    [full] = conv.to_payloads([status])
    assert json.loads(full.data)["pending"] == [], "the status query answers in full"
    settled = SettledStatus(**status.model_dump())
    [slim] = conv.to_payloads([settled])
    assert "pending" not in json.loads(slim.data)
    assert conv.from_payloads([slim], [RunStatus])[0] == status


if __name__ == "__main__":
    if "--update" in sys.argv:
        SNAPSHOT.write_text(json.dumps(current_defaults(), indent=1, sort_keys=True) + "\n")
        print(f"wrote {SNAPSHOT}")
