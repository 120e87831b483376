"""Matrix sender: `room_send` (matrix-nio) of `m.room.message` events, and the mxc:// fetcher.

Each part is `m.text` (16,000 characters at most; an event is capped at 64 KiB). The first
part of a reply carries `m.relates_to.m.in_reply_to`; a thread turn's parts carry the
`m.thread` relation to the thread root (with the reply fallback). The transaction id is the
outbox row and part (`h<db>.<row>.<part>`): the homeserver answers a retried PUT with the
event it already made, so a part retried after a lost answer is not posted twice.

Limits: 1 message/s per room (burst 5) and the account's 0.2/s (burst 10), fleet-wide
(Redis buckets); M_LIMIT_EXCEEDED's `retry_after_ms` cools the account down for every worker.
M_FORBIDDEN / M_NOT_FOUND / M_UNKNOWN_TOKEN → Undeliverable. nio's own 429 retries are
switched off (they would hold a worker slot). `open_thread` posts a seed message in the room
and returns its event id: the thread's root, which replies then anchor an `m.thread` on.
nio's HTTP session is ours (aiohttp, no proxy, as nio's own would be here), so its connections
drop a send cut off midway before the room's lane can move (workers/delivery/sockets.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import httpx

from shared.pipeline.outbox import OutboxRow
from shared.platforms.matrix import PLATFORM, MatrixSettings
from shared.turns import Attachment
from workers.delivery.aioloop import LoopThread
from workers.delivery.base import RetryLater, SenderDeps, Sent, ThreadUnavailable, Undeliverable
from workers.delivery.fetch import FetchFailed, _download, unreachable
from workers.delivery.progress import Progress, namespace
from workers.delivery.ratelimit import Bucket, Limiter, bot_key
from workers.delivery.sockets import SocketOption, socket_factory
from workers.delivery.split import split_for

PER_ROOM = PLATFORM.rate_limits["room"]
PER_ACCOUNT = PLATFORM.rate_limits["account"]
TIMEOUT = 30.0
NEVER = frozenset({"M_FORBIDDEN", "M_NOT_FOUND", "M_UNKNOWN_TOKEN", "M_MISSING_TOKEN",
                   "M_BAD_JSON", "M_NOT_JSON", "M_TOO_LARGE"})  # fmt: skip


class SendFailed(Exception):
    """A transient failure (connection dropped, 5xx); the flush retries with backoff."""


def message_content(text: str, *, reply_to: str | None, thread_id: str | None) -> dict[str, Any]:
    """An m.text event's content: in a thread (m.thread) and/or replying to an event."""
    content: dict[str, Any] = {"msgtype": "m.text", "body": text}
    if thread_id:
        relation: dict[str, Any] = {"rel_type": "m.thread", "event_id": thread_id}
        relation["is_falling_back"] = reply_to is None
        relation["m.in_reply_to"] = {"event_id": reply_to or thread_id}
        content["m.relates_to"] = relation
    elif reply_to:
        content["m.relates_to"] = {"m.in_reply_to": {"event_id": reply_to}}
    return content


