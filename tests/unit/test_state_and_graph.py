from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from hitl import (
    Agent,
    RunState,
    ScriptedModel,
    StateVersionError,
    ToolApprovalItem,
    UnknownCallError,
    UserError,
    function_tool,
    handoff,
)
from hitl.agent import capture_graph
from hitl.model import ModelReply
from hitl.state import CURRENT_SCHEMA_VERSION, SCHEMA_VERSIONS, ContextNotRebuiltWarning

model = ScriptedModel(lambda req: ModelReply.say("x"), "tests.unit.noop")


@function_tool(needs_approval=True)
def act(x: int) -> int:
    """Act."""
    return x


def test_agent_ids_are_stable_even_with_shared_names() -> None:
    a1 = Agent(name="Helper", instructions="first", model=model, tools=[act])
    a2 = Agent(name="Helper", instructions="second", model=model)
    root = Agent(name="Root", model=model, handoffs=[a1, handoff(a2, tool_name_override="to_two")])
    g1 = capture_graph(root)
    g2 = capture_graph(root)
    assert list(g1.graph.agents) == ["Root", "Helper", "Helper~2"]
    assert g1.graph.agents["Helper~2"].instructions == "second"
    assert g1.graph.fingerprint == g2.graph.fingerprint
    assert [h.tool_name for h in g1.graph.agents["Root"].handoffs] == [
        "transfer_to_helper",
        "to_two",
    ]
    assert g1.graph.agents["Helper"].tools[0].approval == "always"


def test_handoff_name_clash_is_refused() -> None:
    target = Agent(name="Act", model=model)
    with pytest.raises(UserError, match="clashes"):
        capture_graph(
            Agent(
                name="R",
                model=model,
                tools=[act],
                handoffs=[handoff(target, tool_name_override="act")],
            )
        )


def test_duplicate_tool_names_are_refused() -> None:
    with pytest.raises(UserError, match="two tools named 'act'"):
        Agent(name="R", tools=[act, act])


def _state(agent: Agent[None]) -> RunState:
    return RunState(
        workflow_id="wf-1",
        root_agent=agent,
        interruptions=[
            ToolApprovalItem(
                call_id="c1", name="act", arguments='{"x": 1}', agent=agent, agent_id=agent.name
            ),
            ToolApprovalItem(
                call_id="c2", name="act", arguments='{"x": 2}', agent=agent, agent_id=agent.name
            ),
        ],
    )


def test_run_state_round_trip_keeps_decisions() -> None:
    agent = Agent(name="Root", model=model, tools=[act])
    state = _state(agent)
    state.approve(state.interruptions[0], always_approve=True, approver="ann")
    state.reject("c2", message="nope")
    text = state.to_string()
    data = json.loads(text)
    assert data["$schemaVersion"] == CURRENT_SCHEMA_VERSION
    assert CURRENT_SCHEMA_VERSION in SCHEMA_VERSIONS
    loaded = asyncio.run(RunState.from_string(agent, text))
    assert [i.call_id for i in loaded.get_interruptions()] == ["c1", "c2"]
    assert loaded.interruptions[0].agent is agent, "agents resolve to the live graph"
    assert {k: (d.kind, d.always, d.message) for k, d in loaded.decisions.items()} == {
        "c1": ("approve", True, None),
        "c2": ("reject", False, "nope"),
    }
    assert asyncio.run(RunState.from_json(agent, data)).workflow_id == "wf-1"


def test_reject_takes_the_sdks_rejection_message_keyword() -> None:
    agent = Agent(name="Root", model=model, tools=[act])
    state = _state(agent)
    state.reject(state.interruptions[0], rejection_message="not today")
    state.reject("c2", always_reject=True, rejection_message="never", message="never")
    assert {k: (d.kind, d.always, d.message) for k, d in state.decisions.items()} == {
        "c1": ("reject", False, "not today"),
        "c2": ("reject", True, "never"),
    }
    loaded = asyncio.run(RunState.from_string(agent, state.to_string()))
    assert loaded.decisions["c1"].message == "not today"
    with pytest.raises(TypeError, match="rejection_message"):
        _state(agent).reject("c1", rejection_message="a", message="b")


