"""`RunState`: a paused run as a portable value, and decisions on it.

A durable run keeps its transcript in Temporal, so a `RunState` is small: the run's identity,
its pending approvals, and the decisions made locally that `Runner.run(agent, state)` sends.
Any process that can reach the Temporal cluster can load it and resume the run. Its pending
calls are `ToolApprovalItem`s (`hitl.interruptions`, importable from here too).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from hitl.agent import Agent, CapturedGraph, capture_graph
from hitl.errors import StateVersionError, UnknownCallError, UserError
from hitl.interruptions import AgentRef as AgentRef
from hitl.interruptions import ToolApprovalItem as ToolApprovalItem
from hitl.interruptions import items_from_pending as items_from_pending
from hitl.starting import context_value
from hitl.wire import (
    DEFAULT_TASK_QUEUE,
    AnswerInput,
    DecisionRequest,
    RunContextData,
    RunItem,
    text_digest,
)

CURRENT_SCHEMA_VERSION = 4
SCHEMA_VERSIONS = {
    1: "Workflow handle, pending approvals (call id, agent, tool, arguments) and local decisions.",
    2: "Pending approvals carry their path in the agent graph and the run that owns them.",
    3: "The run context as the client knew it (JSON value, how it was serialized, whether "
    "resuming sends it to the run).",
    4: "A run started with a client-managed session says how many of its input items came "
    "from it (`session_history`), so whichever process reads its result writes its turn back.",
}

_UNSET: Any = object()
"""No `context_override` given (`None` is a context too, for `from_string_with_context`)."""

CONTEXT_VIA = ("json", "model", "context_serializer", "omitted")
"""How a saved context was serialized: JSON as it was; a pydantic model or dataclass dumped as
JSON; by a `context_serializer`; or not at all (it could not be serialized). All but `json`
need a `context_deserializer` (or a `context_override`) to be an object again."""


class AgentGraphChangedWarning(UserWarning):
    """A `RunState` was loaded with an agent graph that differs from the one it was saved with.

    The run itself is unaffected: it stays pinned to the graph it started with.
    """


class ContextNotRebuiltWarning(UserWarning):
    """A `RunState`'s saved context was loaded as its JSON value (no `context_deserializer`)."""


