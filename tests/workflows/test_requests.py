"""What a person sees and what a tool learns of the person's answer (time-skipping server)."""

from __future__ import annotations

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
from hitl.wire import RunStatus
from tests.helpers import Ledger, record_effect, serving


@function_tool(needs_approval=True)
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
