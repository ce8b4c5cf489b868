"""The `call_model` activity: one model turn, validated before the workflow acts on it."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

from pydantic import TypeAdapter, ValidationError
from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.exceptions import ApplicationError

from hitl._user_code import ReturnTypeError, call_user
from hitl.activities.context import rebuild_context, user_failure
from hitl.activities.heartbeat import heartbeat_timeout, heartbeating
from hitl.activities.tools import ToolActivities
from hitl.agent import Agent, output_is_wrapped
from hitl.context import RunContextWrapper
from hitl.errors import PREVIOUS_RESPONSE_NOT_FOUND, ConversationLostError, UserError
from hitl.hosted_mcp import checked_mcp_approval, with_hosted_secrets
from hitl.items import (
    BUILTIN_CALLS,
    MCP_APPROVAL_REQUEST,
    OVERSIZED_KEY,
    PROBLEM_KEY,
    TOOL_KEY,
    message_text,
    nesting_depth,
    parse_model_output,
    payload_field,
)
from hitl.limits import MAX_ARGUMENT_DEPTH, MAX_MODEL_ITEM_DEPTH, MAX_MODEL_OUTPUT_BYTES
from hitl.model import ModelRequest, ScriptedModel
from hitl.policy.limits import LimitLedger
from hitl.refs import Allowed
from hitl.registry import AgentRegistry
from hitl.wire import (
    ACT_CALL_MODEL,
    AGENT_NOT_SERVED,
    EVENTS_TOPIC,
    QUERY_TRANSCRIPT,
    CallModelInput,
    CallPlan,
    InputFilterRecord,
    ModelResponse,
    PlanCall,
    PlanRequest,
    PlanToolsInput,
    RunEvent,
    TranscriptPage,
    TranscriptQuery,
    TranscriptRef,
    Usage,
    agent_definition,
    definition_digest,
)


class ModelActivities:
    """Model calls for the agents in `registry` (instructions and output types live there)."""

    def __init__(
        self, registry: AgentRegistry, openai: Any = None, ledger: LimitLedger | None = None
    ) -> None:
        self.registry = registry
        self.openai = openai
        self.planner = ToolActivities(registry, ledger)

    async def aclose(self) -> None:
        """Release the provider's clients (the worker calls this once it has stopped)."""
        if self.openai is not None and hasattr(self.openai, "aclose"):
            await self.openai.aclose()

    @activity.defn(name=ACT_CALL_MODEL)
    async def call_model(self, inp: CallModelInput) -> ModelResponse:
        """Ask the agent's model for its next step and validate the answer.

        A regular activity heartbeats while it waits (`MODEL_HEARTBEAT`): a call lost with its
        worker is asked again in seconds, not when its start-to-close timeout ends.
        """
        async with heartbeating(heartbeat_timeout()):
            return await self._call_model(inp)

    async def _call_model(self, inp: CallModelInput) -> ModelResponse:
        try:
            inp = self._definition(inp)
            agent = self.registry.agent(inp.root_agent, inp.agent_id)
            inp = with_hosted_secrets(inp, agent)
            context = rebuild_context(inp.context, self.registry.allowed)
            instructions = await self._instructions(inp, agent, context)
        except UserError as exc:
            raise user_failure(exc) from None
        transcript = await _model_input(inp)
        filtered: InputFilterRecord | None = None
        if inp.input_filter:
            before, given = len(transcript), instructions
            instructions, transcript = await _apply_input_filter(
                self.registry.allowed, inp.input_filter, agent, context, instructions, transcript
            )
            # Recorded with the response (the filter's result is not otherwise in history).
            filtered = InputFilterRecord(
                items_before=before,
                items=len(transcript),
                instructions_changed=instructions != given,
                digest=input_digest(transcript, instructions),
            )
        output, usage, response_id, restarted = await self._ask(
            inp, instructions, transcript, context
        )
        output = _cap_output(
            output, inp.max_argument_bytes, _builtin_names(inp), _hosted_labels(inp)
        )
        response = ModelResponse(
            output=output,
            usage=usage,
            response_id=response_id,
            input_filter=filtered,
            chain_restarted=restarted,
        )
        if inp.plan is not None:
            response.plans = await self._plan(inp, inp.plan, output)
        if not parse_model_output(output).calls:
            messages = [i for i in output if i.get("type") == "message"]
            if messages:
                response.final_output = _validate_output(agent, message_text(messages[-1]))
                response.has_final_output = True
        return response

    def _definition(self, inp: CallModelInput) -> CallModelInput:
        """The input with the agent's definition (from the registry: see `definition`)."""
        if inp.definition is None:
            if inp.model is None:
                raise ApplicationError(
                    "call_model input without a model or a definition",
                    type="UserError",
                    non_retryable=True,
                )
            return inp
        try:
            captured = self.registry.resolve(inp.root_agent)
        except UserError:
            captured = None
        spec = captured.graph.agents.get(inp.agent_id) if captured is not None else None
        if spec is None or definition_digest(spec) != inp.definition:
            raise ApplicationError(
                f"this worker does not serve the definition of agent {inp.agent_id!r} the run "
                "pinned (a deploy changed it): the run sends it",
                type=AGENT_NOT_SERVED,
                non_retryable=True,
            )
        return inp.model_copy(update=agent_definition(spec))

    async def _ask(
        self,
        inp: CallModelInput,
        instructions: str | None,
        transcript: list[dict[str, Any]],
        context: Any,
    ) -> tuple[list[dict[str, Any]], Usage, str | None, bool]:
        """The model's answer: a scripted model's reply, or a provider's (OpenAI) response.

        The last element says whether the provider had lost the previous response, so the
        whole transcript was sent instead (a new chain).
        """
        if inp.model_spec.provider != "scripted":
            if self.openai is None:
                from hitl.activities.openai_model import OpenAIProvider

                self.openai = OpenAIProvider()
            return await self._openai(inp, instructions, transcript)
        try:
            scripted = ScriptedModel.registered(inp.model_spec.name)
        except UserError as exc:
            raise user_failure(exc) from None
        request = ModelRequest(
            agent_name=inp.agent_name,
            instructions=instructions,
            input=transcript,
            tools=inp.tools,
            output_schema=inp.output_schema,
            turn=inp.turn,
            context=context,
        )
        return await scripted.respond(request), Usage(requests=1), None, False

    async def _plan(
        self, inp: CallModelInput, req: PlanRequest, output: list[dict[str, Any]]
    ) -> list[CallPlan] | None:
        """Plan the calls to tools that may need a person, as `plan_tools` would.

        `None` when there is nothing to plan, or when planning here failed in any way: the run
        then plans with `plan_tools`, whose retries and failures are the ones it always had.
        """
        wanted = set(req.tools)
        calls = [
            PlanCall(call_id=c.call_id, tool_name=c.name, arguments=c.arguments)
            for c in parse_model_output(output).calls
            if c.name in wanted
            and c.oversized is None
            and c.problem is None
            # (a hosted server's request is planned once the run has checked its id is new)
            and c.call_type != "mcp_approval_request"
        ]
        if not calls or len({c.call_id for c in calls}) != len(calls):
            return None
        try:
            out = await self.planner.plan(
                PlanToolsInput(
                    root_agent=inp.root_agent,
                    agent_id=inp.agent_id,
                    calls=calls,
                    context=inp.context,
                    workflow_id=activity.info().workflow_id or "",
                    run_approver=req.run_approver,
                    skip_policy=req.skip_policy,
                    pre_approval_guardrails=req.pre_approval_guardrails,
                    policy=req.policy,
                    categories=req.categories,
                )
            )
        except Exception as exc:  # the run plans again with `plan_tools`, which reports it
            activity.logger.warning("planning with the model call failed: %r", exc)
            return None
        return out.plans

    async def _openai(
        self, inp: CallModelInput, instructions: str | None, transcript: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], Usage, str | None, bool]:
        """One call of an OpenAI model; continuing the provider's state, only what is new.

        With `previous_response_id` or `conversation_id`, the provider holds the previous
        response's (or the conversation's) input and output, so the items the model produced
        are not sent again (only tool outputs and new messages are). When it no longer has the
        previous response, the call is made again with the whole transcript if that is the
        whole conversation (`resend_when_lost`); else it fails as `ConversationLost`.
        """
        if not inp.previous_response_id and not inp.conversation_id:
            return (*await self._respond(inp, instructions, transcript), False)
        try:
            new = [item for item in transcript if not _from_model(item)]
            return (*await self._respond(inp, instructions, new), False)
        except ApplicationError as exc:
            if exc.type != PREVIOUS_RESPONSE_NOT_FOUND:
                raise
            if not inp.resend_when_lost:
                raise ApplicationError(
                    f"{exc.message.rstrip('.')}; the run continues a conversation that "
                    "began before it (previous_response_id), so it cannot send the "
                    "conversation again: the provider keeps responses for a limited time "
                    "(30 days at OpenAI). Start a new run with the earlier turns as input "
                    "(result.to_input_list() of each), or with a session",
                    type=ConversationLostError.type_name,
                    non_retryable=True,
                ) from None
        whole = inp.transcript
        if whole is None:
            assert inp.transcript_ref is not None
            whole = await _fetch_transcript(inp.transcript_ref.model_copy(update={"start": 0}))
        alone = inp.model_copy(update={"previous_response_id": None, "since": 0})
        activity.logger.warning(
            "the provider no longer has response %r: sending the whole transcript (%d items), "
            "a new response chain",
            inp.previous_response_id,
            len(whole),
        )
        return (*await self._respond(alone, instructions, whole), True)

    async def _respond(
        self, inp: CallModelInput, instructions: str | None, transcript: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], Usage, str | None]:
        if inp.stream:
            return await self._respond_streaming(inp, instructions, transcript)
        result: tuple[list[dict[str, Any]], Usage, str | None] = await self.openai.respond(
            inp, instructions, transcript
        )
        return result

    async def _respond_streaming(
        self, inp: CallModelInput, instructions: str | None, transcript: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], Usage, str | None]:
        """Stream the model's answer, publishing text deltas to the run's event stream."""
        attempt = activity.info().attempt
        publisher = WorkflowStreamClient.from_within_activity(
            batch_interval=timedelta(milliseconds=150)
        )
        topic = publisher.topic(EVENTS_TOPIC, type=RunEvent)

        def on_delta(text: str) -> None:
            # A retried call streams again; `attempt` lets a UI drop the earlier partial text.
            topic.publish(
                RunEvent(
                    type="model_text_delta",
                    turn=inp.turn,
                    agent=inp.agent_name,
                    text=text,
                    data={"attempt": attempt},
                )
            )

        async with publisher:
            result: tuple[list[dict[str, Any]], Usage, str | None] = await self.openai.respond(
                inp, instructions, transcript, on_delta
            )
        return result

    async def _instructions(
        self, inp: CallModelInput, agent: Agent[Any], context: Any
    ) -> str | None:
        if not inp.dynamic_instructions:
            return inp.instructions
        fn = agent.instructions
        if not callable(fn):
            return inp.instructions
        ctx = RunContextWrapper(context=context, agent_name=agent.name)
        return str(await call_user(fn, ctx, agent, what=f"the instructions of {agent.name!r}"))


