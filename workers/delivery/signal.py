"""Signal sender and attachment fetcher: signal-cli-rest-api's HTTP API over httpx.

- A reply is `POST {api_base}/v2/send` with `number` (the account), `recipients` (the chat
  id: a number, an ACI uuid, or a group's `group.…` send id) and `message`. The first part
  quotes the user's message (`quote_timestamp` and `quote_author`, from the turn's
  `<sender>:<timestamp>` message id). The answer's `timestamp` is the sent message's id.
- Replies are split at 2,000 characters (the descriptor's limit: Signal would take more, a
  phone screen would not), parts sent in order and resumed, not repeated, on a retry.
- Limits, fleet-wide in Redis: per chat, per group and per account; Signal's own rate
  limit (the daemon's 413/429, "rate limit" in its error) cools the whole account down.
- Errors: an unregistered or unknown recipient, a group the account is not in, and other
  4xx the same request will get again → Undeliverable; 5xx and network trouble → SendFailed
  (the flush backs off). The daemon holds no secret of ours; the account number is redacted.
- Fetcher: `GET {api_base}/v1/attachments/{id}`, only from the configured daemon's origin.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx

from shared.pipeline.outbox import OutboxRow
from shared.platforms import GROUP
from shared.platforms.signal import DAEMON, PLATFORM, SignalSettings, chat_type_of
from shared.turns import Attachment
from workers.agent.media import FetchError
from workers.delivery.base import RetryLater, SenderDeps, Sent, Undeliverable
from workers.delivery.fetch import FetchFailed, _download, unreachable
from workers.delivery.progress import Progress
from workers.delivery.ratelimit import Bucket, Limiter, bot_key
from workers.delivery.sockets import SocketOption, http_transport
from workers.delivery.split import split_for

log = logging.getLogger(__name__)

PER_CHAT = PLATFORM.rate_limits["chat"]
PER_GROUP = PLATFORM.rate_limits["group"]
PER_ACCOUNT = PLATFORM.rate_limits["bot"]
TIMEOUT = 30.0
RATE_WAIT = 10.0


class SendFailed(Exception):
    """A transient failure (connection dropped, 5xx); the flush retries with backoff."""


def quote_of(reply_to: str | None) -> dict[str, Any]:
    """`quote_timestamp`/`quote_author` for a `<sender>:<timestamp>` message id, else {}."""
    author, _, stamp = (reply_to or "").rpartition(":")
    if not author or not stamp.isdigit():
        return {}
    return {"quote_timestamp": int(stamp), "quote_author": author}


def _error_text(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return str(data["error"])[:500]
    return str(data)[:200]


class SignalSender:
    platform = PLATFORM.name
    reads_store = False

    def __init__(
        self,
        *,
        account: str,
        api_base: str,
        limiter: Limiter,
        progress: Progress,
        socket_options: Sequence[SocketOption] = (),
    ) -> None:
        self._account = account
        self._client = httpx.Client(
            base_url=api_base.rstrip("/"),
            timeout=TIMEOUT,
            follow_redirects=False,
            transport=http_transport(socket_options),
        )
        self._limiter = limiter
        self._progress = progress
        self._keys = bot_key(PLATFORM.name, account)

    def buckets(self, chat_id: str) -> list[Bucket]:
        per = PER_GROUP if chat_type_of(chat_id) == GROUP else PER_CHAT
        return [
            Bucket(f"{self._keys}:chat:{chat_id}", *per),
            Bucket(f"{self._keys}:bot", *PER_ACCOUNT),
        ]

    def cooldowns(self, chat_id: str) -> list[str]:
        return [f"{self._keys}:cool:chat:{chat_id}", f"{self._keys}:cool:bot"]

    def send(self, row: OutboxRow) -> Sent:
        parts = split_for(PLATFORM, row.text)
        done = self._progress.sent_parts(row.id)
        for index in range(len(done), len(parts)):
            wait = self._limiter.acquire(
                self.buckets(row.chat_id), self.cooldowns(row.chat_id), want=len(parts) - index
            )
            if wait > 0:
                raise RetryLater(wait, f"signal rate limit for {row.chat_id}")
            stamp = self._post(row, parts[index], first=index == 0)
            self._progress.part_sent(row.id, stamp)
            done.append(stamp)
        return Sent(",".join(done) if done else None)

    def body(self, row: OutboxRow, text: str, *, first: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "number": self._account,
            "recipients": [row.chat_id],
            "message": text,
        }
        if first:
            body.update(quote_of(row.reply_to))
        return body

    def _redact(self, text: str) -> str:
        return text.replace(self._account, "***")

    def _post(self, row: OutboxRow, text: str, *, first: bool) -> str:
        try:
            response = self._client.post("/v2/send", json=self.body(row, text, first=first))
        except httpx.HTTPError as exc:
            raise SendFailed(self._redact(f"signal: {type(exc).__name__}: {exc}")) from None
        if response.status_code in (200, 201):
            try:
                return str(response.json()["timestamp"])
            except (ValueError, KeyError, TypeError):
                raise SendFailed("signal: a success without the message's timestamp") from None
        raise self._map(response)

    def _map(self, response: httpx.Response) -> Exception:
        status = response.status_code
        what = self._redact(f"signal {status}: {_error_text(response)}")
        if status in (413, 429) or "rate limit" in what.lower():
            self._limiter.cool_down(self.cooldowns("")[1], RATE_WAIT)
            return RetryLater(RATE_WAIT, what)
        if status >= 500 or status == 408:
            return SendFailed(what)
        return Undeliverable(what)

    def close(self) -> None:
        self._client.close()


def build(conf: SignalSettings, deps: SenderDeps) -> SignalSender:
    """The sender for `platforms.signal` (the descriptor's `sender`)."""
    assert conf.token is not None
    return SignalSender(
        account=conf.token.get_secret_value(),
        api_base=conf.api_base or DAEMON,
        limiter=deps.limiter,
        progress=deps.progress,
        socket_options=deps.socket_options,
    )


class AttachmentRefused(FetchFailed, FetchError):
    """Not the daemon's attachment URL, or gone: the turn goes on without it, with a note."""


class SignalFetcher:
    """A turn's attachments from the daemon: `/v1/attachments/{id}` on `api_base` only."""

    def __init__(self, *, api_base: str) -> None:
        parts = urlsplit(api_base)
        self._origin = f"{parts.scheme}://{parts.netloc}".lower()
        self._prefix = api_base.rstrip("/") + "/v1/attachments/"

    def fetch(self, attachment: Attachment, max_bytes: int) -> bytes:
        url = attachment.url or ""
        parts = urlsplit(url)
        if f"{parts.scheme}://{parts.netloc}".lower() != self._origin or not url.startswith(
            self._prefix
        ):
            raise AttachmentRefused("not fetched: not an attachment on the configured daemon")
        try:
            with httpx.Client(timeout=TIMEOUT, follow_redirects=False) as client:
                return _download(client, url, max_bytes)
        except AttachmentRefused:
            raise
        except FetchFailed as exc:  # an answer other than 200, or over the size limit
            raise AttachmentRefused(str(exc)) from None
        except httpx.HTTPError as exc:
            raise unreachable(exc, f"signal: {type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        """Nothing is held between fetches."""


def fetcher(conf: SignalSettings) -> SignalFetcher:
    """The attachment fetcher for `platforms.signal` (the descriptor's `fetcher`)."""
    return SignalFetcher(api_base=conf.api_base or DAEMON)