def test_run_state_refuses_what_it_cannot_read() -> None:
    agent = Agent(name="Root", model=model, tools=[act])
    data = _state(agent).to_json()
    with pytest.raises(StateVersionError, match="Upgrade hitl"):
        asyncio.run(RunState.from_json(agent, {**data, "$schemaVersion": 99}))
    with pytest.raises(UserError, match="belongs to agent 'Root'"):
        asyncio.run(RunState.from_json(Agent(name="Other", model=model), data))
    with pytest.raises(UserError, match="must be JSON"):
        asyncio.run(RunState.from_string(agent, "{not json"))
    with pytest.raises(UserError, match="malformed RunState"):
        asyncio.run(RunState.from_json(agent, {"$schemaVersion": 1, "root_agent": "Root"}))
    with pytest.raises(UnknownCallError):
        _state(agent).approve("c9")


# ----------------------------------------------------------------------------- nested paths


def test_interruptions_keep_their_path_and_owning_run() -> None:
    from hitl.state import items_from_pending
    from hitl.wire import PendingApproval

    inner = Agent(name="Researcher", model=model, tools=[act])
    root = Agent(name="Desk", model=model, tools=[inner.as_tool(tool_name="research")])
    [item] = items_from_pending(
        [
            PendingApproval(
                call_id="c1/c2",
                tool_name="act",
                agent_id="Researcher",
                agent_name="Researcher",
                arguments='{"x": 1}',
                turn=1,
                path=["Desk", "research", "Researcher"],
                workflow_id="wf-1--c1",
            )
        ],
        root,
        "wf-1",
    )
    assert (item.path, item.owner_workflow_id, item.workflow_id) == (
        ["Desk", "research", "Researcher"],
        "wf-1--c1",
        "wf-1",
    )
    assert item.agent is inner
    state = RunState(workflow_id="wf-1", root_agent=root, interruptions=[item])
    loaded = asyncio.run(RunState.from_string(root, state.to_string()))
    assert loaded.interruptions[0].path == ["Desk", "research", "Researcher"]
    assert loaded.interruptions[0].owner_workflow_id == "wf-1--c1"
    assert SCHEMA_VERSIONS[2].startswith("Pending approvals carry their path")


def test_a_version_1_state_still_loads() -> None:
    agent = Agent(name="Root", model=model, tools=[act])
    data = _state(agent).to_json()
    data["$schemaVersion"] = 1
    for item in data["interruptions"]:
        del item["path"], item["owner_workflow_id"]
    loaded = asyncio.run(RunState.from_json(agent, data))
    assert [(i.call_id, i.path, i.owner_workflow_id) for i in loaded.interruptions] == [
        ("c1", [], None),
        ("c2", [], None),
    ]


# ----------------------------------------------------------------------------- changed graphs


@function_tool(needs_approval=True)
def other(x: int) -> int:
    """Something else."""
    return x


def test_loading_with_a_changed_graph_warns_that_the_run_stays_pinned() -> None:
    import warnings

    from hitl.state import AgentGraphChangedWarning

    saved = Agent(name="Root", instructions="v1", model=model, tools=[act])
    text = _state(saved).to_string()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same graph: no warning at all
        asyncio.run(RunState.from_string(saved, text))
    changed = Agent(name="Root", instructions="v2", model=model, tools=[act, other])
    with pytest.warns(AgentGraphChangedWarning, match="stays pinned to the agent graph") as seen:
        loaded = asyncio.run(RunState.from_string(changed, text))
    assert capture_graph(saved).graph.fingerprint in str(seen[0].message)
    assert loaded.interruptions[0].agent is changed


def test_loading_refuses_calls_the_graph_no_longer_has() -> None:
    saved = Agent(name="Root", model=model, tools=[act])
    text = _state(saved).to_string()
    without_tool = Agent(name="Root", model=model, tools=[other])
    with pytest.raises(UserError, match="is for tool 'act' of agent 'Root', which no longer"):
        asyncio.run(RunState.from_string(without_tool, text))

    inner = Agent(name="Researcher", model=model, tools=[act])
    nested = Agent(name="Desk", model=model, tools=[inner.as_tool(tool_name="research")])
    data = RunState(
        workflow_id="wf-2",
        root_agent=nested,
        interruptions=[
            ToolApprovalItem(
                call_id="c1/c2", name="act", arguments="{}", agent=inner, agent_id="Researcher"
            )
        ],
    ).to_string()
    flat = Agent(name="Desk", model=model, tools=[other])
    with pytest.raises(UserError, match="belongs to agent 'Researcher', which is no longer"):
        asyncio.run(RunState.from_string(flat, data))


# ----------------------------------------------------------------------------- the context


