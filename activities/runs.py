"""`read_run`: one run of an agent graph reads another (a nested run, or its parent) by query.

Nested runs and their parents never act on what a signal says: a signal only asks to be read,
and the reader asks the other run itself. The addresses come from the server (a parent knows
the id of the child it started; a child knows its parent from `workflow.info().parent`).
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from hitl.wire import (
    ACT_READ_RUN,
    QUERY_REPORT,
    ChildReport,
    FromRoot,
    ReadRunInput,
    ReadRunOutput,
)


@activity.defn(name=ACT_READ_RUN)
async def read_run(inp: ReadRunInput) -> ReadRunOutput:
    """Query `QUERY_REPORT` or `QUERY_MAIL` of another run; nothing when it is gone."""
    handle = activity.client().get_workflow_handle(inp.workflow_id, run_id=inp.run_id)
    try:
        if inp.query == QUERY_REPORT:
            report: ChildReport = await handle.query(inp.query, result_type=ChildReport)
            return ReadRunOutput(report=report)
        mail: FromRoot = await handle.query(inp.query, inp.call_id, result_type=FromRoot)
        return ReadRunOutput(mail=mail)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return ReadRunOutput()
        raise
    except WorkflowQueryFailedError as exc:
        activity.logger.warning("reading %s failed: %s", inp.workflow_id, exc)
        return ReadRunOutput()
