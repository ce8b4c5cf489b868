"""Documented limits on everything a caller can send to a run, and on run-config numbers.

Anyone who may start workflows or send updates and signals in the namespace can send any
payload of any size (Temporal checks only the namespace). The limits below are checked in code
before anything is accepted (update validators, signal handlers, the run's first task), so an
oversized or malformed payload is refused with a typed one-line reason and never reaches a
command Temporal would reject (a workflow task that fails forever, or a run terminated for a
too-large message). Changing a limit never breaks a stored run: they are checked on arrival,
not when histories replay.

The module is imported by workflow code: constants and pure functions only.
"""

from __future__ import annotations

from typing import Any

KB = 1024

# ----------------------------------------------------------------------------- decisions

MAX_DECISION_BYTES = 64 * KB
"""One `approve` / `reject` payload (update or signal), as encoded JSON."""
MAX_DECIDE_BYTES = 256 * KB
"""One `decide` payload (a batch of decisions, optionally a new run context)."""
MAX_DECISIONS_PER_UPDATE = 100
"""Decisions in one `decide` batch."""
MAX_TEXT_CHARS = 4000
"""A decision's `message` (shown to the model) or `reason` (kept in the record)."""
MAX_APPROVER_CHARS = 200
"""A decision's `approver` name (and any name in an approver list)."""
MAX_APPROVERS = 50
"""Names in one approver list (a tool's, a callable's answer, a run's `escalate_to`)."""
MAX_CALL_ID_CHARS = 512
"""A call id, qualified ones (`outer/inner`) included."""

# ----------------------------------------------------------------------------- runs

MAX_START_BYTES = 512 * KB
"""The `AgentRun` start input (user input, context and run config together)."""
MAX_CONTEXT_BYTES = 64 * KB
"""A run context as JSON, at start or replaced by a resume (`decide`)."""
MAX_AGENT_NAME_CHARS = 200
"""An agent name in a start input."""
MAX_SIGNAL_BYTES = 64 * KB
"""Any other message sent to a run (internal signals, stream publishes)."""

MAX_RESULT_BYTES = 1536 * KB
"""A run's result and its continue-as-new state (Temporal refuses payloads over 2 MB)."""
TRANSCRIPT_INLINE_BYTES = 16 * KB
"""A `wait` / `decide` answer carries the transcript (`WaitInput.items`) only this small.

A run's result never repeats it (every item is in history already); the answer that sees the
run pause or finish carries what the caller lacks of it, so `Runner.run` returns without a
`snapshot` query, which costs a replay of the closed run (tens of milliseconds). A larger one
is read by that query. (Runs of older versions kept it in their result up to this size.)"""
MODEL_INPUT_INLINE_BYTES = 4 * KB
"""A regular model activity gets the transcript in its input while it is this small (JSON).

A larger one is passed by reference and read by query from the activity, so history stays
linear in turns. Inline saves that query: a round trip through the server to the worker that
holds the run (about a third of the server's work for a short run) and several milliseconds
per call; the price is at most this many bytes of history per model call."""

MAX_ARGUMENT_DEPTH = 64
"""How deeply a tool call's arguments may nest arrays and objects (JSON's parsers recurse; real
arguments nest a few levels). Deeper arguments go back to the model as an error."""
MAX_MODEL_ITEM_DEPTH = 64
"""How deeply one model output item may nest (JSON decoders of activity results give up near
200 levels, which would fail the run's workflow task); the model activity drops deeper items."""

MAX_EXTEND_SECONDS = 365 * 24 * 3600.0
"""How far one `extend` may move a call's deadline (a year)."""
MAX_REQUIRED_APPROVALS = 10
"""Distinct approvers a tool may require for one call (four eyes is 2)."""
MAX_REFUSED_KEPT = 50
"""Refused messages a run keeps (the latest), for `status` and `hitl show`."""
MAX_ACTIONS_KEPT = 200
"""Resolutions, extensions and answers a run keeps for the audit (the latest; each at most
about 2 KB, so they never make a result or carried state too large)."""
MAX_WAITING_UPDATES = 5
"""Long-running updates (`wait`, `decide` with `wait`, event-stream polls) a run holds at once.

The server admits at most 10 updates in flight per run; a run full of waits would refuse every
decision. Beyond this many, a new wait is refused (`TooManyWaiters`) and decisions keep a slot.
"""

# ----------------------------------------------------------------------------- run config

