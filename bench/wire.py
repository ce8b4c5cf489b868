"""A scripted model behind the OpenAI wire format: `python -m bench.wire --port P`.

The benchmark's headline runs both sides on their real model path: our `OpenAIModel` and the
peer's default OpenAI Responses model, each through the real `openai` client, pointed here with
`OPENAI_BASE_URL`. This server answers `POST /v1/responses` at once with the benchmark's script
(the same as `bench/ours/agents.py` and `bench/peer/model.py`): without a tool output yet, call
`refund` for the order in the user's message; with one, answer. With `turns=N` in the message,
call `fetch_chunk` N times, then answer.

A plain asyncio HTTP/1.1 server with keep-alive (no framework: it runs in its own process, so its
CPU is counted on neither side, and it adds as little latency as it can). It counts requests and
request bytes per model name and reports them on `GET /stats`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import signal
from typing import Any

_ids = itertools.count(1)
STATS: dict[str, Any] = {"requests": 0, "request_bytes": 0}


def _user_text(items: list[Any]) -> str:
    for item in items:
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "".join(str(p.get("text") or "") for p in content or [] if isinstance(p, dict))
    return ""


def _call(name: str, arguments: dict[str, Any], n: int) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{n}",
        "call_id": f"call_{name}_{n}",
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def _say(text: str, n: int) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{n}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def respond(body: dict[str, Any]) -> dict[str, Any]:
    """The script: a Responses API response object for this request."""
    raw = body.get("input")
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else list(raw or [])
    text = _user_text(items)
    outputs = [
        str(i.get("output"))
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]
    turns = re.search(r"turns=(\d+)", text)
    if turns:
        wanted = int(turns.group(1))
        out = (
            _say(f"Read {len(outputs)} chunks.", len(outputs))
            if len(outputs) >= wanted
            else _call("fetch_chunk", {"index": len(outputs)}, len(outputs))
        )
    elif outputs:
        out = _say(f"Done: {outputs[-1]}", len(outputs))
    else:
        order = re.search(r"\d+", text)
        out = _call("refund", {"order_id": int(order.group()) if order else 0}, 0)
    return {
        "id": f"resp_{next(_ids)}",
        "object": "response",
        "created_at": 1764000000,
        "status": "completed",
        "model": str(body.get("model") or "scripted"),
        "output": [out],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        },
    }


def _reply(status: int, payload: dict[str, Any]) -> bytes:
    body = json.dumps(payload).encode()
    reason = {200: "OK", 404: "Not Found", 400: "Bad Request"}.get(status, "Error")
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(":") for line in lines[1:] if line)
            }
            length = int(headers.get("content-length") or 0)
            raw = await reader.readexactly(length) if length else b""
            if method == "GET" and path.startswith("/stats"):
                writer.write(_reply(200, STATS))
            elif method == "POST" and path.split("?")[0].endswith("/responses"):
                STATS["requests"] += 1
                STATS["request_bytes"] += length
                try:
                    writer.write(_reply(200, respond(json.loads(raw or b"{}"))))
                except (ValueError, TypeError, AttributeError) as exc:
                    err = {"error": {"message": str(exc), "type": "invalid_request_error"}}
                    writer.write(_reply(400, err))
            else:
                writer.write(_reply(404, {"error": {"message": f"no route {path}"}}))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.wire")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    server = await asyncio.start_server(_serve, "127.0.0.1", args.port, backlog=512)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        print("worker ready", flush=True)  # the readiness line `bench.procs.Worker` waits for
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
