"""A fake Discord: REST under `/api/v10` and a gateway websocket at `/gateway` (aiohttp).

discord.py logs in (`/users/@me`, `/oauth2/applications/@me`), asks `/gateway/bot` where to
connect, gets HELLO, IDENTIFYs and gets READY; `fake.dispatch("MESSAGE_CREATE", d)` then pushes
an event to every connected client. Channels for `GET /channels/{id}` live in
`fake.channels`. `POST /channels/{id}/messages` is scriptable like the other fakes
("429:1.5", "429g:1" for a global limit, "403", "404", "drop", "empty" for a spent bucket),
and honours `nonce` + `enforce_nonce` as Discord does. uvicorn here has no websocket support,
and discord.py brings aiohttp, so this fake is an aiohttp app.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web


@dataclass
class Call:
    channel: str
    body: dict[str, Any]
    at: float
    ok: bool = False


@dataclass
class FakeDiscord:
    token: str
    bot_id: str = "900000000000000001"
    channels: dict[str, dict[str, Any]] = field(default_factory=dict)
    threads_asked: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    typing: list[tuple[str, float]] = field(default_factory=list)  # (channel, when) triggered
    no_threads: set[str] = field(default_factory=set)  # channels where threads are refused
    calls: list[Call] = field(default_factory=list)
    scripts: deque[str] = field(default_factory=deque)
    identified: threading.Event = field(default_factory=threading.Event)
    _sockets: list[web.WebSocketResponse] = field(default_factory=list)
    _nonces: dict[str, dict[str, Any]] = field(default_factory=dict)
    messages: dict[str, tuple[str, str]] = field(default_factory=dict)  # id → (channel, content)
    edits: list[Call] = field(default_factory=list)  # PATCHes of a message's content
    _ids: Any = field(default_factory=lambda: itertools.count(1_200_000_000_000_000_000))
    _seq: Any = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None
    port: int = 0

    # --- what tests use ---

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.base}/api/v10"

    def script(self, *answers: str) -> None:
        with self._lock:
            self.scripts.extend(answers)

    def sent(self, channel: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [
                c.body for c in self.calls if c.ok and (channel is None or c.channel == channel)
            ]

    def shown(self, channel: str) -> list[str]:
        """What the channel shows now: each message's current content, oldest first."""
        with self._lock:
            found = sorted(
                (int(mid), text) for mid, (ch, text) in self.messages.items() if ch == channel
            )
        return [text for _, text in found]

    def dispatch(self, event: str, data: dict[str, Any]) -> None:
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self._dispatch(event, data), self._loop).result(5)

    # --- REST ---

    def _user(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "username": "hermes",
            "discriminator": "0",
            "global_name": None,
            "avatar": None,
            "bot": True,
            "flags": 0,
        }

    def _authorised(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bot {self.token}"

    async def me(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        return _json(self._user())

    async def application(self, request: web.Request) -> web.Response:
        return _json(
            {
                "id": "900000000000000002",
                "name": "hermes",
                "icon": None,
                "description": "",
                "bot_public": True,
                "bot_require_code_grant": False,
                "owner": {**self._user(), "id": "900000000000000003", "bot": False},
                "verify_key": "0" * 64,
                "flags": 0,
                "team": None,
            }
        )

    async def gateway_bot(self, request: web.Request) -> web.Response:
        return _json(
            {
                "url": f"ws://127.0.0.1:{self.port}/gateway",
                "shards": 1,
                "session_start_limit": {
                    "total": 1000,
                    "remaining": 999,
                    "reset_after": 0,
                    "max_concurrency": 1,
                },
            }
        )

    async def channel(self, request: web.Request) -> web.Response:
        found = self.channels.get(request.match_info["channel"])
        if found is None:
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        return _json(found)

    async def trigger_typing(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.json_response({"message": "401: Unauthorized", "code": 0}, status=401)
        with self._lock:
            self.typing.append((request.match_info["channel"], time.time()))
        return web.Response(status=204)

    async def create_thread(self, request: web.Request) -> web.Response:
        """POST /channels/{id}/threads: a public thread under a known text channel."""
        if not self._authorised(request):
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        parent = request.match_info["channel"]
        body = await request.json()
        with self._lock:
            self.threads_asked.append((parent, body))
        found = self.channels.get(parent)
        if found is None:
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        if parent in self.no_threads:
            return _json({"message": "Missing Permissions", "code": 50013}, status=403)
        thread = thread_channel(str(next(self._ids)), parent, str(found.get("guild_id")))
        thread["name"] = body.get("name")
        self.channels[thread["id"]] = thread
        return _json(thread, status=201)

    async def create_message(self, request: web.Request) -> web.StreamResponse:
        if not self._authorised(request):
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        channel = request.match_info["channel"]
        body = await request.json()
        call = Call(channel, body, time.time())
        with self._lock:
            self.calls.append(call)
            answer = self.scripts.popleft() if self.scripts else "ok"
            nonce = body.get("nonce") if body.get("enforce_nonce") else None
            if nonce is not None and nonce in self._nonces and answer == "ok":
                return _json(self._nonces[nonce])
        if answer == "drop":
            response = web.StreamResponse(headers={"Content-Length": "4096"})
            await response.prepare(request)
            await response.write(b'{"id": "12')
            assert request.transport is not None
            request.transport.close()
            return response
        if answer.startswith("429"):
            wait = float(answer.split(":", 1)[1]) if ":" in answer else 1.0
            return _json(
                {
                    "message": "You are being rate limited.",
                    "retry_after": wait,
                    "global": answer.startswith("429g"),
                },
                status=429,
                headers={"Retry-After": str(int(wait) + 1)},
            )
        if answer == "403":
            return _json(
                {"message": "Cannot send messages to this user", "code": 50007}, status=403
            )
        if answer == "404":
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        if answer == "500":
            return _json({"message": "Internal Server Error", "code": 0}, status=500)
        message = {
            "id": str(next(self._ids)),
            "channel_id": channel,
            "content": body.get("content", ""),
            "author": self._user(),
            "type": 19 if body.get("message_reference") else 0,
            "timestamp": "2026-01-01T00:00:00.000000+00:00",
        }
        call.ok = True
        with self._lock:
            if nonce is not None:
                self._nonces[nonce] = message
            self.messages[message["id"]] = (channel, str(message["content"]))
        remaining = "0" if answer == "empty" else "4"
        headers = {
            "X-RateLimit-Bucket": f"bucket-{channel}",
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": remaining,
            "X-RateLimit-Reset-After": "1.5",
        }
        return _json(message, headers=headers)

    async def edit_message(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        channel, number = request.match_info["channel"], request.match_info["message"]
        body = await request.json()
        with self._lock:
            if self.messages.get(number, ("", ""))[0] != channel:
                return _json({"message": "Unknown Message", "code": 10008}, status=404)
            self.messages[number] = (channel, str(body.get("content", "")))
            self.edits.append(Call(channel, {**body, "id": number}, time.time(), ok=True))
        message = {"id": number, "channel_id": channel, "content": body.get("content", ""),
                   "author": self._user(), "type": 0,
                   "edited_timestamp": "2026-01-01T00:00:01.000000+00:00"}  # fmt: skip
        return _json(message)

    # --- the gateway ---

    async def gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json({"op": 10, "d": {"heartbeat_interval": 41250}})
        self._sockets.append(ws)
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                if frame.get("op") == 1:
                    await ws.send_json({"op": 11})
                elif frame.get("op") == 2:
                    await ws.send_json(self._ready())
                    self.identified.set()
        finally:
            self._sockets.remove(ws)
        return ws

    def _ready(self) -> dict[str, Any]:
        return {
            "op": 0,
            "t": "READY",
            "s": next(self._seq),
            "d": {
                "v": 10,
                "user": self._user(),
                "guilds": [],
                "private_channels": [],
                "relationships": [],
                "session_id": "fake-session",
                "resume_gateway_url": f"ws://127.0.0.1:{self.port}/gateway",
                "application": {"id": "900000000000000002", "flags": 0},
            },
        }

    async def _dispatch(self, event: str, data: dict[str, Any]) -> None:
        frame = {"op": 0, "t": event, "s": next(self._seq), "d": data}
        for ws in list(self._sockets):
            await ws.send_str(json.dumps(frame))

    # --- lifecycle ---

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v10/users/@me", self.me)
        app.router.add_get("/api/v10/oauth2/applications/@me", self.application)
        app.router.add_get("/api/v10/gateway/bot", self.gateway_bot)
        app.router.add_get("/api/v10/gateway", self.gateway_bot)
        app.router.add_get("/api/v10/channels/{channel}", self.channel)
        app.router.add_post("/api/v10/channels/{channel}/messages", self.create_message)
        app.router.add_post("/api/v10/channels/{channel}/threads", self.create_thread)
        app.router.add_patch("/api/v10/channels/{channel}/messages/{message}", self.edit_message)
        app.router.add_post("/api/v10/channels/{channel}/typing", self.trigger_typing)
        app.router.add_get("/gateway", self.gateway)
        return app

    def __enter__(self) -> FakeDiscord:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = int(sock.getsockname()[1])
        loop = asyncio.new_event_loop()
        started = threading.Event()

        async def main() -> None:
            self._runner = web.AppRunner(self.app(), access_log=None)
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
        if not started.wait(10):
            raise RuntimeError("the fake Discord did not start")
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


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """JSON as Discord sends it: `Content-Type: application/json` exactly (discord.py checks)."""
    return web.Response(
        body=json.dumps(data).encode(),
        status=status,
        headers=headers,
        content_type="application/json",
    )


def text_channel(channel_id: str, guild_id: str, name: str = "general") -> dict[str, Any]:
    """A guild text channel object, as GET /channels/{id} returns it."""
    return {
        "id": channel_id,
        "type": 0,
        "guild_id": guild_id,
        "name": name,
        "position": 0,
        "permission_overwrites": [],
        "nsfw": False,
        "parent_id": None,
        "topic": None,
        "last_message_id": None,
        "rate_limit_per_user": 0,
        "flags": 0,
    }


def thread_channel(thread_id: str, parent_id: str, guild_id: str) -> dict[str, Any]:
    """A public thread object, as GET /channels/{id} returns it."""
    return {
        "id": thread_id,
        "type": 11,
        "guild_id": guild_id,
        "parent_id": parent_id,
        "owner_id": "300000000000000001",
        "name": "a thread",
        "last_message_id": None,
        "rate_limit_per_user": 0,
        "message_count": 1,
        "member_count": 2,
        "total_message_sent": 1,
        "flags": 0,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 1440,
            "archive_timestamp": "2026-01-01T00:00:00.000000+00:00",
            "locked": False,
            "create_timestamp": "2026-01-01T00:00:00.000000+00:00",
        },
    }
