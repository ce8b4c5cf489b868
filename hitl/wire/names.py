"""Names and ids that appear in histories, CLIs and docs: changing one breaks stored runs.

Workflow, activity, handler and search-attribute names, the literal types of the contract, and
how workflow ids are derived.
"""

from __future__ import annotations

import hashlib
from typing import Literal

__all__ = [
    "ACT_CALL_MODEL",
    "AGENT_NOT_SERVED",
    "ACT_EXECUTE_TOOL",
    "ACT_FILTER_HANDOFF",
    "ACT_HANDLE_RUN_ERROR",
    "ACT_LOAD_SESSION",
    "ACT_NOTIFY",
    "ACT_PLAN_TOOLS",
    "ACT_READ_RUN",
    "ACT_REJECTION_TEXT",
    "ACT_RESOLVE_AGENT",
    "ACT_RUN_GUARDRAILS",
    "ACT_SAVE_SESSION",
    "ApprovalMode",
    "CORE_SEARCH_ATTRIBUTES",
    "DEFAULT_TASK_QUEUE",
    "DecisionKind",
    "DecisionOutcome",
    "DecisionSource",
    "DecisionVia",
    "EVENTS_TOPIC",
    "HANDLER_HELP",
    "INBOX_CALLS",
    "INBOX_MEMO",
    "MAX_ID_PREFIX",
    "MAX_WORKFLOW_ID",
    "Phase",
    "QUERY_MAIL",
    "QUERY_REPORT",
    "QUERY_SNAPSHOT",
    "QUERY_STATUS",
    "QUERY_TRANSCRIPT",
    "REFUSAL_MARK",
    "SA_AGENT",
    "SA_DEADLINE",
    "SA_OUTCOMES",
    "SA_PENDING_SINCE",
    "SA_PENDING_TOOLS",
    "SA_STATUS",
    "SEARCH_ATTRIBUTES",
    "SESSION_ADD_ITEMS",
    "SESSION_APPEND",
    "SESSION_CLEAR",
    "SESSION_ITEMS",
    "SESSION_POP_ITEM",
    "SESSION_WORKFLOW_TYPE",
    "SIGNAL_APPROVE",
    "SIGNAL_CHILD_REPORT",
    "SIGNAL_FROM_ROOT",
    "SIGNAL_HELP",
    "SIGNAL_REJECT",
    "UPDATE_ANSWER",
    "UPDATE_APPROVE",
    "UPDATE_DECIDE",
    "UPDATE_EXTEND",
    "UPDATE_PREVIEW_EDIT",
    "UPDATE_REJECT",
    "UPDATE_RESOLVE",
    "UPDATE_WAIT",
    "WORKFLOW_TYPE",
    "child_workflow_id",
    "idempotency_key",
    "session_workflow_id",
]

# Names that appear in histories, CLIs and docs. Changing one breaks stored runs.
WORKFLOW_TYPE = "AgentRun"
DEFAULT_TASK_QUEUE = "hitl"

# Activity names (explicit, so renaming Python code never breaks a stored history).
ACT_RESOLVE_AGENT = "resolve_agent"
ACT_CALL_MODEL = "call_model"
AGENT_NOT_SERVED = "AgentNotServed"
"""The error type of a `call_model` that names a pinned graph its worker does not serve."""
ACT_PLAN_TOOLS = "plan_tools"
ACT_EXECUTE_TOOL = "execute_tool"
ACT_REJECTION_TEXT = "rejection_text"
ACT_HANDLE_RUN_ERROR = "handle_run_error"
ACT_RUN_GUARDRAILS = "run_guardrails"
ACT_FILTER_HANDOFF = "filter_handoff"
ACT_LOAD_SESSION = "load_session"
ACT_SAVE_SESSION = "save_session"
ACT_NOTIFY = "notify"
"""Tells the worker's notifiers (webhooks, callbacks) about a call; never fails a run."""
ACT_READ_RUN = "read_run"
"""Reads another run of the same graph by query (a nested run's report, or its parent's mail)."""

