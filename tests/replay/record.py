"""Record representative histories for the replay tests (`make histories`).

Runs a fresh dev server and worker, drives a few runs to interesting points (completed,
parked, rejected after a handoff, continued-as-new, continued-as-new while parked), and saves
each history as JSON. Commit the files: CI replays them against the current workflow code, so
an incompatible change to `AgentRun` fails the build instead of breaking parked runs in
production. `--only NAME` records one scenario and leaves the other files as they are (older
histories must keep replaying: re-record them only when no such runs can exist).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowUpdateFailedError

from hitl import (
    Agent,
    EffectUnknown,
    HostedMCPTool,
    ModelReply,
    ModelRequest,
    RunConfig,
    Runner,
    ScriptedModel,
    ToolContext,
    function_tool,
)
from hitl.client import data_converter
from hitl.wire import DecisionInput, ExtendInput, ResolveInput, RunStatus
from hitl.worker.devserver import DevServer
from tests.agents import local_support_agent, support_agent, weather_agent
from tests.helpers import serving
from tests.hosted_mcp_agents import DEEPWIKI, approval_request, list_tools, mcp_call
from tests.workflows.test_approvals import sequential_agent
from tests.workflows.test_compaction import desk, grow_until_continued, park_on_the_wire

OUT = Path(__file__).parent / "histories"


SCENARIOS = (
    "completed_approved",
    "parked_after_handoff",
    "completed_rejected",
    "continued_as_new",
    "continued_while_parked",
    "completed_local_tools",
    "completed_expired",
    "completed_hosted_mcp",
)

# ----------------------------------------------------------------------------- expiry scenario


@function_tool(needs_approval=True, approval_timeout=1.0)
def wire_funds(amount: int) -> str:
    """Wire funds (its approval waits one second).

    Args:
        amount: Dollars.
    """
    return f"wired ${amount}"


_LOST: set[str] = set()


@function_tool(needs_approval=True, approval_timeout=3600.0, retry_safe=False)
def pay_supplier(ctx: ToolContext[object], amount: int) -> str:
    """Pay a supplier (the first answer gets lost: the call turns uncertain).

    Args:
        amount: Dollars.
    """
    if ctx.idempotency_key not in _LOST:
        _LOST.add(ctx.idempotency_key)
        raise EffectUnknown("the bank timed out after the request was sent")
    return f"paid ${amount}"


def _deadline_script(req: ModelRequest) -> ModelReply:
    results = req.tool_results()
    if results:
        return ModelReply.say("; ".join(f"{r.name}: {r.output}" for r in results))
    return ModelReply.calls(("wire_funds", {"amount": 900}), ("pay_supplier", {"amount": 300}))


deadline_desk = Agent(
    name="Deadline desk",
    tools=[wire_funds, pay_supplier],
    model=ScriptedModel(_deadline_script, "tests.replay.deadline_desk"),
)


def _hosted_script(req: ModelRequest) -> ModelReply:
    """The hosted server lists its tools and asks once; once answered, it ran the call."""
    if not any(i.get("type") == "mcp_approval_response" for i in req.input):
        return ModelReply.raw(list_tools(), approval_request("mcpr_1"))
    answer = {"type": "message", "role": "assistant", "content": [{"type": "output_text"}]}
    answer["content"][0]["text"] = "Rust"
    return ModelReply.raw(mcp_call("mcpr_1", "Rust"), answer)


hosted_desk = Agent(
    name="Hosted desk",
    tools=[HostedMCPTool(tool_config=DEEPWIKI)],
    model=ScriptedModel(_hosted_script, "tests.replay.hosted_desk"),
)


async def record_hosted_mcp(opts: dict[str, Any], save: Any) -> None:
    """A hosted MCP server's approval request, parked, approved, answered, then its call."""
    r = await Runner.run(hosted_desk, "which language?", workflow_id="replay-hosted", **opts)
    state = r.to_state()
    state.approve(r.interruptions[0])
    await Runner.run(hosted_desk, state, **opts)
    await save("completed_hosted_mcp", "replay-hosted")


