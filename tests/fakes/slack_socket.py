"""A fake Slack Socket Mode endpoint: `apps.connections.open` and the websocket it hands out.

`fake.push(payload)` sends an `events_api` envelope to the connected client; `fake.acks` holds
the envelope ids the client acknowledged. (aiohttp: uvicorn here has no websocket support.)
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web


@dataclass
class FakeSocketMode:
    app_token: str
    acks: list[str] = field(default_factory=list)
    connected: threading.Event = field(default_factory=threading.Event)
    port: int = 0
    _sockets: list[web.WebSocketResponse] = field(default_factory=list)
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    async def open(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.app_token}":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        return web.json_response({"ok": True, "url": f"ws://127.0.0.1:{self.port}/link"})

    async def link(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(json.dumps({"type": "hello", "num_connections": 1}))
        self._sockets.append(ws)
        self.connected.set()
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    data = json.loads(msg.data)
                    if "envelope_id" in data:
                        self.acks.append(str(data["envelope_id"]))
        finally:
            self._sockets.remove(ws)
        return ws

    def push(self, payload: dict[str, Any], kind: str = "events_api") -> str:
        envelope_id = f"env-{next(self._ids)}"
        frame = {
            "envelope_id": envelope_id,
            "type": kind,
            "payload": payload,
            "accepts_response_payload": kind != "events_api",
            "retry_attempt": 0,
            "retry_reason": "",
        }

        async def send() -> None:
            for ws in list(self._sockets):
                await ws.send_str(json.dumps(frame))

        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(send(), self._loop).result(5)
        return envelope_id

    def __enter__(self) -> FakeSocketMode:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = int(sock.getsockname()[1])
        loop = asyncio.new_event_loop()
        started = threading.Event()
        app = web.Application()
        app.router.add_post("/api/apps.connections.open", self.open)
        app.router.add_get("/link", self.link)

        async def main() -> None:
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            await web.SockSite(self._runner, sock).start()
            started.set()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(main())
            loop.run_forever()

        self._loop = loop
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None

        async def stop() -> None:
            for ws in list(self._sockets):
                await ws.close()
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
