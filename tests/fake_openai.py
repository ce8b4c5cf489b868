"""A small HTTP server on 127.0.0.1 that speaks the OpenAI wire format with canned replies.

Tests queue replies (status, headers, JSON body) per endpoint; every request is recorded so a
test can assert what the real `openai` client sent.

It also keeps conversation state as OpenAI does: every response it serves is remembered with
the whole conversation up to it (what the request continued, its input, the reply's output), a
request may continue one (`previous_response_id`) or read and write a conversation made with
`POST /v1/conversations` (`conversation`), and each recorded request knows the conversation
the model saw (`Recorded.context`). A response the test `forget()`s (the provider's retention)
or never served is answered `400 previous_response_not_found`, an unknown conversation `404`,
without using a canned reply. With `respond`, replies are computed from that conversation
when none is queued.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit


@dataclass
class Reply:
    """One canned HTTP reply."""

    body: dict[str, Any]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    events: list[dict[str, Any]] | None = None
    """Served as server-sent events (a streamed answer) instead of `body`."""


@dataclass
class Recorded:
    """A request the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)
    """When the server received it (monotonic clock of the test process)."""
    query: dict[str, str] = field(default_factory=dict)
    context: list[dict[str, Any]] = field(default_factory=list)
    """A Responses request: the whole conversation the model saw (what it continued, then its
    input)."""
    status: int = 0
    """The status it was answered with."""


Responder = Callable[[list[dict[str, Any]]], Reply]
"""Computes a `/v1/responses` reply from the whole conversation the model sees."""


class FakeOpenAI:
    """Canned replies per path (`/v1/responses`, `/v1/chat/completions`)."""

    def __init__(self) -> None:
        self.replies: dict[str, deque[Reply]] = {}
        self.requests: list[Recorded] = []
        self._server: ThreadingHTTPServer | None = None
        self.lock = threading.Lock()
        self.stored: dict[str, list[dict[str, Any]]] = {}
        """Response id -> the whole conversation up to and including that response."""
        self.conversations: dict[str, list[dict[str, Any]]] = {}
        """Conversation id -> its items."""
        self.respond: Responder | None = None
        self._ids = 0

    def forget(self, *response_ids: str) -> None:
        """Drop stored responses (the provider's retention): continuing them is refused."""
        with self.lock:
            for rid in response_ids or list(self.stored):
                self.stored.pop(rid, None)

    def _continued(self, path: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], Reply]:
        """What a `/v1/responses` request continues, and its reply (canned or refused)."""
        prev, conv = body.get("previous_response_id"), body.get("conversation")
        if isinstance(conv, dict):
            conv = conv.get("id")
        given = body.get("input", [])
        items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given)
        if prev is not None and conv is not None:
            msg = "Mutually exclusive parameters: previous_response_id and conversation."
            return items, Reply(error_body(msg, "mutually_exclusive_parameters"), 400)
        if prev is not None and prev not in self.stored:
            msg = f"Previous response with id '{prev}' not found."
            return items, Reply(error_body(msg, "previous_response_not_found"), 400)
        if conv is not None and conv not in self.conversations:
            msg = f"Conversation with id '{conv}' not found."
            return items, Reply(error_body(msg, None, "invalid_request_error"), 404)
        before = self.stored[prev] if prev else self.conversations[conv] if conv else []
        context = [*before, *items]
        queue = self.replies.get(path)
        if queue:
            return context, queue.popleft()
        if self.respond is not None:
            return context, self.respond(context)
        return context, Reply({"error": {"message": f"no canned reply for {path}"}}, 500)

    def _remember(self, body: dict[str, Any], context: list[dict[str, Any]], reply: Reply) -> None:
        """Store a served response, and add it to its conversation."""
        served = reply.body
        if reply.events is not None:
            done = [e for e in reply.events if e.get("type") == "response.completed"]
            served = done[-1]["response"] if done else {}
        if reply.status != 200 or "id" not in served:
            return
        output = [{k: v for k, v in o.items() if k != "status"} for o in served.get("output", [])]
        self.stored[served["id"]] = [*context, *output]
        conv = body.get("conversation")
        if isinstance(conv, dict):
            conv = conv.get("id")
        if conv is not None:
            given = body.get("input", [])
            new = [{"role": "user", "content": given}] if isinstance(given, str) else given
            self.conversations[conv].extend([*new, *output])

    def _create_conversation(self, body: dict[str, Any]) -> Reply:
        self._ids += 1
        cid = f"conv_{self._ids}"
        self.conversations[cid] = list(body.get("items") or [])
        return Reply(
            {
                "id": cid,
                "object": "conversation",
                "created_at": int(time.time()),
                "metadata": body.get("metadata") or {},
            }
        )

    @property
    def base_url(self) -> str:
        assert self._server is not None
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}/v1"

    def queue(self, path: str, *replies: Reply) -> None:
        with self.lock:
            self.replies.setdefault(path, deque()).extend(replies)

    def requests_to(self, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.path == path]

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                url = urlsplit(self.path)
                path = url.path
                body = json.loads(raw or b"{}")
                with fake.lock:
                    recorded = Recorded(
                        path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        query=dict(parse_qsl(url.query)),
                    )
                    fake.requests.append(recorded)
                    reply: Reply | None
                    if path.endswith("/responses"):
                        recorded.context, reply = fake._continued(path, body)
                        fake._remember(body, recorded.context, reply)
                    elif path.endswith("/conversations"):
                        reply = fake._create_conversation(body)
                    else:
                        queue = fake.replies.get(path)
                        reply = queue.popleft() if queue else None
                    if reply is None:
                        reply = Reply({"error": {"message": f"no canned reply for {path}"}}, 500)
                    recorded.status = reply.status
                if reply.events is not None:
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    for event in reply.events:
                        if "type" in event and path.endswith("/responses"):
                            self.wfile.write(f"event: {event['type']}\n".encode())
                        self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                        self.wfile.flush()
                    if path.endswith("/chat/completions"):
                        self.wfile.write(b"data: [DONE]\n\n")
                    return
                data = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


