"""Starting a run, one way for every entry point (`Runner.run`, `run_streamed`, `hitl run`).

A run's workflow id is a business id when the caller gives one (`refund-order-1001`): such an id
names one run for good, and starting it again returns the existing run instead of a second one
(`REJECT_DUPLICATE` once it closed, `USE_EXISTING` while it runs). Decisions get deterministic
update ids, so a retry after a timeout is deduplicated by the server.
"""

from __future__ import annotations

import dataclasses
import getpass
import hashlib
import json
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

from hitl.agent import Agent
from hitl.errors import UserError
from hitl.items import BadInput, normalize_input
from hitl.limits import conversation_problem
from hitl.markdown import md_text
from hitl.refs import callable_ref
from hitl.run_config import RunConfig, RunErrorHandler
from hitl.session import TemporalSession
from hitl.wire import (
    MAX_ID_PREFIX,
    MAX_WORKFLOW_ID,
    WORKFLOW_TYPE,
    DecisionRequest,
    RunContextData,
    RunInput,
    RunOutput,
)

log = logging.getLogger("hitl")


def context_value(
    context: Any,
    serializer: Callable[[Any], Any] | None = None,
    strict: bool = False,
) -> tuple[Any, str | None]:
    """JSON form of the context plus the import reference of its type (to rebuild it).

    A context that cannot be serialized is refused with `strict`, else dropped (user code then
    sees `None`) with a warning.
    """
    if context is None:
        return None, None
    if serializer is not None:
        value = serializer(context)
        try:
            json.dumps(value)
        except TypeError as exc:
            raise UserError(f"context_serializer returned non-JSON data: {exc}") from exc
        return value, None
    if isinstance(context, str | int | float | bool):
        return context, None
    problem: str
    if isinstance(context, dict | list):
        try:
            json.dumps(context)
            return context, None
        except TypeError as exc:
            problem = f"the run context must be JSON-serializable: {exc}"
    elif isinstance(context, BaseModel) or (
        dataclasses.is_dataclass(context) and not isinstance(context, type)
    ):
        from pydantic import TypeAdapter

        cls = type(context)
        value = TypeAdapter(cls).dump_python(context, mode="json")
        return value, callable_ref(cls, what="the run context's type")
    else:
        problem = (
            "the run context must be JSON-serializable (a dict, pydantic model or dataclass) "
            f"or come with RunConfig(context_serializer=...), got {type(context).__name__}"
        )
    if strict:
        raise UserError(problem)
    log.warning("%s; the run continues without a context (strict_context=False)", problem)
    return None, None


def new_workflow_id(agent_name: str) -> str:
    """A fresh workflow id for a run of `agent_name` (`run-<slug>-<random>`)."""
    slug = re.sub(r"[^a-z0-9]+", "-", agent_name.lower()).strip("-")[:60].strip("-") or "agent"
    return f"run-{slug}-{uuid.uuid4().hex[:12]}"


def check_id(value: str, what: str) -> None:
    """Refuse an id the cluster could not store once nested runs extend it."""
    if not value or len(value) > MAX_ID_PREFIX:
        raise UserError(
            f"{what} must be 1 to {MAX_ID_PREFIX} characters (got {len(value)}): nested runs "
            f"extend it, and Temporal on PostgreSQL stores at most {MAX_WORKFLOW_ID}"
        )


def summary(agent_name: str, user_input: str | list[dict[str, Any]]) -> str:
    """The run's static summary in the Temporal UI: `<agent>: <input, shortened>`."""
    text = user_input if isinstance(user_input, str) else f"{len(user_input)} input items"
    text = " ".join(text.split())
    return md_text(f"{agent_name}: {text[:100]}{'...' if len(text) > 100 else ''}")


def _after_history(
    user_input: str | list[dict[str, Any]],
    history: list[dict[str, Any]] | None,
    conversation: str | TemporalSession | None,
) -> str | list[dict[str, Any]]:
    """`user_input` after a client-managed session's items (a run takes one session)."""
    if history is None:
        return user_input
    if conversation is not None:
        raise UserError("a run takes one session")
    try:
        return [*history, *normalize_input(user_input)]
    except BadInput as exc:
        raise UserError(str(exc)) from None


def _config(
    run_config: RunConfig | None,
    auto_previous_response_id: bool,
    error_handlers: Mapping[str, RunErrorHandler] | None,
) -> RunConfig:
    """A copy of `run_config` with the call's own options on it (the caller's stays as it was)."""
    cfg = dataclasses.replace(run_config) if run_config else RunConfig()
    if auto_previous_response_id:
        cfg.auto_previous_response_id = True
    if error_handlers:
        cfg.error_handlers = {**cfg.error_handlers, **dict(error_handlers)}
    return cfg