# Handler names of `AgentRun` (what the `temporal` CLI and the UI call).
UPDATE_APPROVE = "approve"
UPDATE_REJECT = "reject"
UPDATE_DECIDE = "decide"
UPDATE_WAIT = "wait"
UPDATE_RESOLVE = "resolve"
"""Settles an uncertain call: its effect happened, run it again, or give up (`ResolveInput`)."""
UPDATE_ANSWER = "answer"
"""Answers the question a tool asks in the middle of a call (MCP elicitation; `AnswerInput`)."""
UPDATE_EXTEND = "extend"
UPDATE_PREVIEW_EDIT = "preview_edit"
"""How a pending call would read with edited arguments (`EditPreview`); changes nothing."""
"""Moves a pending call's approval deadline later (`ExtendInput`)."""
SIGNAL_APPROVE = "approve"
SIGNAL_REJECT = "reject"
QUERY_STATUS = "status"
QUERY_SNAPSHOT = "snapshot"
QUERY_TRANSCRIPT = "transcript"
SIGNAL_CHILD_REPORT = "__hitl_child_report"
"""Internal, nested run -> parent: "read me again" (its content is ignored)."""
SIGNAL_FROM_ROOT = "__hitl_from_root"
"""Internal, parent -> nested run: "read your mail" (its content is ignored)."""
QUERY_REPORT = "__hitl_report"
QUERY_MAIL = "__hitl_mail"

SESSION_WORKFLOW_TYPE = "AgentSession"
SESSION_APPEND = "append"
SESSION_ADD_ITEMS = "add_items"
SESSION_POP_ITEM = "pop_item"
SESSION_CLEAR = "clear"
SESSION_ITEMS = "items"
EVENTS_TOPIC = "events"
"""The topic of a run's workflow stream that carries its `RunEvent`s."""


MAX_WORKFLOW_ID = 255
"""Longest workflow id we create or accept: PostgreSQL-backed Temporal stores ids in
`VARCHAR(255)` (the dev server's SQLite would take longer ones, production would not)."""
MAX_ID_PREFIX = 160
"""Longest business workflow id or session id a client may give: nested runs append
`--<call id>` to their root's id (see `child_workflow_id`)."""


def child_workflow_id(parent_id: str, call_id: str) -> str:
    """Workflow id of the nested run answering agent-tool call `call_id` of `parent_id`.

    `<parent>--<call id>`, shortened with a digest when nesting would pass `MAX_WORKFLOW_ID`.
    """
    child = f"{parent_id}--{call_id}"
    if len(child) <= MAX_WORKFLOW_ID:
        return child
    digest = hashlib.sha256(child.encode("utf-8")).hexdigest()[:20]
    return f"{child[: MAX_WORKFLOW_ID - len(digest) - 2]}--{digest}"


def idempotency_key(workflow_id: str, call_id: str) -> str:
    """The key a tool passes on so one approved call has at most one effect: `<run>:<call>`.

    The same on every attempt of the call (`ToolContext.idempotency_key`), and across
    continue-as-new (the workflow id and the run's call id are kept).
    """
    return f"{workflow_id}:{call_id}"


def session_workflow_id(session_id: str) -> str:
    """Workflow id of the `AgentSession` that holds a conversation's transcript."""
    return f"hitl-session-{session_id}"


Phase = Literal["starting", "running", "awaiting_approval", "completed", "failed"]
"""Where a run is. `awaiting_approval` means: nothing can progress until a person decides."""

DecisionKind = Literal["approve", "reject"]
"""What a person, a standing rule or an approver callback decides about a call."""
DecisionOutcome = Literal["approve", "reject", "expired"]
"""What a decision record says a call came to: a decision's kind, or `expired` (its approval
deadline passed without one; recorded before as `reject` with `expired` set, read as this)."""
DecisionSource = Literal["person", "always_rule", "policy", "auto_approval", "deadline"]
DecisionVia = Literal["update", "signal", "workflow", "root"]
ApprovalMode = Literal["never", "always", "predicate"]