@contextmanager
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()


# ----------------------------------------------------------------------------- canned bodies


def _usage_responses(inp: int = 10, out: int = 5) -> dict[str, Any]:
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": inp + out,
    }


def response_body(
    output: list[dict[str, Any]], rid: str = "resp_1", usage: tuple[int, int] = (10, 5)
) -> dict[str, Any]:
    """A Responses API response object; `usage` is (input, output) tokens."""
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": "gpt-test",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": _usage_responses(*usage),
    }


def responses_call(name: str, arguments: str | dict[str, Any], call_id: str) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": args,
        "status": "completed",
    }


def responses_text(text: str, mid: str = "msg_1") -> dict[str, Any]:
    return {
        "type": "message",
        "id": mid,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def chat_body(
    content: str | None = None,
    tool_calls: list[tuple[str, str | dict[str, Any], str]] | None = None,
    cid: str = "chatcmpl-1",
    usage: tuple[int, int] = (20, 7),
) -> dict[str, Any]:
    """A Chat Completions response object; `usage` is (prompt, completion) tokens."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for name, args, call_id in tool_calls
        ]
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "llama-test",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }


def error_body(
    message: str, code: str | None = None, kind: str = "invalid_request_error"
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code, "param": None}}


def responses_stream(text_parts: list[str], rid: str = "resp_s") -> list[dict[str, Any]]:
    """A streamed Responses answer: text deltas, then the completed response."""
    events: list[dict[str, Any]] = [
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": {**response_body([], rid), "status": "in_progress"},
        },
    ]
    for n, part in enumerate(text_parts, 1):
        events.append(
            {
                "type": "response.output_text.delta",
                "sequence_number": n,
                "item_id": "msg_s",
                "output_index": 0,
                "content_index": 0,
                "delta": part,
                "logprobs": [],
            }
        )
    events.append(
        {
            "type": "response.completed",
            "sequence_number": len(text_parts) + 1,
            "response": response_body([responses_text("".join(text_parts), "msg_s")], rid),
        }
    )
    return events


def chat_stream(text_parts: list[str], cid: str = "chatcmpl-s") -> list[dict[str, Any]]:
    """A streamed Chat Completions answer: content deltas, then usage."""
    base = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "llama-test",
    }
    chunks = [
        {
            **base,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": part}, "finish_reason": None}
            ],
        }
        for part in text_parts
    ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append(
        {
            **base,
            "choices": [],
            "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
        }
    )
    return chunks