@dataclasses.dataclass
class StartRequest:
    """A new run, normalized: its input for the workflow and how to start it."""

    workflow_id: str
    business_id: bool
    run_input: RunInput
    summary: str

    @classmethod
    def build(
        cls,
        agent: Agent[Any] | str,
        user_input: Any,
        *,
        context: Any = None,
        max_turns: int | None = None,
        run_config: RunConfig | None = None,
        error_handlers: Mapping[str, RunErrorHandler] | None = None,
        workflow_id: str | None = None,
        conversation: str | TemporalSession | None = None,
        history: list[dict[str, Any]] | None = None,
        previous_response_id: str | None = None,
        auto_previous_response_id: bool = False,
        conversation_id: str | None = None,
    ) -> StartRequest:
        """Check and normalize what a caller gave (`UserError` says what is wrong).

        `history`: the items of a client-managed session, read by the caller; the run starts
        from them followed by `user_input` (the summary names `user_input` alone).
        `previous_response_id`, `auto_previous_response_id`, `conversation_id`: the provider
        keeps the conversation (see `Runner.run`).
        """
        if not isinstance(user_input, str | list):
            raise UserError("input must be a string, a list of input items, or a RunState")
        run_input = _after_history(user_input, history, conversation)
        problem = conversation_problem(
            previous_response_id,
            conversation_id,
            conversation if conversation is not None else history,
            auto_previous_response_id,
        )
        if problem is not None:
            raise UserError(problem)
        cfg = _config(run_config, auto_previous_response_id, error_handlers)
        spec = cfg.spec()
        value, ctx_type = context_value(context, cfg.context_serializer, cfg.strict_context)
        spec.context_type = ctx_type
        if isinstance(conversation, TemporalSession):
            conversation = conversation.session_id
        if conversation is not None:
            check_id(conversation, "session id")
        if workflow_id is not None:
            check_id(workflow_id, "workflow_id")
        name = agent if isinstance(agent, str) else agent.name
        return cls(
            workflow_id=workflow_id or new_workflow_id(name),
            business_id=workflow_id is not None,
            run_input=RunInput(
                agent=name,
                input=run_input,
                context=value,
                max_turns=max_turns,
                run_config=spec,
                session=conversation,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
            ),
            summary=summary(name, user_input),
        )

    def options(self, task_queue: str) -> dict[str, Any]:
        """How to start it: the same for every entry point."""
        return {
            "id": self.workflow_id,
            "task_queue": task_queue,
            "result_type": RunOutput,
            "id_conflict_policy": WorkflowIDConflictPolicy.USE_EXISTING,
            # A business id names one run for good: never start it twice.
            "id_reuse_policy": (
                WorkflowIDReusePolicy.REJECT_DUPLICATE
                if self.business_id
                else WorkflowIDReusePolicy.ALLOW_DUPLICATE
            ),
            "static_summary": self.summary,
        }

    def operation(self, task_queue: str) -> WithStartWorkflowOperation[Any, Any]:
        """The start as an update-with-start operation (`Runner.run`)."""
        return WithStartWorkflowOperation(WORKFLOW_TYPE, self.run_input, **self.options(task_queue))

    async def start(self, client: Client, task_queue: str) -> WorkflowHandle[Any, RunOutput]:
        """Start it (or attach to the run that holds its id while it runs).

        Raises:
            WorkflowAlreadyStartedError: the id is a business id whose run has closed.
        """
        handle: WorkflowHandle[Any, RunOutput] = await client.start_workflow(
            WORKFLOW_TYPE, self.run_input, **self.options(task_queue)
        )
        return handle


def decision_update_id(
    workflow_id: str,
    update: str,
    decisions: list[DecisionRequest],
    context: RunContextData | None = None,
) -> str:
    """The update id of a decision: the same for the same decision, different otherwise.

    A retry after a timeout (or a re-run command) is deduplicated by the server and reports the
    real outcome; a decision that differs in any field gets its own id and reaches the
    validator, which refuses a call decided differently (`AlreadyDecided`). The update's name is
    part of it: the server answers a repeated id with the first update's result, whatever name
    the repeat used. An explicit tuple, not `model_dump()`: a field added to `DecisionRequest`
    later must not change the id between client versions.
    """
    canonical = json.dumps(
        [
            update,
            [
                [d.call_id, d.kind, d.approver, d.always, d.message, d.reason]
                + ([d.arguments] if d.arguments is not None else [])
                for d in sorted(decisions, key=lambda d: d.call_id)
            ],
            context.model_dump(mode="json") if context else None,
        ],
        sort_keys=True,
    )
    digest = hashlib.sha256(f"{workflow_id}|{canonical}".encode()).hexdigest()[:24]
    return f"{update}-{digest}"


def default_approver() -> str:
    """Who decides when a decision names nobody: the OS user."""
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"
