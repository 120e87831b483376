"""A fake WhatsApp Cloud API (Graph API) on 127.0.0.1: messages, media lookup and download.

`POST /v23.0/{phone_number_id}/messages` records each call and answers a wamid; scripts per
recipient say otherwise: `fake.script("16505551234", "131047", "130429", "500", "drop")`, each
call to that recipient taking the next answer ("ok" when none is left). Recipients in
`fake.window_closed` always answer 131047 (outside the 24-hour window). `GET /v23.0/{media}`
answers a download URL on this server (`/media/{id}`) for ids in `fake.media`; both need the
bearer token, as Meta's do.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.server import DropResponse, Served

VERSION = "v23.0"
ERRORS = {
    "131047": (400, "Re-engagement message"),
    "131056": (400, "(#131056) (Business Account, Consumer Account) pair rate limit hit"),
    "130429": (400, "(#130429) Rate limit hit"),
    "131026": (400, "Message Undeliverable"),
    "131000": (500, "Something went wrong"),
}


@dataclass
class Call:
    path: str
    body: dict[str, Any]
    authorization: str
    at: float
    ok: bool = False


@dataclass
class FakeGraph:
    token: str
    phone_number_id: str
    calls: list[Call] = field(default_factory=list)
    media: dict[str, tuple[bytes, str]] = field(default_factory=dict)  # id → (bytes, mime)
    downloads: list[str] = field(default_factory=list)
    window_closed: set[str] = field(default_factory=set)
    download_base: str | None = None  # where lookups say media are (default: this server)
    scripts: dict[str, deque[str]] = field(default_factory=lambda: defaultdict(deque))
    served: Served | None = None
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def script(self, recipient: str, *answers: str) -> None:
        with self._lock:
            self.scripts[recipient].extend(answers)

    @property
    def api_base(self) -> str:
        assert self.served is not None
        return f"{self.served.base}/{VERSION}"

    def sent(self, to: str | None = None) -> list[dict[str, Any]]:
        """Messages that were accepted, in order."""
        with self._lock:
            return [c.body for c in self.calls if c.ok and (to is None or c.body.get("to") == to)]

    def attempts(self, to: str) -> int:
        with self._lock:
            return sum(1 for c in self.calls if c.body.get("to") == to)

    def texts(self, to: str) -> list[str]:
        return [str(b["text"]["body"]) for b in self.sent(to)]

    def _authorised(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.token}"

    async def messages(self, request: Request) -> Response:
        if not self._authorised(request):
            return _error(401, 190, "Invalid OAuth access token.")
        if request.path_params["number"] != self.phone_number_id:
            return _error(400, 100, "Unsupported post request.")
        body = await request.json()
        to = str(body.get("to"))
        call = Call(request.url.path, body, request.headers.get("authorization", ""), time.time())
        with self._lock:
            self.calls.append(call)
            script = self.scripts[to]
            answer = script.popleft() if script else "ok"
            if to in self.window_closed:
                answer = "131047"
        if answer == "drop":
            return DropResponse()
        if answer in ERRORS:
            status, message = ERRORS[answer]
            return _error(status, int(answer), message)
        if answer == "500":
            return Response("upstream trouble", status_code=502)
        with self._lock:
            call.ok = True
            number = next(self._ids)
        wamid = f"wamid.FAKE{number:08d}"
        return JSONResponse(
            {
                "messaging_product": "whatsapp",
                "contacts": [{"input": to, "wa_id": to}],
                "messages": [{"id": wamid}],
            }
        )

    async def lookup(self, request: Request) -> Response:
        if not self._authorised(request):
            return _error(401, 190, "Invalid OAuth access token.")
        media_id = request.path_params["media"]
        if media_id not in self.media:
            return _error(400, 100, "Unsupported get request.")
        data, mime = self.media[media_id]
        assert self.served is not None
        base = self.download_base or self.served.base
        return JSONResponse(
            {
                "messaging_product": "whatsapp",
                "url": f"{base}/media/{media_id}?ext=1&hash=abc",
                "mime_type": mime,
                "sha256": "0" * 64,
                "file_size": len(data),
                "id": media_id,
            }
        )

    async def download(self, request: Request) -> Response:
        media_id = request.path_params["media"]
        if not self._authorised(request):
            return Response(status_code=401)
        with self._lock:
            self.downloads.append(media_id)
        data, mime = self.media[media_id]
        return Response(data, media_type=mime)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route(f"/{VERSION}/{{number}}/messages", self.messages, methods=["POST"]),
                Route(f"/{VERSION}/{{media}}", self.lookup, methods=["GET"]),
                Route("/media/{media}", self.download, methods=["GET"]),
            ]
        )

    def __enter__(self) -> FakeGraph:
        self.served = Served(self.app())
        self.served.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.served is not None
        self.served.stop()


def _error(status: int, code: int, message: str) -> Response:
    body = {
        "error": {
            "message": message,
            "type": "OAuthException",
            "code": code,
            "error_data": {"messaging_product": "whatsapp", "details": message},
            "fbtrace_id": "AbCdEfGhIjK",
        }
    }
    return JSONResponse(body, status_code=status)
