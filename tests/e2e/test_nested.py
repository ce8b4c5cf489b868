"""Agents as tools: nested runs as child workflows, approvals decided at the root.

These run on the real dev server: the Java time-skipping server stalls child workflows whose
workflow tasks run local activities when the worker caches nothing (10 s task timeouts), which
the real server does not do, and nothing here needs time skipping.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError

from hitl import (
    Agent,
    ModelReply,
    ModelRequest,
    Runner,
    RunState,
    ScriptedModel,
    ToolContext,
    function_tool,
)
from hitl.wire import DecisionInput, RunOutput, RunStatus
from tests.helpers import (
    ROOT,
    Ledger,
    activity_count,
    history,
    record_effect,
    serving,
    wait_for,
)


@function_tool(needs_approval=True)
def fetch(ctx: ToolContext[object], url: str) -> str:
    """Fetch a page (needs approval).

    Args:
        url: The page.
    """
    record_effect(ctx, "fetch")
    return f"content of {url}"


@function_tool
def note(ctx: ToolContext[object], text: str) -> str:
    """Take a note (no approval).

    Args:
        text: The note.
    """
    record_effect(ctx, "note")
    return f"noted {text}"


def researcher_script(req: ModelRequest) -> ModelReply:
    tool = "fetch" if "fetch" in req.tool_names() else "note"
    done = req.results_for(tool)
    if not done:
        arg = {"url": req.last_user_text()} if tool == "fetch" else {"text": req.last_user_text()}
        return ModelReply.call(tool, arg)
    return ModelReply.say(f"summary: {done[0].output}")


researcher = Agent(
    name="Researcher",
    instructions="Research what you are asked.",
    tools=[fetch],
    model=ScriptedModel(researcher_script, "tests.nested.researcher"),
)
note_taker = Agent(
    name="Note taker",
    tools=[note],
    model=ScriptedModel(researcher_script, "tests.nested.notes"),
)


def orchestrator_script(req: ModelRequest) -> ModelReply:
    """Call the single agent tool once per URL in the message (one per turn), then report."""
    tool = next(t for t in req.tool_names())
    urls = req.last_user_text().split()
    done = req.results_for(tool)
    if len(done) < len(urls):
        return ModelReply.call(tool, {"input": urls[len(done)]})
    return ModelReply.say(" | ".join(r.output or "" for r in done))


def orchestrator(name: str, tool: object) -> Agent[None]:
    return Agent(
        name=name,
        tools=[tool],  # type: ignore[list-item]
        model=ScriptedModel(orchestrator_script, f"tests.nested.{name}"),
    )


# nested tool needs approval; the agent tool itself does not
desk = orchestrator("Desk", researcher.as_tool(tool_name="research"))
# the agent tool needs approval; its tools do not
gated = orchestrator("Gated", note_taker.as_tool(tool_name="take_notes", needs_approval=True))
# both levels
double = orchestrator("Double", researcher.as_tool(tool_name="research", needs_approval=True))


@function_tool(needs_approval=True, required_approvals=2)
def open_vault(ctx: ToolContext[object], url: str) -> str:
    """Open the vault (two people must approve).

    Args:
        url: Which vault.
    """
    record_effect(ctx, "open_vault")
    return f"content of {url}"


keeper = Agent(
    name="Keeper",
    tools=[open_vault],
    model=ScriptedModel(
        lambda req: (
            ModelReply.call("open_vault", {"url": req.last_user_text()})
            if not req.results_for("open_vault")
            else ModelReply.say(f"summary: {req.results_for('open_vault')[0].output}")
        ),
        "tests.nested.keeper",
    ),
)
# four eyes inside an agent tool
vault_desk = orchestrator("Vault desk", keeper.as_tool(tool_name="keep"))


def child_events(hist: object, kind: int) -> int:
    return sum(1 for e in hist.events if e.event_type == kind)  # type: ignore[attr-defined]


async def test_approval_to_start_an_agent_tool(
    dev_client: Client, cache_size: int, ledger: Ledger
) -> None:
    client = dev_client
    async with serving(client, gated, cache=cache_size) as tq:
        result = await Runner.run(gated, "a b", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        assert (item.name, item.arguments) == ("take_notes", '{"input": "a"}')
        hist = await client.get_workflow_handle(result.workflow_id).fetch_history()
        started = EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
        assert child_events(hist, started) == 0, "nothing starts before the decision"

        state = result.to_state()
        state.approve(item)
        result = await Runner.run(gated, state, client=client, task_queue=tq, serve=False)
        [second] = result.interruptions
        state = result.to_state()
        state.reject(second, message="Enough notes.")
        result = await Runner.run(gated, state, client=client, task_queue=tq, serve=False)
    assert result.final_output == "summary: noted a | Enough notes."
    assert [r[2] for r in ledger.rows()] == ['{"text": "a"}']
    hist = await client.get_workflow_handle(result.workflow_id).fetch_history()
    assert child_events(hist, started) == 1, "the rejected agent tool never started a child"


async def test_nested_tool_approval_is_decided_at_the_root(
    dev_client: Client, cache_size: int, ledger: Ledger
) -> None:
    client = dev_client
    async with serving(client, desk, cache=cache_size) as tq:
        result = await Runner.run(desk, "x.org", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        research_call, nested_call = item.call_id.split("/")
        assert item.name == "fetch" and item.agent is researcher
        root_status = await client.get_workflow_handle(result.workflow_id).query(
            "status", result_type=RunStatus
        )
        [pending] = root_status.pending
        assert pending.path == ["Desk", "research", "Researcher"]
        child_id = f"{result.workflow_id}--{research_call}"
        assert pending.workflow_id == child_id
        assert root_status.phase == "awaiting_approval"

        # No approval path bypasses the root: the nested run refuses direct decisions.
        child = client.get_workflow_handle(child_id)
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await child.execute_update("approve", DecisionInput(call_id=nested_call))
        assert err.value.cause.type == "NotRoot"  # type: ignore[union-attr]
        assert f"decide on the root run {result.workflow_id}" in str(err.value.cause)
        assert ledger.count() == 0

        state = result.to_state()
        state.approve(item, approver="ann")
        result = await Runner.run(desk, state, client=client, task_queue=tq, serve=False)
    assert result.final_output == "summary: content of x.org"
    assert [(d.call_id, d.approver, d.source) for d in result.decisions] == [
        (item.call_id, "ann", "person")
    ]
    child_out = await client.get_workflow_handle(child_id, result_type=RunOutput).result()
    assert [(d.call_id, d.via) for d in child_out.decisions] == [(nested_call, "root")]
    assert ledger.count("fetch") == 1


async def test_both_levels_in_one_run_and_reject_reaches_the_child(
    dev_client: Client, cache_size: int, ledger: Ledger
) -> None:
    client = dev_client
    async with serving(client, double, cache=cache_size) as tq:
        result = await Runner.run(double, "y.org", client=client, task_queue=tq, serve=False)
        [start] = result.interruptions
        assert start.name == "research"
        state = result.to_state()
        state.approve(start)
        result = await Runner.run(double, state, client=client, task_queue=tq, serve=False)
        [inner] = result.interruptions
        assert inner.name == "fetch" and inner.call_id.startswith(f"{start.call_id}/")
        state = await RunState.from_string(double, result.to_state().to_string())
        state.reject(inner, message="Not that site.")
        result = await Runner.run(double, state, client=client, task_queue=tq, serve=False)
    assert result.final_output == "summary: Not that site."
    assert ledger.count() == 0
    child_id = f"{result.workflow_id}--{start.call_id}"
    child_hist = await client.get_workflow_handle(child_id).fetch_history()
    assert activity_count(child_hist, "execute_tool") == 0, "the rejected nested tool never ran"


async def test_always_approve_at_the_root_covers_nested_runs(
    dev_client: Client, cache_size: int, ledger: Ledger
) -> None:
    client = dev_client
    async with serving(client, desk, cache=cache_size) as tq:
        result = await Runner.run(
            desk, "a.org b.org c.org", client=client, task_queue=tq, serve=False
        )
        [first] = result.interruptions
        state = result.to_state()
        state.approve(first, always_approve=True)
        result = await Runner.run(desk, state, client=client, task_queue=tq, serve=False)
    assert result.interruptions == []
    assert result.final_output == (
        "summary: content of a.org | summary: content of b.org | summary: content of c.org"
    )
    assert ledger.count("fetch") == 3


# ----------------------------------------------------------------------------- same names


@function_tool(needs_approval=True)
def sign(ctx: ToolContext[object], doc: str) -> str:
    """Sign a document.

    Args:
        doc: The document.
    """
    record_effect(ctx, "sign")
    return f"signed {doc}"


helper_one = Agent(name="Helper", tools=[note], model=ScriptedModel(researcher_script, "t.h1"))


def signer_script(req: ModelRequest) -> ModelReply:
    if not req.results_for("sign"):
        return ModelReply.call("sign", {"doc": req.last_user_text()})
    return ModelReply.say(req.results_for("sign")[0].output or "")


helper_two = Agent(name="Helper", tools=[sign], model=ScriptedModel(signer_script, "t.h2"))


def pick_second(req: ModelRequest) -> ModelReply:
    if not req.tool_results():
        return ModelReply.call("helper_b", {"input": "contract"})
    return ModelReply.say(req.tool_results()[0].output or "")


twins = Agent(
    name="Twins",
    tools=[helper_one.as_tool(tool_name="helper_a"), helper_two.as_tool(tool_name="helper_b")],
    model=ScriptedModel(pick_second, "t.twins"),
)


async def test_agents_sharing_a_name_resolve_by_stable_identity(
    dev_client: Client, ledger: Ledger
) -> None:
    client = dev_client
    async with serving(client, twins) as tq:
        result = await Runner.run(twins, "go", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        assert item.agent_id == "Helper~2" and item.agent is helper_two
        loaded = await RunState.from_string(twins, result.to_state().to_string())
        assert loaded.interruptions[0].agent is helper_two
        loaded.approve(loaded.interruptions[0])
        result = await Runner.run(twins, loaded, client=client, task_queue=tq, serve=False)
    assert result.final_output == "signed contract"


async def test_resume_nested_approval_from_another_process(
    dev_client: Client, tmp_path: Path, ledger: Ledger
) -> None:
    client = dev_client
    async with serving(client, desk) as tq:
        result = await Runner.run(desk, "z.org", client=client, task_queue=tq, serve=False)
        saved = tmp_path / "state.json"
        saved.write_text(result.to_state().to_string())
        address = client.service_client.config.target_host
        script = (
            "import asyncio, pathlib\n"
            "from hitl import Runner, RunState, connect\n"
            "from tests.e2e.test_nested import desk\n"
            "async def main():\n"
            f"    client = await connect(address={address!r})\n"
            f"    text = pathlib.Path({str(saved)!r}).read_text()\n"
            "    state = await RunState.from_string(desk, text)\n"
            "    for item in state.interruptions:\n"
            "        state.approve(item, approver='other-process')\n"
            f"    result = await Runner.run(desk, state, client=client, task_queue={tq!r},\n"
            "                              serve=False)\n"
            "    print(result.final_output)\n"
            "asyncio.run(main())\n"
        )
        # The worker lives in this process's event loop, so wait for the other process
        # without blocking it.
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            script,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, stderr.decode()
    assert stdout.decode().strip().endswith("summary: content of z.org")
    final = await client.get_workflow_handle(result.workflow_id, result_type=RunOutput).result()
    assert [d.approver for d in final.decisions] == ["other-process"]


# ----------------------------------------------------------------------------- failures


def broken_script(req: ModelRequest) -> ModelReply:
    return ModelReply.call("does_not_exist")


broken = Agent(name="Broken", model=ScriptedModel(broken_script, "t.broken"))


def ask_broken(req: ModelRequest) -> ModelReply:
    if not req.tool_results():
        return ModelReply.call(req.tool_names()[0], {"input": "help"})
    return ModelReply.say(req.tool_results()[0].output or "")


soft = Agent(
    name="Soft", tools=[broken.as_tool(tool_name="ask")], model=ScriptedModel(ask_broken, "t.soft")
)
hard = Agent(
    name="Hard",
    tools=[broken.as_tool(tool_name="ask", on_failure="raise")],
    model=ScriptedModel(ask_broken, "t.hard"),
)


async def test_a_failed_nested_run_is_a_tool_error_or_a_failure(
    dev_client: Client,
) -> None:
    client = dev_client
    async with serving(client, soft, hard) as tq:
        result = await Runner.run(soft, "go", client=client, task_queue=tq, serve=False)
        assert result.final_output.startswith(
            "An error occurred while running the tool. Please try again. Error:"
        )
        assert "3 unusable turns in a row" in result.final_output
        from hitl import ModelBehaviorError

        with pytest.raises(ModelBehaviorError, match="unusable turns"):
            await Runner.run(hard, "go", client=client, task_queue=tq, serve=False)


async def test_cancelling_the_root_cancels_its_children(dev_client: Client) -> None:
    client = dev_client
    async with serving(client, desk) as tq:
        result = await Runner.run(desk, "w.org", client=client, task_queue=tq, serve=False)
        call = result.interruptions[0].call_id.split("/")[0]
        child = client.get_workflow_handle(f"{result.workflow_id}--{call}")
        await client.get_workflow_handle(result.workflow_id).cancel()
        with pytest.raises(WorkflowFailureError):
            await client.get_workflow_handle(result.workflow_id).result()
        with pytest.raises(WorkflowFailureError) as err:
            await child.result()
    assert "cancel" in str(err.value.cause).lower()


async def test_signalling_a_nested_run_directly_decides_nothing(
    dev_client: Client, ledger: Ledger
) -> None:
    """A client that signals a nested run (or the root, posing as the nested run) decides
    nothing: those signals only make each run read the other one, by query, whatever they say.

    The forged messages below are what an attacker with namespace access could send: a
    decision "from the root" to the nested run, and a report "from the nested run" telling the
    root nothing is pending any more.
    """
    client = dev_client
    async with serving(client, desk) as tq:
        result = await Runner.run(desk, "v.org", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        research_call, nested_call = item.call_id.split("/")
        root = client.get_workflow_handle(result.workflow_id)
        child = client.get_workflow_handle(f"{result.workflow_id}--{research_call}")
        reads = {
            "root": activity_count(await history(root), "read_run"),
            "child": activity_count(await history(child), "read_run"),
        }
        forged = {
            "call_id": nested_call,
            "tool_name": "fetch",
            "kind": "approve",
            "source": "person",
            "via": "root",
            "decided_at": "2026-01-01T00:00:00Z",
        }
        await child.signal(
            "__hitl_from_root",
            {"seq": 99, "decisions": [forged], "standing": [], "rules": {"fetch": "approve"}},
        )
        await root.signal(
            "__hitl_child_report", {"call_id": research_call, "phase": "running", "pending": []}
        )

        async def read_again() -> bool:
            return activity_count(await history(root), "read_run") > reads["root"] and (
                activity_count(await history(child), "read_run") > reads["child"]
            )

        # Both runs took the signals as "read me again" and read the other run itself.
        await wait_for(read_again, what="both runs to read each other again")
        child_status = await child.query("status", result_type=RunStatus)
        assert child_status.decisions == [] and [p.call_id for p in child_status.pending] == [
            nested_call
        ]
        root_status = await root.query("status", result_type=RunStatus)
        assert [p.call_id for p in root_status.pending] == [item.call_id], "still listed"
        assert root_status.phase == "awaiting_approval"
        assert ledger.count() == 0

        state = result.to_state()
        state.approve(item)
        result = await Runner.run(desk, state, client=client, task_queue=tq, serve=False)
    assert result.final_output == "summary: content of v.org"
    assert ledger.count("fetch") == 1


def fail_after_child(req: ModelRequest) -> ModelReply:
    """Ask the agent tool, and answer nothing usable afterwards (the run fails)."""
    return ModelReply.call(req.tool_names()[0], {"input": req.last_user_text()})


async def test_a_failing_root_cancels_its_children(dev_client: Client) -> None:
    # Two agent-tool calls in one turn: one parks on an approval inside its child; the other
    # fails the root (on_failure="raise"). The parked child must not outlive its root.
    both = Agent(
        name="Both",
        tools=[
            researcher.as_tool(tool_name="research"),
            broken.as_tool(tool_name="ask", on_failure="raise"),
        ],
        model=ScriptedModel(both_script, "t.both"),
    )
    client = dev_client
    async with serving(client, both) as tq:
        from hitl import ModelBehaviorError

        wid = f"both-{tq}"
        with pytest.raises(ModelBehaviorError):
            await Runner.run(
                both, "u.org", client=client, task_queue=tq, workflow_id=wid, serve=False
            )
        hist = await client.get_workflow_handle(wid).fetch_history()
        started = EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
        children = [
            e.start_child_workflow_execution_initiated_event_attributes.workflow_id
            for e in hist.events
            if e.event_type == started
        ]
        assert len(children) == 2
        for child_id in children:
            await wait_for(lambda c=child_id: _closed(client, c), what=f"{child_id} to close")
        research = client.get_workflow_handle(children[0])
        desc = await research.describe()
    assert desc.status is not None and desc.status.name == "CANCELED", (
        "the child parked on an approval was cancelled with its failed root"
    )


def both_script(req: ModelRequest) -> ModelReply:
    if not req.tool_results():
        return ModelReply.calls(("research", {"input": "u.org"}), ("ask", {"input": "help"}))
    return ModelReply.say("done")


async def _closed(client: Client, workflow_id: str) -> bool:
    desc = await client.get_workflow_handle(workflow_id).describe()
    return desc.status is not None and desc.status.name != "RUNNING"


def surveyor_script(req: ModelRequest) -> ModelReply:
    """Fetch every URL of the request, one per turn, inside one nested run."""
    urls = req.last_user_text().split()
    done = req.results_for("fetch")
    if len(done) < len(urls):
        return ModelReply.call("fetch", {"url": urls[len(done)]})
    return ModelReply.say(" + ".join(r.output or "" for r in done))


surveyor = Agent(name="Surveyor", tools=[fetch], model=ScriptedModel(surveyor_script, "t.surveyor"))


def survey_once(req: ModelRequest) -> ModelReply:
    if not req.results_for("survey"):
        return ModelReply.call("survey", {"input": req.last_user_text()})
    return ModelReply.say(req.results_for("survey")[0].output or "")


survey_desk = Agent(
    name="Survey desk",
    tools=[surveyor.as_tool(tool_name="survey")],
    model=ScriptedModel(survey_once, "t.survey_desk"),
)


async def test_always_approve_reaches_a_nested_run_already_running(
    dev_client: Client, cache_size: int, ledger: Ledger
) -> None:
    client = dev_client
    async with serving(client, survey_desk, cache=cache_size) as tq:
        result = await Runner.run(
            survey_desk, "p.org q.org", client=client, task_queue=tq, serve=False
        )
        [first] = result.interruptions
        assert first.arguments == '{"url": "p.org"}'
        state = result.to_state()
        state.approve(first, always_approve=True)
        # The nested run started before the rule existed: only forwarding can tell it.
        result = await Runner.run(survey_desk, state, client=client, task_queue=tq, serve=False)
    assert result.interruptions == []
    assert result.final_output == "content of p.org + content of q.org"
    assert ledger.count("fetch") == 2
    child_id = f"{result.workflow_id}--{first.call_id.split('/')[0]}"
    child = await client.get_workflow_handle(child_id, result_type=RunOutput).result()
    assert [(d.source, d.via) for d in child.decisions] == [
        ("person", "root"),
        ("always_rule", "workflow"),
    ]


async def test_four_eyes_inside_an_agent_tool_are_counted_at_the_root(
    dev_client: Client, cache_size: int, ledger: Ledger
) -> None:
    """A nested call that needs two approvers: both approvals go to the root, which shows
    the first and hands the decision down only when the second different person approved."""
    client = dev_client
    async with serving(client, vault_desk, cache=cache_size) as tq:
        result = await Runner.run(vault_desk, "v1", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        assert item.required_approvals == 2
        state = result.to_state()
        state.approve(item, approver="ann")
        result = await Runner.run(vault_desk, state, client=client, task_queue=tq, serve=False)
        [still] = result.interruptions
        assert (still.call_id, still.approved_by) == (item.call_id, ["ann"])
        assert ledger.count() == 0
        root = client.get_workflow_handle(result.workflow_id)
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await root.execute_update(
                "approve", DecisionInput(call_id=item.call_id, approver="ann", reason="again")
            )
        assert err.value.cause.type == "AlreadyDecided"  # type: ignore[union-attr]
        state = result.to_state()
        state.approve(still, approver="bob")
        result = await Runner.run(vault_desk, state, client=client, task_queue=tq, serve=False)
    assert result.final_output == "summary: content of v1"
    [decision] = result.decisions
    assert [a.approver for a in decision.approvals] == ["ann", "bob"]
    assert ledger.count("open_vault") == 1
