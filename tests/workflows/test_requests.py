"""What a person sees and what a tool learns of the person's answer (time-skipping server)."""

from __future__ import annotations

from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from hitl import (
    Agent,
    ModelReply,
    ModelRequest,
    Runner,
    ScriptedModel,
    ToolContext,
    UserAction,
    function_tool,
)
from hitl.items import REJECTION_MESSAGE
from hitl.wire import RunOutput, RunStatus
from tests.helpers import Ledger, record_effect, serving


@function_tool(needs_approval=True, called_on_rejection=True)
def export_rows(ctx: ToolContext[object], table: str, limit: int, action: UserAction) -> str:
    """Export rows of a table to a CSV file.

    The export leaves the building, so a person confirms it.

    Args:
        table: The table.
        limit: At most this many rows.
    """
    flags = f"primary={action.primary_confirmed} secondary={action.secondary_confirmed}"
    if not action.primary_confirmed:
        return f"not exported ({flags})"
    record_effect(ctx, "export_rows")
    return f"exported {limit} rows of {table} ({flags})"


def export_twice(req: ModelRequest) -> ModelReply:
    done = req.results_for("export_rows")
    if len(done) < 2:
        return ModelReply.call("export_rows", {"table": f"t{len(done)}", "limit": 5})
    return ModelReply.say(" | ".join(r.output or "" for r in done))


exporter = Agent(
    name="Exporter", tools=[export_rows], model=ScriptedModel(export_twice, "tests.requests")
)


async def test_default_request_and_the_user_action_the_tool_receives(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    client = ts_env.client
    async with serving(client, exporter) as tq:
        result = await Runner.run(exporter, "export", client=client, task_queue=tq, serve=False)
        [item] = result.interruptions
        # A tool without an approval_request gets one: who, what, and the arguments.
        assert item.request is not None
        assert item.request.title == "Exporter wants to run export_rows"
        assert item.request.message == (
            "Export rows of a table to a CSV file.\n\n"
            'Arguments:\n{\n  "table": "t0",\n  "limit": 5\n}'
        )
        assert (item.request.primary_label, item.request.secondary_label) == ("Approve", "Reject")
        status = await client.get_workflow_handle(result.workflow_id).query(
            "status", result_type=RunStatus
        )
        assert status.pending[0].request == item.request, "stored with the pending approval"
        assert '"action"' not in item.arguments, "the person's action is never the model's"

        state = result.to_state()
        state.approve(item)
        result = await Runner.run(exporter, state, client=client, task_queue=tq, serve=False)
        state = result.to_state()
        state.reject(result.interruptions[0])  # the secondary button, no message
        result = await Runner.run(exporter, state, client=client, task_queue=tq, serve=False)
    assert result.final_output == (
        "exported 5 rows of t0 (primary=True secondary=False)"
        " | not exported (primary=False secondary=True)"
    )
    assert ledger.count("export_rows") == 1


@function_tool(needs_approval=True, approval_timeout=3600)
def send_invoice(ctx: ToolContext[object], customer: str, action: UserAction) -> str:
    """Send an invoice.

    Args:
        customer: Who gets it.
    """
    record_effect(ctx, f"invoked primary={action.primary_confirmed}")
    return f"sent to {customer}" if action.primary_confirmed else "not sent"


def invoice_twice(req: ModelRequest) -> ModelReply:
    done = req.results_for("send_invoice")
    if len(done) < 2:
        return ModelReply.call("send_invoice", {"customer": f"c{len(done)}"})
    return ModelReply.say(" | ".join(r.output or "" for r in done))


invoicer = Agent(
    name="Invoicer", tools=[send_invoice], model=ScriptedModel(invoice_twice, "tests.invoices")
)


async def test_a_rejected_or_expired_call_runs_no_tool_code(
    ts_env: WorkflowEnvironment, ledger: Ledger
) -> None:
    """A tool that takes the person's action is not called when its call is rejected or expires
    unless it declares `called_on_rejection`: the model gets the default rejection text."""
    client = ts_env.client
    async with serving(client, invoicer) as tq:
        result = await Runner.run(invoicer, "bill", client=client, task_queue=tq, serve=False)
        state = result.to_state()
        state.reject(result.interruptions[0])
        result = await Runner.run(invoicer, state, client=client, task_queue=tq, serve=False)
        assert result.interruptions, "the second call waits"
        handle = client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        await ts_env.sleep(timedelta(hours=2))  # past its one-hour deadline
        out = await handle.result()
    assert ledger.count() == 0, "the tool body never ran"
    assert out.final_output.startswith(REJECTION_MESSAGE)
    assert "expired" in out.final_output.split(" | ")[1]
