"""A fake signal-cli-rest-api daemon on 127.0.0.1: receive, send and attachments.

`fake.deliver(item)` queues what the next `GET /v1/receive/{number}` answers (all queued items,
then they are gone, as signal-cli acknowledges what it returns); `POST /v2/send` keeps each
body and answers `{"timestamp": …}`; `fake.attachments[id] = bytes` serves an attachment.
Every request's method, path and Host header is kept in `fake.requests`.
"""

from __future__ import annotations

import asyncio
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
    _stamps: Any = field(default_factory=lambda: itertools.count(1_800_000_000_000))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def api_base(self) -> str:
        assert self.served is not None
        return self.served.base

    def deliver(self, *items: Any) -> None:
        with self._lock:
            self.queued.extend(items)

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
        for _ in range(20):  # hold the poll a little while nothing is queued
            with self._lock:
                items, self.queued = self.queued, []
            if items:
                return JSONResponse(items)
            await asyncio.sleep(0.05)
        return JSONResponse([])

    async def send(self, request: Request) -> Response:
        self._note(request)
        body = await request.json()
        if body.get("number") != self.account or not body.get("recipients"):
            return JSONResponse({"error": "bad request"}, status_code=400)
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
