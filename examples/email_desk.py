"""Email desk: a back-office agent that drafts and sends customer emails.

- `draft_email` never needs approval (nothing leaves the company).
- `send_email` needs a person when the recipient is outside the company or the text mentions
  a refund (a predicate, evaluated in an activity); the person sees the whole email as the
  approval's preview and may fix it before sending (edit, then approve).

The model is a `ScriptedModel` (offline and deterministic, not a language model); set
`HITL_EMAIL_DESK_MODEL=gpt-4.1` (and `OPENAI_API_KEY` on the worker) to use a real one.
"""

from __future__ import annotations

import os
import re
from typing import Any

from hitl import (
    Agent,
    ApprovalRequest,
    ModelReply,
    ModelRequest,
    RunContextWrapper,
    ScriptedModel,
    ToolContext,
    function_tool,
)
from hitl.examples import backoffice

SENSITIVE = re.compile(r"\brefund", re.IGNORECASE)


def outside(address: str) -> bool:
    """Whether `address` is outside the company."""
    return not address.strip().lower().endswith("@" + backoffice.COMPANY_DOMAIN)


def email_needs_approval(
    _ctx: RunContextWrapper[Any], params: dict[str, Any], _call_id: str
) -> bool:
    """External recipients and anything about refunds need a person."""
    text = f"{params.get('subject', '')} {params.get('body', '')}"
    return outside(str(params.get("to", ""))) or bool(SENSITIVE.search(text))


def email_request(params: dict[str, Any]) -> ApprovalRequest:
    """What the approver sees: why it needs a person, and the email itself."""
    why = []
    if outside(params["to"]):
        why.append(f"it goes outside {backoffice.COMPANY_DOMAIN}")
    if SENSITIVE.search(f"{params['subject']} {params['body']}"):
        why.append("it mentions a refund")
    return ApprovalRequest(
        title=f"Send \u201c{params['subject']}\u201d to {params['to']}",
        message="This email needs a person because " + " and ".join(why or ["policy"]) + ".",
        preview=f"To: {params['to']}\nSubject: {params['subject']}\n\n{params['body']}",
        preview_label="Email",
        primary_label="Send",
        secondary_label="Hold",
    )


@function_tool
def draft_email(to: str, subject: str, body: str) -> str:
    """Write a draft (nothing is sent).

    Args:
        to: The recipient's address.
        subject: The subject line.
        body: The text.
    """
    return f"Draft to {to} saved: {subject!r} ({len(body.split())} words)"


@function_tool(needs_approval=email_needs_approval, approval_request=email_request, max_attempts=5)
def send_email(ctx: ToolContext[Any], to: str, subject: str, body: str) -> str:
    """Send an email (once per call, whatever retries happen).

    Args:
        to: The recipient's address.
        subject: The subject line.
        body: The text.
    """
    message_id = backoffice.send_mail(ctx.idempotency_key, to, subject, body)
    return f"Sent {message_id} to {to}"


def email_desk_script(req: ModelRequest) -> ModelReply:
    """Offline stand-in for a model: draft the email the message asks for, then send it."""
    text = req.last_user_text()
    to = (re.findall(r"[\w.+-]+@[\w.-]+\.\w+", text) or [f"team@{backoffice.COMPANY_DOMAIN}"])[0]
    order = re.search(r"\b(\d{4})\b", text)
    topic = "your refund" if SENSITIVE.search(text) else "your order"
    subject = f"About {topic}" + (f" {order.group(1)}" if order else "")
    body = (
        f"Hello,\n\nWe have processed {topic}"
        + (f" for order {order.group(1)}" if order else "")
        + ". Reply to this email with any question.\n\nThe back office"
    )
    done = {r.name: r for r in req.tool_results()}
    if "draft_email" not in done:
        return ModelReply.call("draft_email", {"to": to, "subject": subject, "body": body})
    if "send_email" not in done:
        return ModelReply.call("send_email", {"to": to, "subject": subject, "body": body})
    return ModelReply.say(done["send_email"].output or "")


agent: Agent[Any] = Agent(
    name="Email desk",
    instructions=(
        "You write and send customer emails. Draft first, then send. Emails outside "
        f"{backoffice.COMPANY_DOMAIN} and anything about refunds need a person's approval; "
        "if one is held, say so."
    ),
    tools=[draft_email, send_email],
    model=os.environ.get("HITL_EMAIL_DESK_MODEL")
    or ScriptedModel(email_desk_script, "examples.email_desk"),
)
