"""Discord sender: REST `POST /channels/{id}/messages` (httpx against `api_base`).

discord.py's HTTP client sleeps through 429s itself, which would hold a worker slot; here the
REST call is made directly and every wait becomes RetryLater. Limits: Discord's per-route
buckets are learnt from the response headers (`X-RateLimit-Remaining: 0` with
`X-RateLimit-Reset-After` cools the channel's route down for every worker), on top of a static
5 messages / 5 s per channel and 50 requests/s for the bot; a 429's `retry_after` (with
`global`) cools down the route or the whole bot. Parts are 2,000 characters; each carries a
nonce with `enforce_nonce`, so a part retried within Discord's window is not posted twice.
Threads are channels: a thread turn's reply goes to the thread. 403 (cannot message this
user, missing access) and 404 (unknown channel) → Undeliverable. With `stream_edits` the
streamed message is posted (its nonce names the turn, so a turn retried within Discord's nonce
window finds the same message) and edited (`PATCH …/messages/{id}`) through the same buckets,
and the reply's first part is an edit of it (workers/delivery/live_message.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import httpx

from shared.pipeline.outbox import OutboxRow
from shared.platforms.discord import PLATFORM, DiscordSettings
from workers.delivery.base import RetryLater, SenderDeps, Sent, ThreadUnavailable, Undeliverable
from workers.delivery.live_message import LiveMessages, MessageGone, finish_live
from workers.delivery.progress import Progress, namespace
from workers.delivery.ratelimit import Bucket, Limiter, bot_key
from workers.delivery.sockets import SocketOption, http_transport
from workers.delivery.split import split_for

PER_CHANNEL = PLATFORM.rate_limits["chat"]
PER_BOT = PLATFORM.rate_limits["bot"]
TIMEOUT = 30.0
PUBLIC_THREAD = 11
AUTO_ARCHIVE_MINUTES = 1440  # a handoff thread stays open a day after its last message
THREAD_NAME_LIMIT = 100
USER_AGENT = "DiscordBot (https://github.com/hermes-fleet, 0.1)"


class SendFailed(Exception):
    """A transient failure (connection dropped, 5xx); the flush retries with backoff."""


class DiscordSender:
    platform = PLATFORM.name
    reads_store = False
    typing_every = 8.0  # Discord's typing trigger lasts 10 s or until a message arrives

    def __init__(
        self,
        *,
        token: str,
        api_base: str,
        limiter: Limiter,
        progress: Progress,
        nonce_prefix: str = "h",
        live: LiveMessages | None = None,
        stream_interval: float = 1.0,
        socket_options: Sequence[SocketOption] = (),
    ) -> None:
        self.live = live
        self.stream_interval = stream_interval
        self._token = token
        self._client = httpx.Client(
            base_url=api_base.rstrip("/") + "/",
            headers={"Authorization": f"Bot {token}", "User-Agent": USER_AGENT},
            timeout=TIMEOUT,
            transport=http_transport(socket_options),
        )
        self._limiter = limiter
        self._progress = progress
        self._keys = bot_key(PLATFORM.name, token)
        self._nonce_prefix = nonce_prefix[:8]

    def buckets(self, channel: str) -> list[Bucket]:
        return [
            Bucket(f"{self._keys}:chat:{channel}", *PER_CHANNEL),
            Bucket(f"{self._keys}:bot", *PER_BOT),
        ]

    def cooldowns(self, channel: str) -> list[str]:
        return [f"{self._keys}:cool:route:{channel}", f"{self._keys}:cool:bot"]

    def send(self, row: OutboxRow) -> Sent:
        channel = row.thread_id or row.chat_id
        parts = split_for(PLATFORM, row.text)
        done = self._progress.sent_parts(row.id)
        for index in range(len(done), len(parts)):
            wait = self._limiter.acquire(
                self.buckets(channel), self.cooldowns(channel), want=len(parts) - index
            )
            if wait > 0:
                raise RetryLater(wait, f"discord rate limit for channel {channel}")
            message_id = None
            if index == 0:
                edit = partial(self._edit, channel)
                message_id = finish_live(self.live, row, parts[0], edit)
            message_id = message_id or self._post(row, channel, parts[index], index)
            self._progress.part_sent(row.id, message_id)
            done.append(message_id)
        return Sent(",".join(done) if done else None)

    def _post(self, row: OutboxRow, channel: str, text: str, index: int) -> str:
        nonce = f"{self._nonce_prefix}{row.id}.{index}"
        if row.id == 0 and row.turn_id is not None:  # the streamed message of a turn
            nonce = f"{self._nonce_prefix}t{row.turn_id}"
        body: dict[str, Any] = {
            "content": text,
            "allowed_mentions": {"parse": []},
            "nonce": nonce[:25],
            "enforce_nonce": True,
        }
        if index == 0 and row.reply_to:
            body["message_reference"] = {"message_id": row.reply_to, "fail_if_not_exists": False}
        try:
            response = self._client.post(f"channels/{channel}/messages", json=body)
        except httpx.HTTPError as exc:
            message = str(exc).replace(self._token, "***")
            raise SendFailed(f"discord: {type(exc).__name__}: {message}") from None
        self._learn(channel, response)
        if response.status_code in (200, 201):
            return str(_json(response).get("id", ""))
        raise self._map(channel, response)

    def post_live(self, row: OutboxRow, text: str) -> str:
        channel = row.thread_id or row.chat_id
        self._take_token(channel)
        return self._post(row, channel, text, 0)

    def edit_live(self, row: OutboxRow, message_id: str, text: str) -> None:
        channel = row.thread_id or row.chat_id
        self._take_token(channel)
        self._edit(channel, message_id, text)

    def _take_token(self, channel: str) -> None:
        wait = self._limiter.acquire(self.buckets(channel), self.cooldowns(channel))
        if wait > 0:
            raise RetryLater(wait, f"discord rate limit for channel {channel}")

    def _edit(self, channel: str, message_id: str, text: str) -> None:
        """PATCH the message's content; 404 (deleted) → MessageGone."""
        body = {"content": text, "allowed_mentions": {"parse": []}}
        try:
            response = self._client.patch(f"channels/{channel}/messages/{message_id}", json=body)
        except httpx.HTTPError as exc:
            message = str(exc).replace(self._token, "***")
            raise SendFailed(f"discord: {type(exc).__name__}: {message}") from None
        self._learn(channel, response)
        if response.status_code == 200:
            return
        if response.status_code == 404:
            raise MessageGone(f"discord 404: {_json(response).get('message', 'unknown message')}")
        raise self._map(channel, response)

    def typing(self, chat_id: str, thread_id: str | None) -> None:
        """`POST /channels/{id}/typing`; a failure raises for the caller to log."""
        response = self._client.post(f"channels/{thread_id or chat_id}/typing")
        if response.status_code not in (200, 204):
            raise SendFailed(f"discord typing: HTTP {response.status_code}")

    def open_thread(self, chat_id: str, title: str) -> str:
        """A public thread under the text channel `chat_id` (archived after a day idle); its
        id. ThreadUnavailable with Discord's reason when it cannot (permissions, a DM)."""
        body = {"name": title[:THREAD_NAME_LIMIT] or "hermes", "type": PUBLIC_THREAD,
                "auto_archive_duration": AUTO_ARCHIVE_MINUTES}  # fmt: skip
        try:
            response = self._client.post(f"channels/{chat_id}/threads", json=body)
        except httpx.HTTPError as exc:
            message = str(exc).replace(self._token, "***")
            raise ThreadUnavailable(f"discord: {type(exc).__name__}: {message}") from None
        data = _json(response)
        if response.status_code in (200, 201) and data.get("id"):
            return str(data["id"])
        detail = f"{data.get('code', '')} {data.get('message', '')}".strip()
        raise ThreadUnavailable(f"discord {response.status_code}: {detail or 'refused'}")

    def _learn(self, channel: str, response: httpx.Response) -> None:
        """A bucket the headers say is empty cools the route down until it resets."""
        if response.headers.get("X-RateLimit-Remaining") == "0":
            reset = _seconds(response.headers.get("X-RateLimit-Reset-After"), 0.0)
            if reset > 0:
                self._limiter.cool_down(self.cooldowns(channel)[0], reset)

    def _map(self, channel: str, response: httpx.Response) -> Exception:
        data = _json(response)
        status = response.status_code
        if status == 429:
            wait = _seconds(data.get("retry_after"), 0.0) or _seconds(
                response.headers.get("Retry-After"), 1.0
            )
            scope = "global" if data.get("global") else "route"
            key = self.cooldowns(channel)[1 if scope == "global" else 0]
            self._limiter.cool_down(key, wait)
            return RetryLater(wait, f"discord 429 ({scope}): retry after {wait:g} s")
        detail = f"{data.get('code', '')} {data.get('message', '')}".strip()
        if status in (401, 403, 404):
            return Undeliverable(f"discord {status}: {detail or 'refused'}")
        if 400 <= status < 500:
            return Undeliverable(f"discord {status}: {detail or 'bad request'}")
        return SendFailed(f"discord {status}: {detail or 'server error'}")

    def close(self) -> None:
        self._client.close()


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _seconds(value: Any, default: float) -> float:
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return default


def build(conf: DiscordSettings, deps: SenderDeps) -> DiscordSender:
    """The sender for `platforms.discord` (the descriptor's `sender`)."""
    assert conf.token is not None
    return DiscordSender(
        token=conf.token.get_secret_value(),
        api_base=conf.api_base or "",
        limiter=deps.limiter,
        progress=deps.progress,
        nonce_prefix=namespace(deps.settings.resolved_database_url)[:6],
        live=deps.live if conf.stream_edits else None,
        stream_interval=conf.stream_edit_interval,
        socket_options=deps.socket_options,
    )
