"""A fake Matrix homeserver (client-server API) on 127.0.0.1, for matrix-nio pointed at it.

One timeline for all rooms; a sync token is `s<n>`: the events from the n-th on. `/sync`
without `since` returns everything so far (the backlog), with it the events after, waiting up
to `timeout` ms for one. `PUT /rooms/{room}/send/{type}/{txn}` appends the bot's event (so
its own events come back in the next sync, as on a real server) and answers a repeated txn id
with the event it made the first time. Media: `/_matrix/client/v1/media/download/{s}/{id}`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.server import Served

BOT = "@hermes:fake.test"


class FakeMatrix:
    def __init__(self, token: str, *, bot: str = BOT) -> None:
        self.token = token
        self.bot = bot
        self.lock = threading.Lock()
        self.timeline: list[tuple[str, Any]] = []  # (room id, event as JSON)
        self.members: dict[str, int] = {}
        self.sent: list[dict[str, Any]] = []  # {"room", "type", "txn", "content", "event_id"}
        self.txns: dict[str, str] = {}
        self.media: dict[str, bytes] = {}
        self.syncs: list[str | None] = []  # the `since` of every /sync asked
        self.send_errors: list[tuple[int, dict[str, Any]]] = []  # answers for the next PUTs
        self._ids = itertools.count(1)
        app = Starlette(
            routes=[
                Route("/_matrix/client/v3/sync", self.sync),
                Route("/_matrix/client/r0/sync", self.sync),
                Route(
                    "/_matrix/client/{v}/rooms/{room}/send/{type}/{txn}", self.send, methods=["PUT"]
                ),
                Route("/_matrix/client/v1/media/download/{server}/{media}", self.download),
                Route("/_matrix/client/v3/account/whoami", self.whoami),
            ]
        )
        self.served = Served(app)

    def __enter__(self) -> FakeMatrix:
        self.served.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.served.stop()

    @property
    def base(self) -> str:
        return self.served.base

    # --- what a test does ---

    def room(self, room_id: str, members: int) -> None:
        self.members[room_id] = members

    def post(self, room_id: str, event: Any) -> None:
        """An event (any JSON: a malformed one too) appears in `room_id`'s timeline."""
        with self.lock:
            self.timeline.append((room_id, event))

    def message(
        self, room_id: str, body: str, *, sender: str = "@alice:fake.test", **content: Any
    ) -> dict[str, Any]:
        event = {
            "type": "m.room.message",
            "event_id": f"$in{next(self._ids)}",
            "sender": sender,
            "origin_server_ts": 1_700_000_000_000,
            "content": {"msgtype": "m.text", "body": body, **content},
        }
        self.post(room_id, event)
        return event

    def texts(self, room_id: str | None = None) -> list[str]:
        with self.lock:
            return [
                s["content"].get("body", "")
                for s in self.sent
                if room_id is None or s["room"] == room_id
            ]

    # --- the API ---

    def _authorised(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.token}" or (
            request.query_params.get("access_token") == self.token
        )

    @staticmethod
    def _unauthorised() -> Response:
        return JSONResponse({"errcode": "M_UNKNOWN_TOKEN", "error": "bad token"}, 401)

    async def whoami(self, request: Request) -> Response:
        if not self._authorised(request):
            return self._unauthorised()
        return JSONResponse({"user_id": self.bot})

    async def sync(self, request: Request) -> Response:
        if not self._authorised(request):
            return self._unauthorised()
        since = request.query_params.get("since")
        self.syncs.append(since)
        start = int(since[1:]) if since and since.startswith("s") else 0
        timeout = min(int(request.query_params.get("timeout") or 0), 2000) / 1000
        waited = 0.0
        while since is not None and len(self.timeline) <= start and waited < timeout:
            await asyncio.sleep(0.02)
            waited += 0.02
        with self.lock:
            events = self.timeline[start:]
            end = len(self.timeline)
        rooms: dict[str, Any] = {}
        for room_id, event in events:
            room = rooms.setdefault(
                room_id,
                {
                    "summary": {
                        "m.joined_member_count": self.members.get(room_id, 2),
                        "m.invited_member_count": 0,
                    },
                    "timeline": {"events": [], "limited": False, "prev_batch": f"s{start}"},
                    "state": {"events": []},
                },
            )
            room["timeline"]["events"].append(event)
        body = {"next_batch": f"s{end}", "rooms": {"join": rooms}}
        return Response(json.dumps(body), media_type="application/json")

    async def send(self, request: Request) -> Response:
        if not self._authorised(request):
            return self._unauthorised()
        room, kind, txn = (request.path_params[k] for k in ("room", "type", "txn"))
        content = await request.json()
        with self.lock:
            if self.send_errors:
                status, error = self.send_errors.pop(0)
                return JSONResponse(error, status)
            if txn in self.txns:
                return JSONResponse({"event_id": self.txns[txn]})
            event_id = f"$out{next(self._ids)}"
            self.txns[txn] = event_id
            self.sent.append(
                {"room": room, "type": kind, "txn": txn, "content": content, "event_id": event_id}
            )
            self.timeline.append(
                (
                    room,
                    {
                        "type": kind,
                        "event_id": event_id,
                        "sender": self.bot,
                        "origin_server_ts": 1_700_000_000_000,
                        "content": content,
                    },
                )
            )
        return JSONResponse({"event_id": event_id})

    async def download(self, request: Request) -> Response:
        if not self._authorised(request):
            return self._unauthorised()
        key = f"{request.path_params['server']}/{request.path_params['media']}"
        if key not in self.media:
            return JSONResponse({"errcode": "M_NOT_FOUND", "error": "no such media"}, 404)
        return Response(self.media[key], media_type="application/octet-stream")