class MatrixSender:
    platform = PLATFORM.name
    reads_store = False

    def __init__(
        self,
        *,
        homeserver: str,
        user_id: str,
        token: str,
        limiter: Limiter,
        progress: Progress,
        txn_prefix: str = "h",
        loop: LoopThread | None = None,
        socket_options: Sequence[SocketOption] = (),
    ) -> None:
        self._socket_options = tuple(socket_options)
        self._homeserver = homeserver.rstrip("/")
        self._user_id = user_id
        self._token = token
        self._limiter = limiter
        self._progress = progress
        self._keys = bot_key(PLATFORM.name, token)
        self._txn_prefix = txn_prefix
        self._loop = loop or LoopThread("hermes-matrix")

    def buckets(self, room: str) -> list[Bucket]:
        return [
            Bucket(f"{self._keys}:room:{room}", *PER_ROOM),
            Bucket(f"{self._keys}:account", *PER_ACCOUNT),
        ]

    def cooldowns(self) -> list[str]:
        return [f"{self._keys}:cool:account"]

    def send(self, row: OutboxRow) -> Sent:
        parts = split_for(PLATFORM, row.text)
        done = self._progress.sent_parts(row.id)
        for index in range(len(done), len(parts)):
            wait = self._limiter.acquire(
                self.buckets(row.chat_id), self.cooldowns(), want=len(parts) - index
            )
            if wait > 0:
                raise RetryLater(wait, f"matrix rate limit for room {row.chat_id}")
            content = message_content(
                parts[index],
                reply_to=row.reply_to if index == 0 else None,
                thread_id=row.thread_id,
            )
            event_id = self._room_send(row.chat_id, content, f"{self._txn_prefix}.{row.id}.{index}")
            self._progress.part_sent(row.id, event_id)
            done.append(event_id)
        return Sent(",".join(done) if done else None)

    def _room_send(self, room: str, content: dict[str, Any], txn_id: str | None) -> str:
        from aiohttp import ClientSession, ClientTimeout, TCPConnector
        from nio import AsyncClient, AsyncClientConfig, RoomSendResponse

        async def go() -> Any:
            config = AsyncClientConfig(
                max_limit_exceeded=0,
                max_timeouts=0,
                request_timeout=TIMEOUT,
                encryption_enabled=False,
            )
            client = AsyncClient(self._homeserver, self._user_id, config=config)
            client.access_token = self._token
            # nio makes this session on first use when none is set; ours carries the options
            client.client_session = ClientSession(
                timeout=ClientTimeout(total=TIMEOUT),
                connector=TCPConnector(socket_factory=socket_factory(self._socket_options)),
            )
            try:
                return await client.room_send(room, "m.room.message", content, tx_id=txn_id)
            finally:
                await client.close()

        try:
            response = self._loop.run(go, TIMEOUT + 5)
        except (OSError, TimeoutError) as exc:
            raise SendFailed(f"matrix: {type(exc).__name__}") from None
        except Exception as exc:  # aiohttp's errors, without the token
            message = f"matrix: {type(exc).__name__}: {exc}".replace(self._token, "***")
            raise SendFailed(message) from None
        if isinstance(response, RoomSendResponse):
            return str(response.event_id)
        raise self._map(response)

    def _map(self, error: Any) -> Exception:
        code = getattr(error, "status_code", None) or ""
        status = getattr(getattr(error, "transport_response", None), "status", 0) or 0
        detail = f"{code} {getattr(error, 'message', '')}".strip()
        if code == "M_LIMIT_EXCEEDED" or status == 429:
            wait = (getattr(error, "retry_after_ms", None) or 1000) / 1000
            self._limiter.cool_down(self.cooldowns()[0], wait)
            return RetryLater(wait, f"matrix 429: retry after {wait:g} s")
        if code in NEVER or 400 <= status < 500:
            return Undeliverable(f"matrix {status}: {detail or 'refused'}")
        return SendFailed(f"matrix {status}: {detail or 'server error'}")

    def open_thread(self, chat_id: str, title: str) -> str:
        """A seed message in room `chat_id` whose event id roots an m.thread; ThreadUnavailable
        with the homeserver's reason when it cannot be posted."""
        try:
            return self._room_send(chat_id, {"msgtype": "m.text", "body": title or "hermes"}, None)
        except (Undeliverable, SendFailed, RetryLater) as exc:
            raise ThreadUnavailable(f"matrix: {exc}") from None

    def close(self) -> None:
        self._loop.close()


class MediaFetcher:
    """An `mxc://server/media` attachment, downloaded from the configured homeserver's
    authenticated media endpoint (`/_matrix/client/v1/media/download/…`, bearer token)."""

    def __init__(self, *, homeserver: str, token: str) -> None:
        self._homeserver = homeserver.rstrip("/")
        self._token = token

    def url_of(self, mxc: str) -> str:
        server, _, media = mxc.removeprefix("mxc://").partition("/")
        if not mxc.startswith("mxc://") or not server or not media or "/" in media:
            raise FetchFailed("not an mxc://server/media URL")
        return (
            f"{self._homeserver}/_matrix/client/v1/media/download/"
            f"{quote(server, safe='')}/{quote(media, safe='')}"
        )

    def fetch(self, attachment: Attachment, max_bytes: int) -> bytes:
        url = self.url_of(attachment.url or "")
        if attachment.size is not None and attachment.size > max_bytes:
            raise FetchFailed(f"{attachment.size} bytes is over the {max_bytes}-byte limit")
        headers = {"Authorization": f"Bearer {self._token}"}
        try:  # a client per download: attachments are rare, and no pool outlives the turn
            with httpx.Client(timeout=TIMEOUT, follow_redirects=True) as client:
                return _download(client, url, max_bytes, headers=headers)
        except httpx.HTTPError as exc:
            message = f"{type(exc).__name__}: {exc}".replace(self._token, "***")
            raise unreachable(exc, message) from None

    def close(self) -> None:
        pass


def build(conf: MatrixSettings, deps: SenderDeps) -> MatrixSender:
    """The sender for `platforms.matrix` (the descriptor's `sender`)."""
    assert conf.token is not None and conf.homeserver and conf.user_id
    return MatrixSender(
        homeserver=conf.homeserver,
        user_id=conf.user_id,
        token=conf.token.get_secret_value(),
        limiter=deps.limiter,
        progress=deps.progress,
        txn_prefix="h" + namespace(deps.settings.resolved_database_url)[:6],
        socket_options=deps.socket_options,
    )


def fetcher(conf: Any) -> MediaFetcher:
    assert conf.token is not None and conf.homeserver
    return MediaFetcher(homeserver=conf.homeserver, token=conf.token.get_secret_value())
