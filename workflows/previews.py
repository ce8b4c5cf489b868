"""Edit previews: how a pending call would read with a person's edited arguments.

The `preview_edit` update plans the edited call as an edit-then-approve would (the tool's
argument checks, guardrails, `needs_approval`, approvers and approval request, in an activity)
and answers with what the tool would show or why it would refuse, changing nothing. A console
shows that before the person approves the edit, so no edit is approved blind. A preview
carries no signature (it could never be taken for an approval), and one call takes at most
`MAX_PREVIEWS_PER_CALL` (each adds an activity to history).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from hitl.limits import MAX_DECISION_BYTES
    from hitl.wire import (
        AgentSpec,
        CallRecord,
        DecisionInput,
        EditPreview,
        EditPreviewInput,
        ToolSpec,
    )
    from hitl.wire.runs import text_digest
    from hitl.workflows.failures import RunFailure
    from hitl.workflows.inputs import read_one, refusal

if TYPE_CHECKING:
    from hitl.workflows.decisions import Decisions

PREVIEW_EXAMPLE = '{"call_id": "<call id>", "arguments": {"field": "value"}, "approver": "you"}'
MAX_PREVIEWS_PER_CALL = 20
"""Edit previews one call takes (each plans the edited call in an activity, in history)."""


def read(args: tuple[Any, ...]) -> DecisionInput:
    """A `preview_edit` payload, as the edit-then-approve it previews (for the same checks)."""
    p = read_one(
        args,
        EditPreviewInput,
        what="an edit preview request",
        example=PREVIEW_EXAMPLE,
        max_bytes=MAX_DECISION_BYTES,
    )
    return DecisionInput(
        call_id=p.call_id, approver=p.approver, arguments=p.arguments, seen_sha256=p.seen_sha256
    )


def check(desk: Decisions, d: DecisionInput) -> tuple[CallRecord, AgentSpec, ToolSpec, str]:
    """What approving this edit is checked for, but a signature.

    The call waits, the approver may decide it, the arguments are the ones seen, the edit fits
    the tool; and the call has previews left.
    """
    desk._open(d.call_id)
    if desk.run.book.check("approve", d, workflow.now()) is not None:
        raise refusal("AlreadyDecided", f"call '{d.call_id}' was decided already")
    if desk.previewing or desk.editing:
        raise refusal("Busy", "another edit of this run is being planned; try again in a moment")
    if desk.previews.get(d.call_id, 0) >= MAX_PREVIEWS_PER_CALL:
        raise refusal(
            "TooManyPreviews",
            f"call '{d.call_id}' was previewed {MAX_PREVIEWS_PER_CALL} times; decide it",
        )
    return desk._edit_target("approve", d)


def validate(desk: Decisions, args: tuple[Any, ...]) -> None:
    """The `preview_edit` validator (read-only)."""
    with desk.logged("preview_edit", args):
        check(desk, read(args))


async def preview(desk: Decisions, args: tuple[Any, ...]) -> EditPreview:
    """How the call reads with the edited arguments, as its tool plans them; nothing changes."""
    d = read(args)
    call, agent, tool, text = check(desk, d)
    desk.previews[d.call_id] = desk.previews.get(d.call_id, 0) + 1
    digest = text_digest(text)
    probe = call.model_copy(update={"arguments": text})
    desk.previewing = True  # one at a time, never while an edit plans (see `Decisions`)
    try:
        plan = (await desk.run.steps.plan(agent, [probe], [tool.name], busy=False)).plans[0]
    except RunFailure as failed:
        why = f"planning the edited call failed: {failed}"
        return EditPreview(call_id=d.call_id, arguments=text, arguments_sha256=digest, refusal=why)
    finally:
        desk.previewing = False
    refused = plan.refusal or (plan.tripwire.message if plan.tripwire else None)
    needs = plan.needs_approval or tool.approval == "always"
    asked = plan.required_approvals or 1
    return EditPreview(
        call_id=d.call_id,
        arguments=text,
        arguments_sha256=digest,
        request=plan.request,
        refusal=refused,
        needs_approval=needs,
        required_approvals=max(tool.required_approvals, asked) if needs else 1,
    )
