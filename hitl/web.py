"""Serving our web apps (the approval console, the codec server) with uvicorn.

Needs the `console` extra (Starlette, uvicorn, Jinja2).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

from hitl.errors import UserError
from hitl.extras import require_extra


def require_web(what: str = "the approval console") -> None:
    """A one-line `UserError` naming the `console` extra when any of its packages is missing."""
    require_extra(
        "console",
        what,
        "starlette",
        "uvicorn",
        "jinja2",
        "python_multipart",  # Starlette's form parsing
        "cryptography",  # signing decisions, the codec
    )


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: any free one), so the port is known before serving."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    return sock


class BackgroundServer:
    """An ASGI app served by uvicorn in a daemon thread (with its own event loop).

    `server_address` is `(host, port)` as bound; `shutdown()` stops it and waits.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        self.sock = bind(host, port)
        self.server_address: tuple[str, int] = self.sock.getsockname()[:2]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, daemon=True, name="hitl-web")
        self.thread.start()

    def _run(self) -> None:
        asyncio.run(self.server.serve(sockets=[self.sock]))

    @property
    def url(self) -> str:
        """The base URL it answers on."""
        host, port = self.server_address
        return f"http://{host}:{port}"

    def shutdown(self) -> None:
        """Stop serving and wait for the thread."""
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


class LoopServer:
    """An ASGI app served by uvicorn as a task of the running event loop.

    For apps that share the loop's objects (the console's Temporal clients). `url` is known
    at once; `stop()` ends it; `wait()` serves until it ends.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        self.sock = bind(host, port)
        self.server_address: tuple[str, int] = self.sock.getsockname()[:2]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.task = asyncio.get_running_loop().create_task(self.server.serve([self.sock]))

    @property
    def url(self) -> str:
        """The base URL it answers on."""
        host, port = self.server_address
        return f"http://{host}:{port}"

    async def wait(self) -> None:
        """Serve until stopped."""
        await self.task

    async def stop(self) -> None:
        """Stop serving."""
        self.server.should_exit = True
        await self.task
        self.sock.close()
