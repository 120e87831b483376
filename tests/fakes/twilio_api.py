"""A fake Twilio REST API on 127.0.0.1: Messages.json (send) and MMS media, scriptable.

`fake.script("429", "21610", "500", "drop")`: each send takes the next answer ("ok" when
empty): a 429, a 400 with that Twilio error code, a 500, or a cut connection. Requests must
carry the account's basic auth, as Twilio's do. `fake.sign(url, form)` signs a webhook the
way Twilio does, with twilio's own RequestValidator.
"""

from __future__ import annotations

import base64
import itertools
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.server import DropResponse, Served

ACCOUNT = "AC" + "0123456789abcdef" * 2
TOKEN = "twilio-auth-token-Secret-0123456"
NUMBER = "+15005550006"


def message_sid(n: int) -> str:
    return f"SM{n:032x}"


@dataclass
class FakeTwilio:
    account: str = ACCOUNT
    token: str = TOKEN
    served: Served | None = None
    messages: list[dict[str, str]] = field(default_factory=list)  # accepted sends
    attempts: int = 0
    answers: deque[str] = field(default_factory=deque)
    media: dict[str, tuple[bytes, str]] = field(default_factory=dict)  # ME… → (bytes, type)
    downloads: list[tuple[str, str | None]] = field(default_factory=list)  # (ME…, Authorization)
    _sids: Any = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def api_base(self) -> str:
        assert self.served is not None
        return self.served.base

    def script(self, *answers: str) -> None:
        with self._lock:
            self.answers.extend(answers)

    def sent(self, to: str | None = None) -> list[dict[str, str]]:
        with self._lock:
            return [m for m in self.messages if to is None or m.get("To") == to]

    def media_url(self, message: str, media: str) -> str:
        account = f"{self.api_base}/2010-04-01/Accounts/{self.account}"
        return f"{account}/Messages/{message}/Media/{media}"

    def sign(self, url: str, form: dict[str, str], token: str | None = None) -> str:
        from twilio.request_validator import RequestValidator

        return str(RequestValidator(token or self.token).compute_signature(url, form))

    def _authorised(self, request: Request) -> bool:
        expected = base64.b64encode(f"{self.account}:{self.token}".encode()).decode()
        return request.headers.get("authorization") == f"Basic {expected}"

    async def create(self, request: Request) -> Response:
        if request.path_params["account"] != self.account or not self._authorised(request):
            return JSONResponse(
                {"code": 20003, "message": "Authenticate", "status": 401}, status_code=401
            )
        params = dict(parse_qsl((await request.body()).decode(), keep_blank_values=True))
        with self._lock:
            self.attempts += 1
            answer = self.answers.popleft() if self.answers else "ok"
            if answer == "ok":
                self.messages.append(params)
                sid = message_sid(next(self._sids))
        if answer == "drop":
            return DropResponse()
        if answer == "429":
            return JSONResponse(
                {"code": 20429, "message": "Too Many Requests", "status": 429}, status_code=429
            )
        if answer == "500":
            return JSONResponse({"code": 20500, "message": "Internal", "status": 500}, 500)
        if answer != "ok":
            return JSONResponse(
                {"code": int(answer), "message": f"error {answer}", "status": 400}, 400
            )
        body = {
            "sid": sid,
            "account_sid": self.account,
            "to": params.get("To"),
            "from": params.get("From"),
            "messaging_service_sid": params.get("MessagingServiceSid"),
            "body": params.get("Body"),
            "status": "queued",
            "num_segments": "1",
            "direction": "outbound-api",
            "api_version": "2010-04-01",
            "uri": f"/2010-04-01/Accounts/{self.account}/Messages/{sid}.json",
        }
        return JSONResponse(body, status_code=201)

    async def download(self, request: Request) -> Response:
        media = request.path_params["media"]
        with self._lock:
            self.downloads.append((media, request.headers.get("authorization")))
        if not self._authorised(request):
            return JSONResponse({"code": 20003, "message": "Authenticate"}, status_code=401)
        if media not in self.media:
            return Response(status_code=404)
        data, mime = self.media[media]
        return Response(data, media_type=mime)

    def app(self) -> Starlette:
        prefix = "/2010-04-01/Accounts/{account}"
        return Starlette(
            routes=[
                Route(f"{prefix}/Messages.json", self.create, methods=["POST"]),
                Route(
                    f"{prefix}/Messages/{{message}}/Media/{{media}}", self.download, methods=["GET"]
                ),
            ]
        )

    def __enter__(self) -> FakeTwilio:
        self.served = Served(self.app())
        self.served.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.served is not None
        self.served.stop()
