"""Serving an ASGI app with uvicorn on 127.0.0.1 (or another local address; a free port) in a
background thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn
from starlette.responses import Response

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


class DropResponse(Response):
    """The connection is cut after the headers, mid-body (uvicorn closes an unfinished answer)."""

    def __init__(self) -> None:
        super().__init__(status_code=200)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", b"4096")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"ok": tr', "more_body": True})


class Served:
    """`with Served(app) as base:` — `base` is http://127.0.0.1:<port>."""

    def __init__(
        self, app: ASGIApp, *, port: int = 0, reuse_port: bool = False, host: str = "127.0.0.1"
    ) -> None:
        self.host = host  # another local address: a bridge the test made (tests/netns_kit.py)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        self.sock.bind((host, port))
        self.port = int(self.sock.getsockname()[1])
        config = uvicorn.Config(
            app, log_level="critical", access_log=False, lifespan="off", timeout_keep_alive=30
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the fake server did not start")
            time.sleep(0.01)
        return self.base

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
