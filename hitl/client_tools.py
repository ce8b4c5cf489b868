"""Callback tools: a tool whose code runs on the client that started the run.

A file on the user's laptop, a confirmation on their phone: the agent runs on a remote worker,
but some tools can only run where the user is. `@client_tool` declares one. Its calls pass the
same gate as every other call (`needs_approval`, approvers, four eyes), then, instead of
running on the worker, the call waits for the client:

- the run parks the call as *awaiting input* (`kind="input"`, `question.server == "client"`),
  visible in `status`, `hitl show`, the console and the run's stream (`call_asks`);
- `Runner.run` on the client runs the function itself and sends its result with the `answer`
  update; the run checks the result against the tool's output type before it accepts it (a
  result of the wrong type is refused and changes nothing);
- a client that does not answer within `answer_timeout` seconds (closed, crashed, gone for the
  weekend) becomes an error the model reads; the wait holds across worker restarts, deploys and
  continue-as-new, since it is the run's own durable state.

On the worker, the tool's function is never called. Anyone who may send updates to the run may
answer its client calls (as anyone may answer a tool's question); a tool whose decisions must be
signed needs signed answers too (see docs/security.md).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_type_hints

from pydantic import TypeAdapter

from hitl.agent import Agent, capture_graph
from hitl.approval import UserAction
from hitl.context import ToolContext
from hitl.errors import UserError
from hitl.tools import FunctionTool, ToolFunction, function_tool

if TYPE_CHECKING:
    from hitl.result import RunResult
    from hitl.state import RunState, ToolApprovalItem

log = logging.getLogger("hitl.client_tools")

CLIENT = "client"
"""The `server` a client tool's question names (`InputRequest.server`)."""

DEFAULT_ANSWER_TIMEOUT = 3600.0


@dataclass(eq=False)
class ClientTool(FunctionTool):
    """A function tool whose code runs on the client that started the run (`@client_tool`).

    Attributes:
        answer_timeout: Seconds the run waits for the client's result once the call may run;
            then the model reads that the client did not answer. `None` waits forever.
        output_schema: JSON schema the client's result must fit (from the return annotation;
            `{}`: anything JSON).
    """

    answer_timeout: float | None = DEFAULT_ANSWER_TIMEOUT
    output_schema: dict[str, Any] = dataclasses.field(default_factory=dict)

    def question_schema(self) -> dict[str, Any]:
        """The form the client's answer fills: `{"output": <result>}`."""
        schema = dict(self.output_schema)
        defs = schema.pop("$defs", None)
        form: dict[str, Any] = {
            "type": "object",
            "properties": {"output": schema},
            "required": ["output"],
            "additionalProperties": False,
        }
        if defs:
            form["$defs"] = defs
        return form

    async def invoke(
        self, ctx: ToolContext[Any], arguments: str, action: UserAction | None = None
    ) -> Any:
        """On the worker: ask the client (first time), or hand over what it answered."""
        from hitl.mcp import InputRequired  # (worker side only)

        self.parse_arguments(arguments)  # the arguments the client will get are valid
        if not ctx.answers:
            raise InputRequired(
                CLIENT,
                f"{self.name} runs on the client that started the run",
                self.question_schema(),
                0,
                timeout=self.answer_timeout,
            )
        given = ctx.answers[0]
        if given.action != "accept" or not isinstance(given.content, dict):
            why = given.reason or ("no answer in time" if given.action == "cancel" else "declined")
            return f"Error: {self.name} did not run on the client ({why})."
        return given.content.get("output")

    async def run_on_client(self, ctx: ToolContext[Any], arguments: str) -> Any:
        """Run the function here, on the client (what `Runner.run` does for a waiting call)."""
        return await FunctionTool.invoke(self, ctx, arguments, UserAction(primary_confirmed=True))


def client_tool(
    func: ToolFunction | None = None,
    /,
    *,
    answer_timeout: float | None = DEFAULT_ANSWER_TIMEOUT,
    **options: Any,
) -> ClientTool | Callable[[ToolFunction], ClientTool]:
    """Declare a tool whose code runs on the client that started the run.

    Takes `function_tool`'s options (`needs_approval`, `approvers`, ...) and `answer_timeout`.
    The function's return annotation is the type its result must have (checked by the run).
    Use bare (`@client_tool`) or with options (`@client_tool(needs_approval=True)`).
    """
    if options.get("local_activity"):
        raise UserError("a client tool runs on the client: local_activity does not apply")
    if answer_timeout is not None and not answer_timeout > 0:
        raise UserError(f"answer_timeout must be positive seconds or None, not {answer_timeout!r}")

    def build(fn: ToolFunction) -> ClientTool:
        base = function_tool(**options)(fn)
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.init}
        tool = ClientTool(**fields, answer_timeout=answer_timeout, output_schema=_returns(fn))
        for f in dataclasses.fields(base):
            if not f.init:
                setattr(tool, f.name, getattr(base, f.name))
        return tool

    return build(func) if func is not None else build


def _returns(fn: ToolFunction) -> dict[str, Any]:
    """The JSON schema of what `fn` returns (`{}` when it does not say)."""
    hint = get_type_hints(fn).get("return")
    if hint is None or hint is Any:
        return {}
    try:
        return TypeAdapter(hint).json_schema()
    except Exception as exc:
        raise UserError(
            f"client tool {fn.__name__}: its return type has no JSON schema ({exc})"
        ) from None


def client_output(value: Any) -> Any:
    """A client tool's result as the `answer` carries it (JSON: models become dicts)."""
    if value is None:
        return None
    return json.loads(TypeAdapter(Any).dump_json(value))


async def answer_client_calls(
    agent: Agent[Any], result: RunResult, approver: str | None = None
) -> RunState | None:
    """Run, here, the client tools a paused run waits on; the state that answers them.

    `None` when the run waits on none of this agent graph's client tools (it has finished, or
    waits for people). A client tool that raises is answered `decline` with the error, which
    the model reads.
    """
    waiting = [
        (item, tool)
        for item in result.interruptions
        if item.kind == "input"
        and item.question is not None
        and item.question.server == CLIENT
        and (tool := _client_tool(agent, item)) is not None
    ]
    if not waiting:
        return None
    state = result.to_state()
    for item, tool in waiting:
        ctx: ToolContext[Any] = ToolContext(
            context=result.context,
            workflow_id=result.workflow_id,
            agent_name=item.agent.name,
            tool_name=item.tool_name,
            tool_call_id=item.model_call_id or item.call_id,
            tool_arguments=item.arguments,
            idempotency_key=f"{item.owner_workflow_id or result.workflow_id}:{item.call_id}",
        )
        try:
            output = client_output(await tool.run_on_client(ctx, item.arguments))
        except Exception as exc:
            log.warning("client tool %s failed: %r", tool.name, exc)
            state.answer(item, action="decline", approver=approver, reason=f"{exc!r:.500}")
            continue
        state.answer(item, {"output": output}, approver=approver)
    return state


def _client_tool(agent: Agent[Any], item: ToolApprovalItem) -> ClientTool | None:
    """The client tool an interruption names, from this client's own agent graph."""
    try:
        live = capture_graph(agent).agent(item.agent_id)
    except UserError:
        return None
    tool = next((t for t in live.tools if t.name == item.tool_name), None)
    return tool if isinstance(tool, ClientTool) else None
