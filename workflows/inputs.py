"""Reading what callers send: any number of payloads, any encoding, any size, any JSON.

Every handler of our workflows takes `*args` and receives raw payloads (see `hitl.converter`):
the SDK would otherwise fail the workflow task on a wrong number of arguments (a jammed run) or
drop a signal it cannot decode without a trace. Here each payload is checked in order (arity,
encoding, size, then the schema, strictly: `"always": "yes"` is not a boolean) and refused with
a typed, one-line reason that never echoes the payload itself.

Pure and deterministic: used by validators, signal handlers and the run's first task.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from hitl.limits import (
    MAX_AGENT_NAME_CHARS,
    MAX_CONTEXT_BYTES,
    MAX_SIGNAL_BYTES,
    conversation_problem,
    run_config_problems,
)
from hitl.markers import UNDECRYPTABLE, UNRETRIEVABLE
from hitl.wire import REFUSAL_MARK, CarriedState, RunContextData, RunInput, WaitInput

M = TypeVar("M", bound=BaseModel)

JSON = b"json/plain"
NULL = b"binary/null"


def refusal(type_name: str, message: str) -> ApplicationError:
    """A refusal as the caller sees it (short, operator-worded, non-retryable)."""
    err = ApplicationError(message, type=type_name, non_retryable=True)
    setattr(err, REFUSAL_MARK, True)  # one plain line for the caller (`HitlFailureConverter`)
    return err


def problems_text(exc: ValidationError) -> str:
    """A validation error in one line: `field: problem; ...` (never the offending value)."""
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "payload"
        msg = str(err["msg"]).splitlines()[0]
        if err["type"] == "json_invalid":
            ctx = err.get("ctx") or {}
            msg = f"not valid JSON ({str(ctx.get('error', 'parse error')).splitlines()[0]})"
        parts.append(f"{where}: {msg}")
    more = len(exc.errors()) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def read_one(
    args: tuple[Any, ...],
    model: type[M],
    *,
    what: str,
    example: str,
    max_bytes: int,
    error_type: str = "InvalidDecision",
    optional: bool = False,
) -> M:
    """The one payload of a message, validated as `model`.

    Args:
        args: The handler's arguments (raw payloads; a model instance passes through, so code
            in the same process may call handlers directly).
        model: What the payload must be.
        what: How the caller calls it (`"an approve decision"`), for messages.
        example: A correct payload, shown in every refusal.
        max_bytes: Largest encoded payload accepted.
        error_type: The refusal's type.
        optional: No payload at all (or JSON `null`) means `model()` with its defaults.

    Raises:
        ApplicationError: non-retryable, typed `error_type`, one line.
    """
    if optional and (not args or (len(args) == 1 and _is_null(args[0]))):
        return model()
    if len(args) != 1:
        got = "no input" if not args else f"{len(args)} inputs"
        raise refusal(error_type, f"{what} takes one JSON object, got {got}; e.g. {example}")
    value = args[0]
    if isinstance(value, model):
        return value
    if not isinstance(value, RawValue):
        try:
            return model.model_validate(value)
        except ValidationError as exc:
            raise refusal(error_type, f"invalid {what}: {problems_text(exc)}") from None
    payload = value.payload
    problem = _encoding_problem(payload, what, example)
    if problem is not None:
        raise refusal(error_type, problem)
    size = len(payload.data)
    if size > max_bytes:
        raise refusal(error_type, f"{what} is {size} bytes; the limit is {max_bytes}")
    try:
        return model.model_validate_json(payload.data, strict=True)
    except ValidationError as exc:
        raise refusal(error_type, f"invalid {what}: {problems_text(exc)}; e.g. {example}") from None


def _encoding_problem(payload: Any, what: str, example: str) -> str | None:
    """Why a raw payload is not JSON the run can read (a stand-in, empty, another encoding)."""
    encoding = payload.metadata.get("encoding", b"")
    reason = payload.metadata.get("reason", b"").decode("utf-8", "replace")
    if encoding == UNDECRYPTABLE:
        return (
            f"{what} could not be decrypted ({reason}); send it through the codec endpoint "
            "(`hitl codec-server`) that holds the workers' key"
        )
    if encoding == UNRETRIEVABLE:
        return f"{what} refers to a stored payload that cannot be read ({reason})"
    if encoding == NULL:
        return f"{what} is empty; e.g. {example}"
    if encoding != JSON:
        shown = encoding.decode("utf-8", "replace")[:40]
        return f"{what} must be JSON (encoding json/plain), not {shown!r}"
    return None


def _is_null(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, RawValue):
        encoding = value.payload.metadata.get("encoding", b"")
        return encoding == NULL or (encoding == JSON and value.payload.data.strip() == b"null")
    return False


def preview(args: tuple[Any, ...], limit: int = 200) -> str:
    """A short, printable preview of what was sent (for refused-message records)."""
    if len(args) != 1:
        return f"<{len(args)} inputs>"
    value = args[0]
    if isinstance(value, RawValue):
        encoding = value.payload.metadata.get("encoding", b"")
        if encoding != JSON:
            return f"<{encoding.decode('utf-8', 'replace')[:40]} payload>"
        text = value.payload.data[: limit * 4].decode("utf-8", "replace")
    elif isinstance(value, BaseModel):
        text = value.model_dump_json()
    else:
        text = repr(value)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Waiters:
    """Admission of long-running updates (`wait`, `decide` with `wait`, event-stream polls).

    The server admits at most 10 updates in flight per run. Holding them all with waits would
    refuse every decision, so at most `limit` waits are admitted at once; a decision never
    waits and always finds a slot.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0

    def check(self) -> None:
        """Refuse a new wait when `limit` are in flight (validators call this)."""
        if self.count >= self.limit:
            raise refusal(
                "TooManyWaiters",
                f"{self.count} callers already wait on this run (the limit is {self.limit}, so "
                "decisions always find a slot); read it with the `status` query instead",
            )

    def enter(self) -> None:
        """A wait starts (in its handler, before the first `await`)."""
        self.count += 1

    def leave(self) -> None:
        """A wait ends."""
        self.count -= 1