@dataclasses.dataclass
class Desk:
    """A context that is not JSON by itself."""

    team: str
    seats: int = 2


def desk_to_json(desk: Desk) -> dict[str, object]:
    return {"team": desk.team, "seats": desk.seats}


def desk_from_json(value: dict[str, object]) -> Desk:
    return Desk(team=str(value["team"]), seats=int(str(value["seats"])))


def test_a_saved_context_comes_back_through_the_callers_deserializer() -> None:
    agent = Agent(name="Root", model=model, tools=[act])
    state = _state(agent)
    state.context = Desk("ops")
    text = state.to_string(context_serializer=desk_to_json)
    saved = json.loads(text)["context"]
    assert saved == {
        "value": {"team": "ops", "seats": 2},
        "type": None,
        "serialized_via": "context_serializer",
        "resume": False,
    }
    loaded = asyncio.run(RunState.from_string(agent, text, context_deserializer=desk_from_json))
    assert loaded.context == Desk("ops")
    assert loaded.saved_context() is None, "the run keeps its own context: nothing is sent"
    # Saved again as it was, without the serializer at hand.
    assert json.loads(loaded.to_string())["context"] == saved


def test_without_a_deserializer_a_custom_context_is_json_or_refused_with_strict() -> None:
    agent = Agent(name="Root", model=model, tools=[act])
    state = _state(agent)
    state.context = Desk("ops")
    text = state.to_string(context_serializer=desk_to_json)
    with pytest.warns(ContextNotRebuiltWarning, match="context_deserializer"):
        loaded = asyncio.run(RunState.from_string(agent, text))
    assert loaded.context == {"team": "ops", "seats": 2}
    with pytest.raises(UserError, match="context_deserializer=") as caught:
        asyncio.run(RunState.from_string(agent, text, strict_context=True))
    assert "\n" not in caught.value.message
    # A dataclass dumped as JSON names its type, and loading never imports it by that name.
    state.context = Desk("ops")
    dumped = state.to_json()
    assert dumped["context"]["serialized_via"] == "model" and dumped["context"]["type"]
    with pytest.raises(UserError, match="strict_context"):
        asyncio.run(RunState.from_json(agent, dumped, strict_context=True))
    with pytest.raises(UserError, match="context_serializer="):
        state.to_json(strict_context=True)
    # A context that could not be saved at all: strict says so instead of loading None.
    state.context = object()
    omitted = state.to_json()
    assert omitted["context"]["serialized_via"] == "omitted"
    with pytest.raises(UserError, match="saved without its context"):
        asyncio.run(RunState.from_json(agent, omitted, strict_context=True))


def test_a_json_context_needs_nothing_and_an_override_replaces_it_on_resume() -> None:
    agent = Agent(name="Root", model=model, tools=[act])
    state = _state(agent)
    state.context = {"team": "ops"}
    text = state.to_string(strict_context=True)
    loaded = asyncio.run(RunState.from_string(agent, text, strict_context=True))
    assert loaded.context == {"team": "ops"} and loaded.saved_context() is None
    over = asyncio.run(
        RunState.from_string(agent, text, context_override={"team": "audit"}, strict_context=True)
    )
    assert over.context == {"team": "audit"}
    sent = over.saved_context()
    assert sent is not None and sent.value == {"team": "audit"}
    # Saved with the override pending, loaded elsewhere: it is still sent.
    again = asyncio.run(RunState.from_string(agent, over.to_string()))
    assert again.context == {"team": "audit"}
    assert again.saved_context() == sent

    # The deserializer is what the caller passes; its failure is one clear line.
    def broken(value: object) -> object:
        raise KeyError("seats")

    with pytest.raises(UserError, match="context_deserializer failed"):
        asyncio.run(RunState.from_string(agent, text, context_deserializer=broken))


def test_from_string_with_context_still_sends_its_context() -> None:
    agent = Agent(name="Root", model=model, tools=[act])
    state = _state(agent)
    state.approve("c1")
    text = state.to_string()
    merged = asyncio.run(RunState.from_string_with_context(agent, text, {"n": 1}))
    assert merged.context == {"n": 1} and merged.decisions
    sent = merged.saved_context()
    assert sent is not None and sent.value == {"n": 1}
    cleared = asyncio.run(
        RunState.from_string_with_context(agent, text, None, context_strategy="replace")
    )
    assert cleared.saved_context() is not None and not cleared.decisions