async def _model_input(inp: CallModelInput) -> list[dict[str, Any]]:
    """The transcript the model is sent: inline, or read from the run when passed by reference.

    With `previous_response_id` (or `conversation_id`), the provider holds what came before
    `since`: only the rest.
    """
    if inp.transcript is None:
        if inp.transcript_ref is None:
            raise ApplicationError(
                "call_model needs a transcript or a transcript_ref",
                type="UserError",
                non_retryable=True,
            )
        return await _fetch_transcript(inp.transcript_ref)
    if inp.previous_response_id or inp.conversation_id:
        return inp.transcript[inp.since :]  # (inline: the whole transcript is given)
    return inp.transcript


def _depth(value: Any, limit: int) -> int:
    """How deeply `value` nests lists and dicts, counted without recursion up to `limit` + 1."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth > limit:
                return depth
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _builtin_names(inp: CallModelInput) -> dict[str, str]:
    """The agent's built-in tools by call item type (`shell_call` -> the `ShellTool`'s name)."""
    return {f"{t.builtin}_call": t.name for t in inp.tools if t.builtin is not None}


def _hosted_labels(inp: CallModelInput) -> dict[str, str]:
    """The agent's hosted MCP tools by server label (what an `mcp_approval_request` names)."""
    return {
        str((t.builtin_config or {}).get("server_label")): t.name
        for t in inp.tools
        if t.builtin == "hosted_mcp"
    }


