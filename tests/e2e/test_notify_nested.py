"""Notifications of calls inside agent tools (dev server: nested runs are child workflows)."""

from __future__ import annotations

from temporalio.client import Client

from hitl import CallbackNotifier, Runner
from hitl.wire import NotifyInput
from tests.agents import cli_desk
from tests.helpers import Ledger, serving, wait_for


async def test_a_call_inside_an_agent_tool_is_notified_as_the_root_shows_it(
    dev_client: Client, ledger: Ledger
) -> None:
    heard: list[NotifyInput] = []
    client = dev_client
    async with serving(client, cli_desk, notifiers=[CallbackNotifier(heard.append)]) as tq:
        result = await Runner.run(cli_desk, "tides", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        await wait_for(lambda: [n.event for n in heard] == ["waiting"], what="the waiting note")
        assert (heard[0].workflow_id, heard[0].call_id) == (result.workflow_id, item.call_id)
        assert "/" in item.call_id, "a nested call, under its qualified id"
        state = result.to_state()
        state.approve(item, approver="ops")
        done = await Runner.run(cli_desk, state, client=client, task_queue=tq, serve=False)
        await wait_for(lambda: len(heard) == 2, what="the decision note")
    assert done.final_output == "summary: facts about tides"
    assert [(n.event, n.call_id) for n in heard] == [
        ("waiting", item.call_id),
        ("decided", item.call_id),
    ]
