"""A fake Slack Web API (`/api/<method>`): chat.postMessage and chat.postEphemeral, scriptable.

`fake.script("chat.postMessage", "429:2", "403", "drop", "channel_not_found")`: each call
takes the next answer ("ok" when empty). 429 answers carry `Retry-After`, as Slack's do.
Posted messages are kept (`shown`); chat.update changes them (`message_not_found` for one
that was never posted), and assistant.threads.setStatus is recorded like any call.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.server import DropResponse, Served


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    at: float
    ok: bool = False


@dataclass
class FakeSlack:
    token: str
    calls: list[Call] = field(default_factory=list)
    scripts: dict[str, deque[str]] = field(default_factory=lambda: defaultdict(deque))
    served: Served | None = None
    files: dict[str, bytes] = field(default_factory=dict)  # name → content (url_private)
    downloads: list[tuple[str, str | None]] = field(default_factory=list)  # (name, Authorization)
    messages: dict[tuple[str, str], str] = field(default_factory=dict)  # (channel, ts) → text
    _ts: Any = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def script(self, method: str, *answers: str) -> None:
        with self._lock:
            self.scripts[method].extend(answers)

    def sent(self, method: str = "chat.postMessage") -> list[dict[str, Any]]:
        with self._lock:
            return [c.params for c in self.calls if c.method == method and c.ok]

    def shown(self, channel: str) -> list[str]:
        """What the channel shows now: each message's current text, oldest first."""
        with self._lock:
            found = sorted((ts, text) for (ch, ts), text in self.messages.items() if ch == channel)
        return [text for _, text in found]

    @property
    def api_base(self) -> str:
        assert self.served is not None
        return f"{self.served.base}/api/"

    async def endpoint(self, request: Request) -> Response:
        method = request.path_params["method"]
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return JSONResponse({"ok": False, "error": "invalid_auth"})
        body = await request.body()
        if "json" in request.headers.get("content-type", ""):
            params = dict(json.loads(body)) if body else {}
        else:
            params = dict(parse_qsl(body.decode(), keep_blank_values=True))
        call = Call(method, params, time.time())
        with self._lock:
            self.calls.append(call)
            answer = self.scripts[method].popleft() if self.scripts[method] else "ok"
        if answer == "drop":
            return DropResponse()
        if answer.startswith("429"):
            wait = answer.split(":", 1)[1] if ":" in answer else "1"
            return JSONResponse(
                {"ok": False, "error": "ratelimited"},
                status_code=429,
                headers={"Retry-After": wait},
            )
        if answer == "403":
            return JSONResponse({"ok": False, "error": "restricted_action"}, status_code=403)
        if answer == "500":
            return JSONResponse({"ok": False, "error": "internal_error"}, status_code=500)
        if answer != "ok":
            return JSONResponse({"ok": False, "error": answer})
        if method == "chat.update":
            return self._update(call, params)
        call.ok = True
        ts = f"{1_700_000_000 + next(self._ts)}.000100"
        if method == "chat.postMessage":
            with self._lock:
                self.messages[(str(params.get("channel")), ts)] = str(params.get("text"))
        if method == "chat.postEphemeral":
            return JSONResponse({"ok": True, "message_ts": ts})
        message = {"type": "message", "text": params.get("text"), "ts": ts, "bot_id": "BFAKE"}
        return JSONResponse(
            {"ok": True, "channel": params.get("channel"), "ts": ts, "message": message}
        )

    def _update(self, call: Call, params: dict[str, Any]) -> Response:
        key = (str(params.get("channel")), str(params.get("ts")))
        with self._lock:
            if key not in self.messages:
                return JSONResponse({"ok": False, "error": "message_not_found"})
            self.messages[key] = str(params.get("text"))
            call.ok = True
        return JSONResponse(
            {"ok": True, "channel": key[0], "ts": key[1], "text": params.get("text")}
        )

    async def download(self, request: Request) -> Response:
        with self._lock:
            self.downloads.append(
                (request.path_params["name"], request.headers.get("authorization"))
            )
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return Response(b"<html>sign in</html>", status_code=302, headers={"location": "/"})
        name = request.path_params["name"]
        if name not in self.files:
            return Response(status_code=404)
        return Response(self.files[name], media_type="application/octet-stream")

    def app(self) -> Any:
        return Starlette(
            routes=[
                Route("/files-pri/{name}", self.download, methods=["GET"]),
                Route("/api/{method}", self.endpoint, methods=["POST", "GET"]),
            ]
        )

    def __enter__(self) -> FakeSlack:
        self.served = Served(self.app())
        self.served.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.served is not None
        self.served.stop()