@dataclass
class RunState:
    """A paused run plus the decisions to send when it resumes.

    Get one from `result.to_state()`, decide with `approve` / `reject`, and resume with
    `await Runner.run(agent, state)`. `to_string()` / `await RunState.from_string(agent, s)`
    move it between processes.
    """

    workflow_id: str
    root_agent: Agent[Any]
    interruptions: list[ToolApprovalItem] = field(default_factory=list)
    task_queue: str = DEFAULT_TASK_QUEUE
    run_id: str | None = None
    decisions: dict[str, DecisionRequest] = field(default_factory=dict)
    answers: dict[str, AnswerInput] = field(default_factory=dict)
    """Answers to the questions tools ask (`answer`), sent on resume."""
    context: Any = None
    """The run context as this client knows it: the one the run was started (or last resumed)
    with, the one the state was loaded with, or a replacement (`context_override`). The run
    keeps its own copy, with what tools changed in it; this one is sent only when
    `context_given`."""
    context_given: bool = False
    """Resuming sends `context` to the run, replacing its own (`context_override`,
    `from_string_with_context`)."""
    context_serializer: Any = None
    session_history: int | None = None
    """A run started with a client-managed session: how many leading items of its input came
    from it (see `RunResult.session_history`)."""
    _loaded: Any = field(default=None, repr=False, compare=False)
    """The context object rebuilt from `_saved` (while `context` is still it, `_saved` is
    what it serializes to)."""
    _saved: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    """The `context` entry this state was loaded with: saved again as it was, and sent as it
    was when resuming sends it (never rebuilt from a name in the payload)."""
    _transcript: tuple[list[dict[str, Any]], list[RunItem]] | None = field(
        default=None, repr=False, compare=False
    )
    """The run's transcript when it paused (`RunResult.to_state()`; `to_string` does not save
    it): resuming asks the run only for the items that follow it (`HeldTranscript`)."""

    def get_interruptions(self) -> list[ToolApprovalItem]:
        """The pending approvals of this state."""
        return list(self.interruptions)

    def _item(self, item: ToolApprovalItem | str) -> ToolApprovalItem:
        call_id = item if isinstance(item, str) else item.call_id
        for it in self.interruptions:
            if it.call_id == call_id:
                return it
        raise UnknownCallError(
            f"call {call_id!r} is not pending in this state "
            f"(pending: {[i.call_id for i in self.interruptions] or 'none'})"
        )

    def _decidable(self, item: ToolApprovalItem | str) -> ToolApprovalItem:
        it = self._item(item)
        if it.kind == "input":
            raise UserError(
                f"call {it.call_id!r} asks a question, not for a decision: use state.answer()"
            )
        return it

    def approve(
        self,
        item: ToolApprovalItem | str,
        always_approve: bool = False,
        *,
        approver: str | None = None,
        reason: str | None = None,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        """Approve a pending call; with `always_approve`, every later call of that tool too.

        `arguments` replace the model's (edit, then approve): the run checks them against the
        tool's schema and evaluates the approval requirement on them again; the model is told
        the call ran with edited arguments. Not with `always_approve`.
        """
        it = self._decidable(item)
        if arguments is not None and always_approve:
            raise UserError("an edited approval decides one call: drop always_approve")
        self.decisions[it.call_id] = DecisionRequest(
            kind="approve",
            call_id=it.call_id,
            always=always_approve,
            approver=approver,
            reason=reason,
            arguments=arguments,
            seen_sha256=text_digest(it.arguments),  # the run refuses it if they changed since
        )

    def answer(
        self,
        item: ToolApprovalItem | str,
        content: dict[str, Any] | None = None,
        *,
        action: Literal["accept", "decline", "cancel"] = "accept",
        approver: str | None = None,
        reason: str | None = None,
    ) -> None:
        """Answer the question a tool asks (an `input` interruption, MCP elicitation).

        `content` fills the form (`item.question.requested_schema`) when accepting; `decline`
        and `cancel` take none. The run checks it; the tool is then asked again.
        """
        it = self._item(item)
        if it.kind != "input":
            raise UserError(f"call {it.call_id!r} asks no question (it waits for a decision)")
        if action == "accept" and content is None:
            raise UserError("accepting needs content for the form (or action='decline')")
        self.answers[it.call_id] = AnswerInput(
            call_id=it.call_id, action=action, content=content, approver=approver, reason=reason
        )

    def reject(
        self,
        item: ToolApprovalItem | str,
        always_reject: bool = False,
        *,
        rejection_message: str | None = None,
        message: str | None = None,
        approver: str | None = None,
        reason: str | None = None,
    ) -> None:
        """Reject a pending call; with `always_reject`, every later call of that tool too.

        `rejection_message` (the OpenAI Agents SDK's keyword; `message` is the same) is what the
        model sees instead of the tool output, for this call; calls a standing rule rejects later
        get the run's `tool_error_formatter`, else the default text.
        """
        if rejection_message is not None and message is not None and rejection_message != message:
            raise TypeError(
                "reject() got two different rejection texts: pass rejection_message= "
                "(or its older name message=), not both"
            )
        message = rejection_message if rejection_message is not None else message
        it = self._decidable(item)
        self.decisions[it.call_id] = DecisionRequest(
            kind="reject",
            call_id=it.call_id,
            always=always_reject,
            message=message,
            approver=approver,
            reason=reason,
            seen_sha256=text_digest(it.arguments),
        )

    # ----------------------------------------------------------------- serialization

    def to_json(
        self,
        *,
        context_serializer: Callable[[Any], Any] | None = None,
        strict_context: bool = False,
    ) -> dict[str, Any]:
        """JSON form, with `$schemaVersion`.

        Args:
            context_serializer: Turns a context that is not JSON by itself into JSON (else the
                state's own, from the run's `RunConfig`). Loading it back then needs a
                `context_deserializer`.
            strict_context: Refuse (`UserError`) a context that is neither JSON already (a
                mapping) nor given a serializer, instead of dumping a pydantic model or
                dataclass as JSON, or leaving out what cannot be serialized (with a warning).
        """
        data = {
            "$schemaVersion": CURRENT_SCHEMA_VERSION,
            "workflow_id": self.workflow_id,
            "run_id": self.run_id,
            "task_queue": self.task_queue,
            "root_agent": self.root_agent.name,
            "graph_fingerprint": capture_graph(self.root_agent).graph.fingerprint,
            "interruptions": [i.to_json() for i in self.interruptions],
            "decisions": [d.model_dump(mode="json") for d in self.decisions.values()],
            "answers": [a.model_dump(mode="json") for a in self.answers.values()],
        }
        if self.session_history is not None:
            data["session_history"] = self.session_history
        entry = self._context_entry(context_serializer or self.context_serializer, strict_context)
        if entry is not None:
            data["context"] = entry
        return data

    def to_string(
        self,
        *,
        context_serializer: Callable[[Any], Any] | None = None,
        strict_context: bool = False,
    ) -> str:
        """JSON text of `to_json()` (same options)."""
        data = self.to_json(context_serializer=context_serializer, strict_context=strict_context)
        return json.dumps(data, indent=2)

    def saved_context(self) -> RunContextData | None:
        """The context to send when resuming: `None` unless `context_given`."""
        if not self.context_given:
            return None
        if self._saved is not None and self.context is self._loaded:
            return RunContextData(value=self._saved["value"], type=self._saved.get("type"))
        value, ctx_type = context_value(self.context, self.context_serializer, strict=True)
        return RunContextData(value=value, type=ctx_type)

    def _context_entry(self, serializer: Any, strict: bool) -> dict[str, Any] | None:
        """The `context` entry of `to_json` (`None`: no context to save)."""
        if self._saved is not None and self.context is self._loaded:
            return {**self._saved, "resume": self.context_given}
        ctx = self.context
        if ctx is None and not self.context_given:
            return None
        via = "json"
        if serializer is not None:
            value, ctx_type = context_value(ctx, serializer)
            via = "context_serializer"
        elif _is_json(ctx):
            value, ctx_type = ctx, None
        elif strict:
            raise UserError(
                f"RunState context of type {type(ctx).__name__} is not JSON by itself: give "
                "context_serializer= (and context_deserializer= when loading), or save without "
                "strict_context=True"
            )
        else:
            value, ctx_type = context_value(ctx)  # warns and drops what it cannot serialize
            via = "model" if ctx_type is not None else "omitted"
        return {
            "value": value,
            "type": ctx_type,
            "serialized_via": via,
            "resume": self.context_given,
        }

    @classmethod
    async def from_json(
        cls,
        initial_agent: Agent[Any],
        data: dict[str, Any],
        *,
        context_override: Any = None,
        context_deserializer: Callable[[Any], Any] | None = None,
        strict_context: bool = False,
    ) -> RunState:
        """Load a state; `initial_agent` is the root agent of the run (rebuilt by this process).

        Args:
            initial_agent: The run's root agent.
            data: `to_json()` output.
            context_override: A context to use instead of the saved one; resuming sends it to
                the run, replacing the run's own (the saved one stays in `data`).
            context_deserializer: Rebuilds the saved context from its JSON value (a function of
                yours, called here; nothing in `data` names code to run).
            strict_context: Refuse (`UserError`) a saved context that cannot be an object
                again without `context_deserializer` (a custom or model context, or one left
                out when it was saved); otherwise its JSON value is used, with a warning.
        """
        override = _UNSET if context_override is None else context_override
        return await cls._load(initial_agent, data, override, context_deserializer, strict_context)

    @classmethod
    async def _load(
        cls,
        initial_agent: Agent[Any],
        data: Any,
        override: Any,
        deserializer: Callable[[Any], Any] | None,
        strict: bool,
    ) -> RunState:
        _check_header(data, initial_agent)
        captured = capture_graph(initial_agent)
        try:
            workflow_id = data["workflow_id"]
            interruptions = [
                ToolApprovalItem.from_json(i, captured.agents, workflow_id)
                for i in data.get("interruptions", [])
            ]
            decisions = [DecisionRequest.model_validate(d) for d in data.get("decisions", [])]
            answers = [AnswerInput.model_validate(a) for a in data.get("answers", [])]
            entry = _context_saved(data.get("context"))
            history = data.get("session_history")
            if history is not None and (type(history) is not int or history < 0):
                raise ValueError(f"session_history must be a count of items, got {history!r}")
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"malformed RunState: {exc}") from exc
        _check_graph(captured, interruptions, data.get("graph_fingerprint"), workflow_id)
        state = cls(
            workflow_id=workflow_id,
            run_id=data.get("run_id"),
            task_queue=data.get("task_queue") or DEFAULT_TASK_QUEUE,
            root_agent=initial_agent,
            interruptions=interruptions,
            decisions={d.call_id: d for d in decisions},
            answers={a.call_id: a for a in answers},
            session_history=history,
        )
        if override is not _UNSET:
            state.context, state.context_given = override, True
        elif entry is not None:
            state.context = state._loaded = _rebuild(entry, deserializer, strict, workflow_id)
            state._saved = {k: v for k, v in entry.items() if k != "resume"}
            state.context_given = bool(entry.get("resume"))
        return state

    @classmethod
    async def from_string(
        cls,
        initial_agent: Agent[Any],
        state_string: str,
        *,
        context_override: Any = None,
        context_deserializer: Callable[[Any], Any] | None = None,
        strict_context: bool = False,
    ) -> RunState:
        """Load a state from `to_string()` output (the options are `from_json`'s)."""
        return await cls.from_json(
            initial_agent,
            _parse(state_string),
            context_override=context_override,
            context_deserializer=context_deserializer,
            strict_context=strict_context,
        )

    @classmethod
    async def from_string_with_context(
        cls,
        initial_agent: Agent[Any],
        state_string: str,
        context: Any,
        *,
        context_strategy: Literal["merge", "replace"] = "merge",
        context_serializer: Any = None,
    ) -> RunState:
        """Load a state and give the run a new context when it resumes.

        The run continues with `context` (serialized like `Runner.run`'s `context=`, or with
        `context_serializer`). `"merge"` (default) keeps the decisions recorded in the
        serialized state; `"replace"` starts from the new context alone and drops them (the
        run's own decision history, kept by the workflow, is never rewritten).
        """
        if context_strategy not in ("merge", "replace"):
            raise UserError("context_strategy must be 'merge' or 'replace'")
        # `context_override` with the SDK's name, except that `None` is a context here too.
        state = await cls._load(initial_agent, _parse(state_string), context, None, False)
        state.context_serializer = context_serializer
        if context_strategy == "replace":
            state.decisions = {}
        return state


