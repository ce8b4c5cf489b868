from __future__ import annotations

import asyncio
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
from hitl.state import CURRENT_SCHEMA_VERSION, SCHEMA_VERSIONS

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
    assert SCHEMA_VERSIONS[CURRENT_SCHEMA_VERSION].startswith("Pending approvals carry their path")


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