# Custom search attributes the workflow keeps current (never arguments or personal data).
SA_STATUS = "HitlStatus"
SA_PENDING_TOOLS = "HitlPendingTools"
SA_AGENT = "HitlAgent"
SA_PENDING_SINCE = "HitlPendingSince"
SA_DEADLINE = "HitlDeadline"
"""The earliest approval deadline among the pending calls (unset: none has one)."""
SA_OUTCOMES = "HitlOutcomes"
"""What the run's calls came to so far: `approved`, `rejected`, `expired`, `edited`,
`uncertain` (e.g. `HitlOutcomes = 'expired'` lists runs with an expired call)."""
CORE_SEARCH_ATTRIBUTES = (SA_STATUS, SA_PENDING_TOOLS, SA_AGENT, SA_PENDING_SINCE, SA_DEADLINE)
"""Without these a run keeps no search attributes; `HitlOutcomes`, added later, is optional: a
namespace without it (registered before it existed) keeps the others."""
SEARCH_ATTRIBUTES = {
    SA_STATUS: "Keyword",
    SA_PENDING_TOOLS: "KeywordList",
    SA_AGENT: "Keyword",
    SA_PENDING_SINCE: "Datetime",
    SA_DEADLINE: "Datetime",
    SA_OUTCOMES: "KeywordList",
}

INBOX_MEMO = "hitl_inbox"
"""Memo field of a paused run: its pending calls in brief (`InboxMemo`), so that an inbox can
list them from visibility alone, with no query and no worker. Encrypted with the payloads."""
INBOX_CALLS = 100
"""Calls the memo lists at most (`InboxMemo.total` counts them all)."""

REFUSAL_MARK = "_hitl_refusal"
"""Set on the `ApplicationError`s our handlers refuse with (`workflows.inputs.refusal`); the
failure converter writes them as one plain line (`hitl.converter.HitlFailureConverter`)."""

HANDLER_HELP: dict[str, str] = {
    UPDATE_APPROVE: 'Approve a pending call. {"call_id": "t1.1", "approver": "you", '
    '"reason": "optional", "always": false, "arguments": {"optional": "edited arguments"}}',
    UPDATE_REJECT: 'Reject a pending call; the model reads the message. {"call_id": "t1.1", '
    '"approver": "you", "message": "why, for the model", "always": false}',
    UPDATE_DECIDE: 'Several decisions at once. {"decisions": [{"kind": "approve", '
    '"call_id": "t1.1"}], "wait": true}',
    UPDATE_WAIT: "Returns once the run waits for a person or finishes. {} "
    '(or {"items": true}: with the transcript too, when small)',
    UPDATE_RESOLVE: 'Settle an uncertain call. {"call_id": "t1.1", "outcome": '
    '"happened|retry|give_up", "output": "what the tool did", "approver": "you"}',
    UPDATE_ANSWER: 'Answer the question a tool asks. {"call_id": "t1.1", "content": '
    '{"field": "value"}, "approver": "you"} or {"call_id": "t1.1", "action": "decline"}',
    UPDATE_EXTEND: 'Move a pending call\'s deadline later. {"call_id": "t1.1", '
    '"seconds": 86400, "approver": "you"}',
    UPDATE_PREVIEW_EDIT: "How a call would read with edited arguments, before approving them "
    '(changes nothing). {"call_id": "t1.1", "arguments": {"field": "value"}, "approver": "you"}',
    QUERY_STATUS: "The run: phase, pending calls with their requests, decisions, refusals.",
    QUERY_SNAPSHOT: "The status and the transcript so far.",
    QUERY_TRANSCRIPT: 'A slice of the model input items. {"start": 0, "end": 100}',
}
"""What the Temporal UI shows for each handler: its purpose and the payload's shape."""
SIGNAL_HELP = (
    "Prefer the update of the same name (a signal cannot say it was refused; refusals are "
    'listed in the run\'s current details). {"call_id": "t1.1", "approver": "you"}'
)
