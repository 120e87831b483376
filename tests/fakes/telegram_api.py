"""A fake Telegram Bot API: `/bot<token>/<method>`, recording calls, scriptable per method.

Script answers with `fake.script("sendMessage", "429:2", "403", "drop", "migrate:-1009",
"hang:20")` ("hang:20": ok after 20 s): each call of that method takes the next one ("ok" when
the script is empty). Chats in `fake.blocked` always answer 403 (the user blocked the bot).
getUpdates serves `fake.updates` with long polling; confirmed updates (below the offset) are
forgotten, as Telegram does. Sent messages are kept (`shown`: chat → what the chat shows,
in order); editMessageText changes them (recorded in `edits`), answering "message is not
modified" and "message to edit not found" as Telegram does.
"""

from __future__ import annotations

import asyncio
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


@dataclass
class FakeTelegram:
    token: str
    calls: list[Call] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    blocked: set[str] = field(default_factory=set)
    forums: set[str] = field(default_factory=set)  # chats where createForumTopic works
    files: dict[str, bytes] = field(default_factory=dict)  # file_id → content (getFile)
    scripts: dict[str, deque[str]] = field(default_factory=lambda: defaultdict(deque))
    served: Served | None = None
    messages: dict[tuple[str, int], str] = field(default_factory=dict)  # (chat, id) → text
    edits: list[Call] = field(default_factory=list)  # editMessageText calls that changed text
    _ids: Any = field(default_factory=lambda: itertools.count(1000))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def script(self, method: str, *answers: str) -> None:
        with self._lock:
            self.scripts[method].extend(answers)

    def add_update(self, update: dict[str, Any]) -> None:
        with self._lock:
            self.updates.append(update)

    def sent(self, chat_id: str | None = None) -> list[dict[str, Any]]:
        """sendMessage calls that succeeded, in order."""
        with self._lock:
            return [
                c.params
                for c in self.calls
                if c.method == "sendMessage"
                and c.params.get("_ok")
                and (chat_id is None or str(c.params.get("chat_id")) == chat_id)
            ]

    def shown(self, chat_id: str) -> list[str]:
        """What the chat shows now: each message's current text, oldest first."""
        with self._lock:
            found = sorted(
                (mid, text) for (chat, mid), text in self.messages.items() if chat == chat_id
            )
        return [text for _, text in found]

    def methods(self) -> list[str]:
        with self._lock:
            return [c.method for c in self.calls]

    @property
    def api_base(self) -> str:
        assert self.served is not None
        return f"{self.served.base}/bot"

    # --- the server ---

    async def _params(self, request: Request) -> dict[str, Any]:
        kind = request.headers.get("content-type", "")
        if "json" in kind:
            body = await request.body()
            return dict(json.loads(body)) if body else {}
        body = (await request.body()).decode()
        params: dict[str, Any] = {}
        for key, text in parse_qsl(body, keep_blank_values=True):
            try:
                params[key] = json.loads(text)
            except ValueError:
                params[key] = text
        return params

    async def endpoint(self, request: Request) -> Response:
        if request.path_params["token"] != self.token:
            return JSONResponse(
                {"ok": False, "error_code": 401, "description": "Unauthorized"}, status_code=401
            )
        method = request.path_params["method"]
        params = await self._params(request)
        call = Call(method, params, time.time())
        with self._lock:
            self.calls.append(call)
            answer = self.scripts[method].popleft() if self.scripts[method] else "ok"
        if method == "getUpdates":
            return await self._get_updates(params)
        if answer.startswith("hang:"):  # a call that is slow to answer (then answers ok)
            await asyncio.sleep(float(answer.split(":", 1)[1]))
            answer = "ok"
        return self._answer(method, params, answer)

    def _answer(self, method: str, params: dict[str, Any], answer: str) -> Response:
        if answer == "drop":
            return DropResponse()
        if answer.startswith("429"):
            wait = int(answer.split(":", 1)[1]) if ":" in answer else 1
            return _error(429, f"Too Many Requests: retry after {wait}", {"retry_after": wait})
        if answer == "403" or str(params.get("chat_id")) in self.blocked:
            return _error(403, "Forbidden: bot was blocked by the user")
        if answer.startswith("migrate:"):
            new = int(answer.split(":", 1)[1])
            return _error(
                400,
                "Bad Request: group chat was upgraded to a supergroup chat",
                {"migrate_to_chat_id": new},
            )
        if answer == "500":
            return _error(500, "Internal Server Error")
        if method == "sendMessage":
            params["_ok"] = True
            chat = params.get("chat_id")
            result = {
                "message_id": next(self._ids),
                "date": int(time.time()),
                "chat": {"id": chat, "type": "private" if int(chat) > 0 else "supergroup"},
                "text": params.get("text", ""),
            }
            with self._lock:
                self.messages[(str(chat), result["message_id"])] = str(result["text"])
            return JSONResponse({"ok": True, "result": result})
        if method == "editMessageText":
            return self._edit(params)
        if method == "createForumTopic":
            chat = str(params.get("chat_id"))
            if chat not in self.forums:
                return _error(400, "Bad Request: the chat is not a forum")
            topic = {"message_thread_id": next(self._ids), "name": params.get("name"),
                     "icon_color": 7322096}  # fmt: skip
            return JSONResponse({"ok": True, "result": topic})
        if method == "getFile":
            file_id = str(params.get("file_id"))
            if file_id not in self.files:
                return _error(400, "Bad Request: invalid file_id")
            path = f"documents/{file_id}.bin"
            found = {"file_id": file_id, "file_unique_id": "u", "file_path": path}
            return JSONResponse(
                {"ok": True, "result": {**found, "file_size": len(self.files[file_id])}}
            )
        if method == "getMe":
            user = {"id": int(self.token.split(":")[0]), "is_bot": True, "first_name": "Fake"}
            return JSONResponse({"ok": True, "result": {**user, "username": "fake_bot"}})
        return JSONResponse({"ok": True, "result": True})

    def _edit(self, params: dict[str, Any]) -> Response:
        chat, number = str(params.get("chat_id")), int(params.get("message_id") or 0)
        text = str(params.get("text", ""))
        with self._lock:
            if (chat, number) not in self.messages:
                return _error(400, "Bad Request: message to edit not found")
            if self.messages[(chat, number)] == text:
                return _error(
                    400,
                    "Bad Request: message is not modified: specified new message content and "
                    "reply markup are exactly the same as a current content and reply markup "
                    "of the message",
                )
            self.messages[(chat, number)] = text
            self.edits.append(Call("editMessageText", dict(params), time.time()))
        kind = "private" if int(chat) > 0 else "supergroup"
        result = {"message_id": number, "date": int(time.time()), "edit_date": int(time.time()),
                  "chat": {"id": int(chat), "type": kind}, "text": text}  # fmt: skip
        return JSONResponse({"ok": True, "result": result})

    async def _get_updates(self, params: dict[str, Any]) -> Response:
        offset = int(params.get("offset") or 0)
        deadline = time.monotonic() + min(float(params.get("timeout") or 0), 0.5)
        while True:
            with self._lock:
                self.updates = [u for u in self.updates if u["update_id"] >= offset]
                ready = list(self.updates)
            if ready or time.monotonic() >= deadline:
                # ASCII-escaped, so an update can carry what UTF-8 cannot (a lone surrogate)
                answer = json.dumps({"ok": True, "result": ready})
                return Response(answer, media_type="application/json")
            await asyncio.sleep(0.02)

    async def download(self, request: Request) -> Response:
        if request.path_params["token"] != self.token:
            return Response(status_code=401)
        file_id = request.path_params["path"].rsplit("/", 1)[-1].removesuffix(".bin")
        if file_id not in self.files:
            return Response(status_code=404)
        return Response(self.files[file_id], media_type="application/octet-stream")

    def app(self) -> Any:
        routes = [
            Route("/file/bot{token}/{path:path}", self.download, methods=["GET"]),
            Route("/bot{token}/{method}", self.endpoint, methods=["GET", "POST"]),
        ]
        return Starlette(routes=routes)

    def __enter__(self) -> FakeTelegram:
        self.served = Served(self.app())
        self.served.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.served is not None
        self.served.stop()


def _error(code: int, description: str, parameters: dict[str, Any] | None = None) -> Response:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = parameters
    return JSONResponse(body, status_code=code)