def _cap_output(
    output: list[dict[str, Any]],
    max_argument_bytes: int,
    builtins: dict[str, str] | None = None,
    hosted: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Make the model's output safe to record and to read back in the workflow.

    Tool arguments become JSON text; arguments that are too large, nested too deeply or not
    writable as JSON are dropped and marked, so the run answers the model with the problem
    (and asks no one). A built-in tool's call (`shell_call`, `apply_patch_call`) is marked
    with its tool's name (`builtins`), and its payload bounded the same way. Other items
    nested deeper than `MAX_MODEL_ITEM_DEPTH` are dropped: the workflow's decoder would fail
    on them (every workflow task, forever). A huge output fails the call as
    `ModelBehaviorError`.
    """
    capped = []
    for item in output:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "function_call":
            item = _checked_call(item, max_argument_bytes)
        elif isinstance(kind, str) and kind in BUILTIN_CALLS:
            item = _checked_builtin(item, kind, max_argument_bytes, builtins or {})
        elif kind == MCP_APPROVAL_REQUEST:
            item = checked_mcp_approval(item, max_argument_bytes, hosted or {})
        elif _depth(item, MAX_MODEL_ITEM_DEPTH) > MAX_MODEL_ITEM_DEPTH:
            activity.logger.warning("dropped a model output item nested too deeply")
            continue
        capped.append(_clean(item))
    total = len(json.dumps(capped).encode("utf-8"))
    if total > MAX_MODEL_OUTPUT_BYTES:
        raise ApplicationError(
            f"the model's output is too large to record ({total} bytes)",
            type="ModelBehaviorError",
            non_retryable=True,
        )
    return capped


def _clean(value: Any) -> Any:
    """`value` with every lone surrogate replaced (UTF-8 cannot carry them into history)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "replace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _checked_call(item: dict[str, Any], max_argument_bytes: int) -> dict[str, Any]:
    """A function call item with its arguments as bounded JSON text, or dropped and marked."""
    shape = {k: v for k, v in item.items() if k != "arguments"}
    if _depth(shape, MAX_MODEL_ITEM_DEPTH) > MAX_MODEL_ITEM_DEPTH:
        shape = {k: v for k, v in shape.items() if not isinstance(v, dict | list)}
    args = item.get("arguments", "")
    if not isinstance(args, str):
        if _depth(args, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH:
            return {**shape, "arguments": "", PROBLEM_KEY: "nested too deeply"}
        try:
            args = json.dumps(args, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            return {**shape, "arguments": "", PROBLEM_KEY: "not writable as JSON"}
    size = len(args.encode("utf-8", "surrogatepass"))
    if size > max_argument_bytes:
        return {**shape, "arguments": "", OVERSIZED_KEY: size}
    depth = nesting_depth(args)
    if depth > MAX_ARGUMENT_DEPTH:
        problem = f"nested {depth} levels deep (the limit is {MAX_ARGUMENT_DEPTH})"
        return {**shape, "arguments": "", PROBLEM_KEY: problem}
    return {**shape, "arguments": args}


_PLACEHOLDERS: dict[str, dict[str, Any]] = {
    "shell_call": {"commands": []},
    "apply_patch_call": {"type": "update_file", "path": "", "diff": ""},
}
"""What a built-in call's dropped payload is replaced with (the item stays well-formed)."""


def _checked_builtin(
    item: dict[str, Any], kind: str, max_argument_bytes: int, builtins: dict[str, str]
) -> dict[str, Any]:
    """A `shell_call` / `apply_patch_call` naming its tool, its payload bounded as arguments."""
    field, default = payload_field(kind, item), BUILTIN_CALLS[kind][1]
    placeholder = _PLACEHOLDERS[kind] if field != "operations" else [_PLACEHOLDERS[kind]]
    out = {k: v for k, v in item.items() if k not in (OVERSIZED_KEY, PROBLEM_KEY, TOOL_KEY)}
    if _depth(out, MAX_MODEL_ITEM_DEPTH) > MAX_MODEL_ITEM_DEPTH:
        out = {k: v for k, v in out.items() if k == field or not isinstance(v, dict | list)}
    out[TOOL_KEY] = builtins.get(kind, default)
    payload = item.get(field)
    if _depth(payload, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH:
        return {**out, field: placeholder, PROBLEM_KEY: "nested too deeply"}
    try:
        size = len(json.dumps(payload, allow_nan=False).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError, RecursionError):
        return {**out, field: placeholder, PROBLEM_KEY: "not writable as JSON"}
    if size > max_argument_bytes:
        return {**out, field: placeholder, OVERSIZED_KEY: size}
    return out


async def _apply_input_filter(
    allowed: Allowed,
    ref: str,
    agent: Agent[Any],
    context: Any,
    instructions: str | None,
    transcript: list[dict[str, Any]],
) -> tuple[str | None, list[dict[str, Any]]]:
    """Run the run's `call_model_input_filter` on what the model is about to receive."""
    from hitl.run_config import CallModelData, ModelInputData

    try:
        fn = allowed.get_callable(ref, what="the run's call_model_input_filter")
    except UserError as exc:
        raise user_failure(exc) from None
    data = CallModelData(
        model_data=ModelInputData(input=list(transcript), instructions=instructions),
        agent=agent,
        context=context,
    )
    try:
        result = await call_user(fn, data, expect=ModelInputData, what="call_model_input_filter")
    except ReturnTypeError as exc:
        raise user_failure(exc) from None
    return result.instructions, list(result.input)


def input_digest(items: list[dict[str, Any]], instructions: str | None) -> str:
    """`sha256:<hex>` of a model call's input items and instructions (canonical JSON)."""
    canonical = json.dumps(
        {"input": items, "instructions": instructions},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


async def _fetch_transcript(ref: TranscriptRef) -> list[dict[str, Any]]:
    handle = activity.client().get_workflow_handle(ref.workflow_id, run_id=ref.run_id)
    page: TranscriptPage = await handle.query(
        QUERY_TRANSCRIPT,
        TranscriptQuery(start=ref.start, end=ref.end),
        result_type=TranscriptPage,
    )
    if len(page.items) != ref.end - ref.start:
        raise ApplicationError(
            f"transcript has {len(page.items)} items from {ref.start}, expected "
            f"{ref.end - ref.start}",
            non_retryable=False,
        )
    return page.items


def _from_model(item: dict[str, Any]) -> bool:
    """Whether a transcript item is the model's own output (the provider has it already)."""
    kind = item.get("type")
    if kind in (
        "function_call_output",
        "shell_call_output",
        "apply_patch_call_output",
        "mcp_approval_response",
    ):
        return False
    if kind in (None, "message"):
        return item.get("role") == "assistant"
    return True  # function_call, reasoning and the other output items


def _validate_output(agent: Agent[Any], text: str) -> Any:
    """Validate a final answer against the agent's `output_type` (typed error when it fails)."""
    if agent.output_type is None or agent.output_type is str:
        return text
    adapter: TypeAdapter[Any] = TypeAdapter(agent.output_type)
    try:
        raw = json.loads(text)
        if output_is_wrapped(agent.output_type):
            if not isinstance(raw, dict) or "response" not in raw:
                raise ValueError('expected an object with a "response" field')
            raw = raw["response"]
        value = adapter.validate_python(raw)
    except (json.JSONDecodeError, ValidationError, ValueError) as exc:
        raise ApplicationError(
            f"final output of {agent.name!r} does not validate as "
            f"{getattr(agent.output_type, '__name__', agent.output_type)}: {exc}",
            type="ModelBehaviorError",
            non_retryable=True,
        ) from None
    return adapter.dump_python(value, mode="json")