def trust_problem(inp: Any, info: Any) -> str | None:
    """Why a run's start input claims a trust it was not given, or `None`.

    A run's internal fields (carried state, pinned graph, standing rules, parent link) are
    believed only when the server vouches for where they came from: a continuation of one of
    our runs (`continued_run_id`, and neither a cron run nor a retry, which repeat the original
    start input), or a child run of the parent the link names (`workflow.info().parent`).
    Anyone can start a workflow with any input; a top-level start resolves its graph from the
    worker's registry and starts with no rules.
    """
    if inp.carried is not None and (
        info.continued_run_id is None or info.cron_schedule or info.attempt != 1
    ):
        return (
            "`carried` is internal: only a run continuing as new carries state "
            "(start a run with `agent` and `input`)"
        )
    nested = (
        inp.parent is not None
        or inp.graph is not None
        or inp.directory is not None
        or inp.policy is not None
        or inp.start_agent is not None
        or bool(inp.rules)
        or bool(inp.always_rules)
    )
    if nested:
        parent = info.parent
        if inp.parent is None or parent is None or parent.workflow_id != inp.parent.workflow_id:
            return (
                "`parent`, `graph`, `directory`, `policy`, `start_agent` and `rules` are "
                "internal: only a "
                "nested run started by its parent run sets them (start a run with `agent` and "
                "`input`)"
            )
        if inp.carried is None and inp.graph is None:
            return "a nested run needs its parent's graph"
    return None


def start_problem(inp: Any) -> str | None:
    """Why a run's start input cannot run (trust, bounds), or `None`."""
    problem = trust_problem(inp, workflow.info())
    if problem is not None:
        return problem
    if inp.carried is None and not inp.agent:
        return "agent must name a registered agent"
    if len(inp.agent) > MAX_AGENT_NAME_CHARS:
        return f"agent is {len(inp.agent)} characters; the limit is {MAX_AGENT_NAME_CHARS}"
    problems = run_config_problems(inp.run_config, inp.max_turns)
    if problems:
        return "; ".join(problems)
    if inp.carried is None:
        problem = conversation_problem(inp.previous_response_id, inp.conversation_id, inp.session)
        if problem is not None:
            return problem
    if inp.carried is None and inp.context is not None:
        size = len(json.dumps(inp.context))
        if size > MAX_CONTEXT_BYTES:
            return f"context is {size} bytes; the limit is {MAX_CONTEXT_BYTES}"
    return None


def encoded_size(value: Any) -> int:
    """A value's size as a payload (before the codec, which adds a few bytes)."""
    return len(workflow.payload_converter().to_payload(value).data)


def fits(values: Sequence[Any], limit: int) -> bool:
    """Whether `values`, each as a payload, take at most `limit` bytes together.

    Counting stops past the limit, so a long transcript is not serialized whole to learn that.
    """
    total = 0
    for value in values:
        total += encoded_size(value) + 1
        if total > limit:
            return False
    return True


def query_text(args: tuple[Any, ...]) -> str:
    """A query's single string argument (anything else: empty)."""
    if len(args) != 1:
        return ""
    value = args[0]
    if isinstance(value, str):
        return value
    raw = value.payload if isinstance(value, RawValue) else None
    if raw is None or raw.metadata.get("encoding") != JSON or len(raw.data) > 2048:
        return ""
    try:
        text = json.loads(raw.data)
    except ValueError:
        return ""
    return text if isinstance(text, str) else ""


def initial_state(inp: RunInput) -> CarriedState:
    """A continuation's carried state, or a fresh one (with a nested run's inheritance)."""
    if inp.carried is not None:
        inp.carried.turns_here = 0
        return inp.carried
    state = CarriedState(
        context=RunContextData(
            value=inp.context,
            type=inp.run_config.context_type,
            deserializer=inp.run_config.context_deserializer,
        )
        if inp.context is not None
        else None
    )
    if inp.graph is None and (inp.previous_response_id or inp.conversation_id):
        # The provider holds the conversation before this run's input (a nested run never
        # inherits it: its agent tool starts a conversation of its own, as in the SDK).
        state.provider_history = True
        state.conversation_id = inp.conversation_id
        state.response_id = inp.previous_response_id
    if inp.graph is not None:
        # A nested run: the root's pinned graph and standing rules, no search attributes (its
        # approvals are listed and decided on the root run).
        state.graph = inp.graph
        state.current_agent = inp.start_agent or inp.graph.root
        state.rules = list(inp.rules)
        state.directory = inp.directory
        state.policy = inp.policy
        state.always_rules = dict(inp.always_rules)
        state.tracing = bool(inp.parent and inp.parent.tracing)
        state.notify = bool(inp.parent and inp.parent.notify)
        state.run_call_ids = bool(inp.parent and inp.parent.run_call_ids)
    return state


def read_wait(args: tuple[Any, ...]) -> WaitInput:
    """The `wait` update's payload (none at all is `{}`); it is echoed in history, so small."""
    return read_one(
        args,
        WaitInput,
        what="a wait",
        example="{}",
        max_bytes=MAX_SIGNAL_BYTES,
        error_type="InvalidMessage",
        optional=True,
    )
