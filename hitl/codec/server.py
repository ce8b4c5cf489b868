"""The remote codec server (`/encode`, `/decode`) for the `temporal` CLI and the Web UI.

A Starlette app; CORS admits the origins given (the Temporal UI's, e.g.
`http://127.0.0.1:8233`) and nothing else.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from temporalio.api.common.v1 import Payloads
from temporalio.converter import PayloadCodec

MAX_BODY_BYTES = 8 * 1024 * 1024


def codec_app(codec: PayloadCodec, cors_origins: tuple[str, ...] = ()) -> Any:
    """The codec server as an ASGI app."""

    async def work(request: Request) -> Response:
        if int(request.headers.get("content-length") or 0) > MAX_BODY_BYTES:
            return PlainTextResponse("payloads too large", status_code=413)
        body = await request.body()
        try:
            payloads = json_format.Parse(body or b"{}", Payloads())
            fn = codec.encode if request.url.path.endswith("/encode") else codec.decode
            result = Payloads(payloads=await fn(list(payloads.payloads)))
        except Exception as exc:  # a malformed request, a wrong key
            return PlainTextResponse(str(exc)[:500], status_code=400)
        return JSONResponse(json_format.MessageToDict(result))

    routes = [
        Route("/{prefix:path}/encode", work, methods=["POST"]),
        Route("/{prefix:path}/decode", work, methods=["POST"]),
        Route("/encode", work, methods=["POST"]),
        Route("/decode", work, methods=["POST"]),
    ]
    middleware = [
        Middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["POST", "OPTIONS"],
            allow_headers=["content-type", "x-namespace", "authorization"],
        )
    ]
    return Starlette(routes=routes, middleware=middleware)