MAX_TURNS = 1000
MIN_CONTINUE_AS_NEW_EVENTS = 10
MAX_CONTINUE_AS_NEW_EVENTS = 40_000
"""Temporal terminates a run at 51,200 events; it suggests continuing well before."""
DEFAULT_TOOL_ARGUMENT_BYTES = 64 * KB
"""`RunConfig.max_tool_argument_bytes` when a run names none (a wire default: never changes)."""
DEFAULT_TOOL_OUTPUT_BYTES = 128 * KB
"""`RunConfig.max_tool_output_bytes` when a run names none (a wire default: never changes)."""
MAX_MODEL_OUTPUT_BYTES = 1_500_000
"""One model answer, as recorded (the model activity fails past it: a payload over 2 MB would
break the run)."""
MAX_PREVIEW_CHARS = 32_000
"""An approval request's preview (stored with the pending call; longer ones are cut)."""
MAX_TOOL_ARG_BYTES = 512 * KB
MAX_TOOL_OUTPUT_BYTES = 1024 * KB
"""Tool outputs are recorded in history (2 MB per payload at most, with the rest of a result)."""
MAX_BAD_TURNS = 100
MAX_PROVIDER_ID_CHARS = 256
"""A `previous_response_id` or `conversation_id` (OpenAI's are about 50 characters)."""
MAX_MODEL_TIMEOUT_SECONDS = 3600.0


def run_config_problems(cfg: Any, max_turns: int | None = None) -> list[str]:
    """What is out of bounds in a `RunConfigSpec` (and a run's `max_turns`); empty when fine.

    Called by clients before they start a run and by the run itself on its first task, so a
    start from the `temporal` CLI gets the same checks.
    """
    problems: list[str] = []

    def within(name: str, value: Any, low: float, high: float) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int | float):
            problems.append(f"{name} must be a number")
        elif not low <= value <= high:
            problems.append(f"{name} must be between {low:g} and {high:g} (got {value:g})")

    within("max_turns", max_turns, 1, MAX_TURNS)
    within("run_config.max_turns", cfg.max_turns, 1, MAX_TURNS)
    within(
        "run_config.continue_as_new_after_events",
        cfg.continue_as_new_after_events,
        MIN_CONTINUE_AS_NEW_EVENTS,
        MAX_CONTINUE_AS_NEW_EVENTS,
    )
    within(
        "run_config.max_tool_argument_bytes",
        cfg.max_tool_argument_bytes,
        1,
        MAX_TOOL_ARG_BYTES,
    )
    within("run_config.max_tool_output_bytes", cfg.max_tool_output_bytes, 1, MAX_TOOL_OUTPUT_BYTES)
    within("run_config.max_consecutive_bad_turns", cfg.max_consecutive_bad_turns, 1, MAX_BAD_TURNS)
    for name in (
        "approval_timeout_seconds",
        "remind_after_seconds",
        "escalate_after_seconds",
    ):
        within(f"run_config.{name}", getattr(cfg, name, None), 1, MAX_EXTEND_SECONDS * 10)
    escalate_to = getattr(cfg, "escalate_to", [])
    if len(escalate_to) > MAX_APPROVERS or any(
        not 0 < len(a) <= MAX_APPROVER_CHARS for a in escalate_to
    ):
        problems.append(
            f"run_config.escalate_to holds at most {MAX_APPROVERS} names of 1 to "
            f"{MAX_APPROVER_CHARS} characters"
        )
    model = cfg.model
    timeout = getattr(model, "timeout_seconds", None)
    if timeout is not None:
        within("run_config.model.timeout_seconds", timeout, 0.001, MAX_MODEL_TIMEOUT_SECONDS)
    return problems


def text_problem(name: str, value: str | None, limit: int) -> str | None:
    """`"<name> is N characters; the limit is L"` when `value` is too long, else `None`."""
    if value is not None and len(value) > limit:
        return f"{name} is {len(value)} characters; the limit is {limit}"
    return None


def conversation_problem(
    previous_response_id: str | None,
    conversation_id: str | None,
    session: object | None = None,
    auto_previous_response_id: bool = False,
) -> str | None:
    """Why a run's server-managed conversation settings cannot go together, or `None`.

    Checked by clients before they start a run and by the run on its first task (a start from
    the `temporal` CLI gets the same refusal).
    """
    for name, value in (
        ("previous_response_id", previous_response_id),
        ("conversation_id", conversation_id),
    ):
        if value is not None and not 0 < len(value) <= MAX_PROVIDER_ID_CHARS:
            return f"{name} must be 1 to {MAX_PROVIDER_ID_CHARS} characters (got {len(value)})"
    if previous_response_id is not None and conversation_id is not None:
        return (
            "conversation_id and previous_response_id are mutually exclusive: a conversation "
            "keeps its own history (pass only conversation_id), a response chain continues "
            "from one response (pass only previous_response_id)"
        )
    if session is not None and (
        previous_response_id is not None or conversation_id is not None or auto_previous_response_id
    ):
        return (
            "Session persistence cannot be combined with conversation_id, "
            "previous_response_id, or auto_previous_response_id."
        )
    return None