def _parse(state_string: str) -> Any:
    try:
        return json.loads(state_string)
    except json.JSONDecodeError as exc:
        raise UserError(f"a RunState string must be JSON: {exc}") from exc


def _is_json(value: Any) -> bool:
    """A context that is JSON as it is (no deserializer needed to get it back)."""
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if not isinstance(value, dict | list):
        return False
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _context_saved(entry: Any) -> dict[str, Any] | None:
    """A saved `context` entry, checked (`ValueError` when malformed)."""
    if entry is None:
        return None
    if not isinstance(entry, dict) or entry.get("serialized_via") not in CONTEXT_VIA:
        raise ValueError("context must be an object with serialized_via in " + str(CONTEXT_VIA))
    if not isinstance(entry.get("type"), str | None):
        raise ValueError("context type must be a string")
    return entry


def _rebuild(
    entry: dict[str, Any],
    deserializer: Callable[[Any], Any] | None,
    strict: bool,
    workflow_id: str,
) -> Any:
    """The context object of a saved entry (see `RunState.from_json`)."""
    via, value = entry["serialized_via"], entry.get("value")
    if via == "omitted":
        problem = "was saved without its context (it could not be serialized)"
    elif deserializer is not None:
        try:
            return deserializer(value)
        except Exception as exc:
            raise UserError(
                f"RunState of run {workflow_id}: context_deserializer failed: {exc}"
            ) from exc
    elif via == "json":
        return value
    else:
        made = "a context_serializer" if via == "context_serializer" else entry.get("type")
        problem = f"has a context serialized from {made}; this is its JSON value"
    if strict:
        raise UserError(
            f"RunState of run {workflow_id} {problem}: pass context_deserializer= (or "
            "context_override=) to load it with strict_context=True"
        )
    warnings.warn(
        f"RunState of run {workflow_id} {problem}; pass context_deserializer= to rebuild it",
        ContextNotRebuiltWarning,
        stacklevel=4,
    )
    return None if via == "omitted" else value


