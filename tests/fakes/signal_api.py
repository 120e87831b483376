"""A fake signal-cli-rest-api daemon on 127.0.0.1: receive, send and attachments.

Shapes as signal-cli-rest-api (bbernhard/signal-cli-rest-api, src/api/api.go) has them:
- `fake.deliver(item)` queues what the next `GET /v1/receive/{number}` answers: the queued
  items, at most `max_messages` of them when the query names it, and then they are gone (the
  daemon's signal-cli has acknowledged them to Signal's servers; nothing gives them back).
  `fake.stall()` makes the next receive take its items and never answer (signal-cli has
  them, the HTTP answer is not back yet): they land in `fake.taken_unanswered`.
- `POST /v2/send` keeps each body and answers 201 `{"timestamp": "…"}`; a `group.…`
  recipient must decode (base64, twice) to the 32 bytes of a Signal group, as the daemon's
  getRecipientType checks, else 400; `fake.script_send(
  "400", "429", "500")` makes the next sends fail as the daemon does: 400 `{"error": …}` for
  any send error signal-cli reports, 429 with `challenge_tokens` for Signal's rate limit.
- `fake.attachments[id] = bytes` serves `GET /v1/attachments/{id}`.
Every request's method, path and Host header is kept in `fake.requests`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.server import Served

ACCOUNT = "+15550001111"


@dataclass
class FakeSignalDaemon:
    account: str = ACCOUNT
    served: Served | None = None
    queued: list[Any] = field(default_factory=list)
    sends: list[dict[str, Any]] = field(default_factory=list)
    attachments: dict[str, bytes] = field(default_factory=dict)
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, host)
    receive_params: list[dict[str, str]] = field(default_factory=list)
    taken_unanswered: list[Any] = field(default_factory=list)
    send_script: list[str] = field(default_factory=list)
    _stall: bool = False
    _released: threading.Event = field(default_factory=threading.Event)
    _stamps: Any = field(default_factory=lambda: itertools.count(1_800_000_000_000))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def api_base(self) -> str:
        assert self.served is not None
        return self.served.base

    def deliver(self, *items: Any) -> None:
        with self._lock:
            self.queued.extend(items)

    def stall(self) -> None:
        """The next receive takes what is queued (up to max_messages) and hangs until release."""
        with self._lock:
            self._stall = True
            self._released.clear()

    def release(self) -> None:
        self._released.set()

    def script_send(self, *answers: str) -> None:
        with self._lock:
            self.send_script.extend(answers)

    def sent(self, recipient: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [s for s in self.sends if recipient is None or recipient in s["recipients"]]

    def _note(self, request: Request) -> None:
        with self._lock:
            self.requests.append(
                (request.method, request.url.path, request.headers.get("host", ""))
            )

    async def receive(self, request: Request) -> Response:
        self._note(request)
        if request.path_params["number"] != self.account:
            return JSONResponse({"error": "User is not registered"}, status_code=400)
        params = dict(request.query_params)
        try:
            limit = int(params.get("max_messages", "0"))
        except ValueError:
            msg = "Couldn't process request - max_messages needs to be numeric!"
            return JSONResponse({"error": msg}, status_code=400)
        with self._lock:
            self.receive_params.append(params)
        for _ in range(20):  # hold the poll a little while nothing is queued
            with self._lock:
                cut = limit if limit > 0 else len(self.queued)
                items, self.queued = self.queued[:cut], self.queued[cut:]
                stall = self._stall and bool(items)
                if stall:
                    self._stall = False
                    self.taken_unanswered.extend(items)
            if stall:  # taken (acknowledged upstream), never answered while the test holds it
                while not self._released.is_set():
                    await asyncio.sleep(0.05)
                return JSONResponse([])
            if items:
                return JSONResponse(items)
            await asyncio.sleep(0.05)
        return JSONResponse([])

    async def send(self, request: Request) -> Response:
        self._note(request)
        body = await request.json()
        if body.get("number") != self.account or not body.get("recipients"):
            msg = "Couldn't process request - please provide at least one recipient"
            return JSONResponse({"error": msg}, status_code=400)
        for recipient in body["recipients"]:
            problem = _group_problem(recipient) if str(recipient).startswith("group.") else None
            if problem:
                return JSONResponse({"error": problem}, status_code=400)
        with self._lock:
            answer = self.send_script.pop(0) if self.send_script else "201"
        if answer == "400":  # what the daemon answers for any error signal-cli reports
            msg = f"Failed to send message: {body['recipients'][0]} is not a registered user"
            return JSONResponse({"error": msg}, status_code=400)
        if answer == "429":
            error = {
                "error": "Failed to send message due to rate limiting. Use the attached "
                "challenge tokens to lift the rate limit restrictions via the "
                "'/v1/accounts/{number}/rate-limit-challenge' endpoint.",
                "challenge_tokens": ["6f2a1b9c-0d3e-4f5a-8b7c-9d0e1f2a3b4c"],
                "account": self.account,
            }
            return JSONResponse(error, status_code=429)
        if answer == "500":
            return JSONResponse({"error": "internal error"}, status_code=500)
        with self._lock:
            self.sends.append(body)
            stamp = next(self._stamps)
        return JSONResponse({"timestamp": str(stamp)}, status_code=201)

    async def attachment(self, request: Request) -> Response:
        self._note(request)
        data = self.attachments.get(request.path_params["ident"])
        if data is None:
            return JSONResponse({"error": "not found"}, status_code=404)
        return Response(data, media_type="application/octet-stream")

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/receive/{number}", self.receive, methods=["GET"]),
                Route("/v2/send", self.send, methods=["POST"]),
                Route("/v1/attachments/{ident}", self.attachment, methods=["GET"]),
            ]
        )

    def __enter__(self) -> FakeSignalDaemon:
        self.served = Served(self.app())
        self.served.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.served is not None
        self.served.__exit__(*exc)


def _group_problem(recipient: str) -> str | None:
    """Why the daemon would refuse a `group.` recipient (src/client/client.go,
    getRecipientType: base64 of signal-cli's base64 id of 32 bytes), or None."""
    try:
        inner = base64.b64decode(base64.b64decode(recipient.removeprefix("group."), validate=True))
    except (binascii.Error, ValueError):
        return f"Invalid identifier {recipient}"
    return None if len(inner) == 32 else f"Invalid Signal group size ({len(inner)}"


def envelope(
    text: str | None,
    *,
    timestamp: int,
    source: str = "+15557770001",
    group: str | None = None,
    attachments: list[dict[str, Any]] | None = None,
    account: str = ACCOUNT,
) -> dict[str, Any]:
    """One item as signal-cli-rest-api's receive answers it in normal mode."""
    data: dict[str, Any] = {"timestamp": timestamp, "message": text, "expiresInSeconds": 0}
    if group is not None:
        data["groupInfo"] = {"groupId": group, "type": "DELIVER"}
    if attachments is not None:
        data["attachments"] = attachments
    return {
        "envelope": {
            "source": source,
            "sourceNumber": source,
            "sourceUuid": "6e2d1c4a-0b7e-4a53-9a43-2f3d7f0c9a11",
            "sourceName": "Ada",
            "sourceDevice": 1,
            "timestamp": timestamp,
            "dataMessage": data,
        },
        "account": account,
    }