async def record(address: str, only: str | None = None) -> None:
    client = await Client.connect(address, data_converter=data_converter())
    OUT.mkdir(exist_ok=True)

    async def save(name: str, workflow_id: str, run_id: str | None = None) -> None:
        hist = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        (OUT / f"{name}.json").write_text(hist.to_json())
        print(f"saved {name}: {len(hist.events)} events")

    agents = (
        support_agent,
        local_support_agent,
        weather_agent,
        sequential_agent,
        desk,
        deadline_desk,
        hosted_desk,
    )
    async with serving(client, *agents) as tq:
        opts = {"client": client, "task_queue": tq, "serve": False}
        if only == "continued_while_parked":
            await record_parked_compaction(client, tq, save)
            return
        if only == "completed_local_tools":
            await record_local_tools(opts, save)
            return
        if only == "completed_expired":
            await record_expired(client, opts, save)
            return
        if only == "completed_hosted_mcp":
            await record_hosted_mcp(opts, save)
            return
        r = await Runner.run(
            support_agent, "cancel order 7", workflow_id="replay-completed", **opts
        )
        state = r.to_state()
        state.approve(r.interruptions[0])
        await Runner.run(support_agent, state, **opts)
        await save("completed_approved", "replay-completed")

        await Runner.run(
            weather_agent,
            "What is the weather in Oakland and San Francisco?",
            workflow_id="replay-parked",
            **opts,
        )
        await save("parked_after_handoff", "replay-parked")

        r = await Runner.run(
            support_agent,
            "cancel order 8 and email a refund notice",
            workflow_id="replay-rejected",
            **opts,
        )
        state = r.to_state()
        for item in r.interruptions:
            state.reject(item, message="not today")
        await Runner.run(support_agent, state, **opts)
        await save("completed_rejected", "replay-rejected")

        r = await Runner.run(
            sequential_agent,
            "cancel 1, 2 and 3",
            workflow_id="replay-can",
            run_config=RunConfig(continue_as_new_after_events=12),
            **opts,
        )
        state = r.to_state()
        state.approve(r.interruptions[0], always_approve=True)
        await Runner.run(sequential_agent, state, **opts)
        # The first run of the chain: it ended by continuing as new.
        first = [e async for e in client.list_workflows("WorkflowId = 'replay-can'")]
        oldest = min(first, key=lambda w: w.start_time)
        hist = await client.get_workflow_handle("replay-can", run_id=oldest.run_id).fetch_history()
        (OUT / "continued_as_new.json").write_text(hist.to_json())
        print(f"saved continued_as_new: {len(hist.events)} events")
        await record_parked_compaction(client, tq, save)
        await record_local_tools(opts, save)
        await record_expired(client, opts, save)
        await record_hosted_mcp(opts, save)


async def record_local_tools(opts: dict[str, Any], save: Any) -> None:
    """Both tools as local activities: an approved call, and one retried after a failure."""
    r = await Runner.run(
        local_support_agent,
        "cancel order 7 and email the customer",
        workflow_id="replay-local-tools",
        **opts,
    )
    state = r.to_state()
    state.approve(r.interruptions[0])
    await Runner.run(local_support_agent, state, **opts)
    await save("completed_local_tools", "replay-local-tools")


async def record_expired(client: Client, opts: dict[str, Any], save: Any) -> None:
    """A call that expired, and every later action on the run: a reject and an approval of the
    expired call (the approval refused as late), a refused signal, an extended deadline, an
    approval, an uncertain attempt and its resolution (recorded as `reject` + `expired` by
    the versions before expiry was its own kind)."""
    wid = "replay-expired"
    r = await Runner.run(deadline_desk, "pay them both", workflow_id=wid, **opts)
    wire, pay = (p.call_id for p in r.interruptions)
    handle = client.get_workflow_handle(wid)
    await handle.execute_update(
        "extend", ExtendInput(call_id=pay, seconds=600, approver="ann", reason="on leave")
    )
    await _until(handle, lambda s: any(d.call_id == wire for d in s.decisions))
    await handle.execute_update("reject", DecisionInput(call_id=wire, approver="bob"))
    try:
        await handle.execute_update("approve", DecisionInput(call_id=wire, approver="bob"))
    except WorkflowUpdateFailedError:
        pass  # DeadlinePassed, and recorded as refused
    await handle.signal("approve", {"call_id": wire, "approver": "carol"})
    await handle.execute_update("approve", DecisionInput(call_id=pay, approver="ann"))
    await _until(handle, lambda s: any(p.kind == "uncertain" for p in s.pending))
    await handle.execute_update(
        "resolve",
        ResolveInput(call_id=pay, outcome="happened", output="paid $300", approver="ann"),
    )
    await handle.result()
    await save("completed_expired", wid)


async def _until(handle: Any, ok: Any) -> RunStatus:
    """The run's status once `ok` holds (polled; recording only, never in a test)."""
    for _ in range(600):
        status: RunStatus = await handle.query("status", result_type=RunStatus)
        if ok(status):
            return status
        await asyncio.sleep(0.05)
    raise TimeoutError("the run never got there")


async def record_parked_compaction(client: Client, tq: str, save: Any) -> None:
    """A run that continued as new while it waited for a person, and the run that carried on:
    the first ends parked (pending call, deadline, standing rule), the second finishes it."""
    wid, _, wire_call = await park_on_the_wire(client, tq)
    first = (await client.get_workflow_handle(wid).describe()).run_id
    await grow_until_continued(client, wid)
    handle = client.get_workflow_handle(wid)
    second = (await handle.describe()).run_id
    await handle.execute_update("approve", DecisionInput(call_id=wire_call, approver="cfo"))
    await handle.result()
    await save("continued_while_parked", wid, first)
    await save("carried_on_after_parked_compaction", wid, second)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=SCENARIOS, help="record one scenario")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = DevServer(db_filename=Path(tmp) / "record.db").start()
        try:
            asyncio.run(record(server.address, args.only))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