def _check_header(data: Any, initial_agent: Agent[Any]) -> None:
    """A `RunState` this version can read, saved for `initial_agent`."""
    if not isinstance(data, dict):
        raise UserError("a RunState must be a JSON object")
    version = data.get("$schemaVersion")
    if not isinstance(version, int):
        raise UserError("not a RunState: $schemaVersion is missing")
    if version > CURRENT_SCHEMA_VERSION:
        raise StateVersionError(
            f"this RunState has schema version {version}; this version of hitl reads up to "
            f"{CURRENT_SCHEMA_VERSION}. Upgrade hitl to resume it."
        )
    if data.get("root_agent") != initial_agent.name:
        raise UserError(
            f"this RunState belongs to agent {data.get('root_agent')!r}, not {initial_agent.name!r}"
        )


def _check_graph(
    captured: CapturedGraph,
    interruptions: list[ToolApprovalItem],
    saved_fingerprint: Any,
    workflow_id: str,
) -> None:
    """Refuse a state whose pending calls the agent graph no longer has; warn if it changed.

    A run is pinned to the graph it started with, so a changed definition does not change the
    run. But a pending call must still name an agent and a tool of the graph given here, or
    nothing in this process could show or decide it faithfully.
    """
    graph = captured.graph
    root = graph.agents[graph.root].name
    for item in interruptions:
        spec = graph.agents.get(item.agent_id)
        if spec is None:
            raise UserError(
                f"RunState of run {workflow_id}: pending call {item.call_id!r} belongs to agent "
                f"{item.agent_id!r}, which is no longer in the agent graph of {root!r}. Load "
                "it with the agent definition the run was started with."
            )
        live = captured.agents.get(item.agent_id)
        served = live is not None and bool(live.mcp_servers)  # their tools are listed per run
        if spec.tool(item.name) is None and spec.handoff(item.name) is None and not served:
            raise UserError(
                f"RunState of run {workflow_id}: pending call {item.call_id!r} is for tool "
                f"{item.name!r} of agent {item.agent_id!r}, which no longer has it. Load it "
                "with the agent definition the run was started with."
            )
    if isinstance(saved_fingerprint, str) and saved_fingerprint != graph.fingerprint:
        warnings.warn(
            f"the definition of agent {root!r} changed since this RunState of run {workflow_id} "
            f"was saved (graph {saved_fingerprint} -> {graph.fingerprint}); the run stays "
            "pinned to the agent graph it started with, and the change applies to new runs",
            AgentGraphChangedWarning,
            stacklevel=3,
        )
