"""What the console's pages show, and how.

The template environment and its filters, and the small readings of a call: its digest, its
message without the arguments, its deadline as time left, the run's recent transcript.
"""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from hitl.cli.common import _ago
from hitl.console import md
from hitl.console.rows import when
from hitl.console.urls import (
    audit_url,
    call_url,
    decide_run_url,
    decide_url,
    run_url,
)
from hitl.wire import DecisionRecord, PendingApproval, RunSnapshot
from hitl.wire.runs import text_digest

HERE = Path(__file__).parent


def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["when"] = when
    env.filters["ago"] = ago
    env.filters["pretty"] = pretty_json
    env.filters["md"] = md.render
    env.filters["shell"] = shlex.quote  # an id in a command a person copies: one word
    env.globals["diff_class"] = diff_class
    env.globals["due_in"] = due_in
    env.globals["call_url"] = call_url
    env.globals["decide_url"] = decide_url
    env.globals["audit_url"] = audit_url
    env.globals["run_url"] = run_url
    env.globals["decide_run_url"] = decide_run_url
    return env


def ago(at: datetime | None) -> str:
    """How long ago, at a glance (`12m ago`).

    Under a minute it is `just now`, so that a page polled every few seconds does not change,
    and is not redrawn, every time.
    """
    if at is None:
        return "unknown"
    return "just now" if (datetime.now(UTC) - at).total_seconds() < 60 else _ago(at)


def due_in(deadline: datetime) -> str:
    """A deadline as time left (`in 2d 3h`, `in 12m`), or `overdue by 5m` once it passed."""
    seconds = int((deadline - datetime.now(UTC)).total_seconds())
    left = abs(seconds)
    d, h, m = left // 86400, left % 86400 // 3600, left % 3600 // 60
    span = f"{d}d {h}h" if d else f"{h}h {m}m" if h else f"{m}m" if m else "under a minute"
    return f"in {span}" if seconds >= 0 else f"overdue by {span}"


def message_of(call: PendingApproval) -> str:
    """A call's request message, without the arguments the page shows anyway.

    A tool without its own approval text gets a message that ends with its arguments
    (`Arguments:` and their JSON): the page shows those once, under Arguments.
    """
    message = call.request.message if call.request else ""
    try:
        shown = json.dumps(json.loads(call.arguments), indent=2, default=str, ensure_ascii=False)
    except ValueError:
        return message
    tail = f"\n\nArguments:\n{shown}"
    return message[: -len(tail)] if message.endswith(tail) else message


def pretty_json(text: str) -> str:
    """A call's JSON arguments, indented (as given when they are not JSON)."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, TypeError):
        return text


def diff_class(line: str) -> str:
    """The CSS class of one line of a unified diff."""
    if line.startswith(("+++", "---")):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    return {"+": "add", "-": "del"}.get(line[:1], "ctx")


def is_diff(preview: str | None, label: str | None) -> bool:
    """Whether a preview is a unified diff (by its label, or by its first lines)."""
    if not preview:
        return False
    if (label or "").lower() == "diff":
        return True
    head = preview.lstrip().splitlines()[:3]
    return any(line.startswith(("--- ", "@@ ")) for line in head)


def live_ids(ns: str, wid: str, cid: str, call: PendingApproval) -> dict[str, str]:
    """What a call's page polls `/call/live` with: the call as the page shows it."""
    seen, round_, n = seen_of(call), str(call.round), str(len(call.approvals))
    return {"ns": ns, "run": wid, "call": cid, "seen": seen, "round": round_, "n": n}


def words_of(d: DecisionRecord) -> str:
    """A recorded decision in a few words: `approved by bob`, `rejected by ann`, `expired`."""
    if d.expired:
        return "expired (its deadline passed)"
    verb = "approved" if d.kind == "approve" else "rejected"
    return f"{verb} by {d.approver or d.source}"


def seen_of(call: PendingApproval) -> str:
    """The digest of a call's arguments as the page shows them (what a decision says it saw)."""
    return call.arguments_sha256 or text_digest(call.arguments)


def local_path(path: str) -> str:
    """`path` when it is a path of this console (`/...`), else `/` (never another site)."""
    if path.startswith("/") and not path.startswith(("//", "/\\")) and "\\" not in path:
        return path
    return "/"


def _transcript(snap: RunSnapshot, last: int = 12) -> list[tuple[str, str]]:
    """The run's recent items as (who, text) lines."""
    lines: list[tuple[str, str]] = []
    for given in snap.input_items[-3:]:
        content = given.get("content")
        lines.append((str(given.get("role", "input")), _text(content)))
    for item in snap.new_items[-last:]:
        raw = item.raw_item
        if item.type == "message_output_item":
            lines.append((item.agent_name, _text(raw.get("content"))))
        elif item.type in ("tool_call_item", "handoff_call_item"):
            args = _readable_json(str(raw.get("arguments") or ""))
            lines.append((item.agent_name, f"calls {raw.get('name')}({args})"))
        elif item.type in ("tool_call_output_item", "handoff_output_item"):
            lines.append(("tool", _text(raw.get("output"))))
    return [(who, text if len(text) <= 500 else text[:500] + "…") for who, text in lines]


def _readable_json(text: str) -> str:
    """JSON text with its escapes as the characters they stand for (as given, when not JSON).

    So that Korean, Chinese and emoji read as themselves, not as escape codes.
    """
    try:
        return json.dumps(json.loads(text), ensure_ascii=False)
    except ValueError:
        return text


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict)
        ).strip()
    return json.dumps(content, default=str, ensure_ascii=False)
