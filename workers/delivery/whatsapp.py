"""WhatsApp sender and media fetcher: the Cloud API over httpx against `api_base`.

Why httpx and not pywa: pywa's client sets its base URL to `https://graph.facebook.com/v…`
itself, so `platforms.whatsapp.api_base` (a proxy, a local test double) could not be honoured.

- A reply is `POST {api_base}/{phone_number_id}/messages` with `type: text`; the first part
  quotes the user's message (`context.message_id`); groups (ids that are not a wa_id) go with
  `recipient_type: group`. Long replies are split at 4,096 characters, parts sent in order and
  resumed (not repeated) on a retry (workers/delivery/progress.py). The message ids are wamids.
- Limits, fleet-wide in Redis: 80 messages/s per business number, and a per-user pair rate.
  Graph's rate-limit errors (130429 throughput, 131056 pair rate, 4 / 80007 account limits)
  become cooldowns every worker honours, and RetryLater here.
- 131047 ("Re-engagement message"): free-form text is only allowed within 24 hours of the
  user's last message. That reply fails once, clearly (Undeliverable), and is never retried:
  only a template message could reach the user now.
- Other 4xx → Undeliverable; 5xx, Graph's transient codes, an expired token (190) and network
  trouble → a plain exception (the flush backs off, a bounded number of times).
- Media: `whatsapp:media/<id>` → `GET {api_base}/<id>` gives a short-lived URL, downloaded with
  the bearer token — only from Meta's own https hosts or the configured `api_base`'s origin.
The token is only ever in the Authorization header; error texts are redacted anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from shared.pipeline.outbox import OutboxRow
from shared.platforms import GROUP
from shared.platforms.whatsapp import GRAPH_API, PLATFORM, WhatsAppSettings, chat_type_of
from shared.turns import Attachment
from workers.delivery.base import RetryLater, SenderDeps, Sent, Undeliverable
from workers.delivery.fetch import FetchFailed, UrlFetcher, unreachable
from workers.delivery.progress import Progress
from workers.delivery.ratelimit import Bucket, Limiter, bot_key
from workers.delivery.sockets import SocketOption, http_transport
from workers.delivery.split import split_for

PER_NUMBER = PLATFORM.rate_limits["number"]
PER_CHAT = PLATFORM.rate_limits["chat"]
TIMEOUT = 30.0
OUTSIDE_WINDOW = 131047
PAIR_RATE = 131056
NUMBER_RATE = {130429: 2.0, 4: 60.0, 80007: 60.0}  # code → seconds to hold the whole number
PAIR_WAIT = 6.0
TRANSIENT = {1, 2, 131000, 131016, 133004, 190}
MEDIA_PREFIX = "whatsapp:media/"
MEDIA_HOSTS = ("graph.facebook.com", "lookaside.fbsbx.com")  # where Meta serves media


class SendFailed(Exception):
    """A transient failure (connection dropped, 5xx); the flush retries with backoff."""


def _error(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) else {}


def _code(error: dict[str, Any]) -> int | None:
    code = error.get("code")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


class WhatsAppSender:
    platform = PLATFORM.name
    reads_store = False

    def __init__(
        self,
        *,
        token: str,
        phone_number_id: str | None,
        api_base: str,
        limiter: Limiter,
        progress: Progress,
        socket_options: Sequence[SocketOption] = (),
    ) -> None:
        self._token = token
        self._number = phone_number_id
        self._client = httpx.Client(
            base_url=api_base.rstrip("/") + "/",
            headers={"Authorization": f"Bearer {token}"},
            timeout=TIMEOUT,
            transport=http_transport(socket_options),
        )
        self._limiter = limiter
        self._progress = progress
        self._keys = bot_key(PLATFORM.name, phone_number_id or "")  # limits are per number

    def buckets(self, chat_id: str) -> list[Bucket]:
        return [
            Bucket(f"{self._keys}:chat:{chat_id}", *PER_CHAT),
            Bucket(f"{self._keys}:number", *PER_NUMBER),
        ]

    def cooldowns(self, chat_id: str) -> list[str]:
        return [f"{self._keys}:cool:chat:{chat_id}", f"{self._keys}:cool:number"]

    def send(self, row: OutboxRow) -> Sent:
        if not self._number:  # a configuration to fix: retried (bounded), never dropped
            raise SendFailed("platforms.whatsapp.phone_number_id is not set: no number to send as")
        parts = split_for(PLATFORM, row.text)
        done = self._progress.sent_parts(row.id)
        for index in range(len(done), len(parts)):
            wait = self._limiter.acquire(
                self.buckets(row.chat_id), self.cooldowns(row.chat_id), want=len(parts) - index
            )
            if wait > 0:
                raise RetryLater(wait, f"whatsapp rate limit for {row.chat_id}")
            wamid = self._post(row, parts[index], first=index == 0)
            self._progress.part_sent(row.id, wamid)
            done.append(wamid)
        return Sent(",".join(done) if done else None)

    def body(self, row: OutboxRow, text: str, *, first: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "recipient_type": "group" if chat_type_of(row.chat_id) == GROUP else "individual",
            "to": row.chat_id,
            "type": "text",
            "text": {"body": text, "preview_url": False},
        }
        if first and row.reply_to:
            body["context"] = {"message_id": row.reply_to}
        return body

    def _post(self, row: OutboxRow, text: str, *, first: bool) -> str:
        try:
            response = self._client.post(
                f"{self._number}/messages", json=self.body(row, text, first=first)
            )
        except httpx.HTTPError as exc:
            raise SendFailed(f"whatsapp: {type(exc).__name__}: {self._redact(str(exc))}") from None
        if response.status_code == 200:
            try:
                return str(response.json()["messages"][0]["id"])
            except (ValueError, KeyError, IndexError, TypeError):
                raise SendFailed("whatsapp: a 200 without a message id") from None
        raise self._map(row.chat_id, response)

    def _redact(self, text: str) -> str:
        return text.replace(self._token, "***")

    def _map(self, chat_id: str, response: httpx.Response) -> Exception:
        """A Graph API error → RetryLater (a cooldown for every worker), Undeliverable or
        SendFailed (retried with backoff)."""
        error = _error(response)
        code = _code(error)
        detail = self._redact(
            " ".join(str(x) for x in (code, error.get("message")) if x is not None)
            or f"HTTP {response.status_code}"
        )
        chat_key, number_key = self.cooldowns(chat_id)
        if code == OUTSIDE_WINDOW:
            return Undeliverable(
                f"whatsapp {detail}: outside the 24-hour customer-service window (the user "
                "has not written for a day); only a template message can reach them now"
            )
        if code == PAIR_RATE:
            self._limiter.cool_down(chat_key, PAIR_WAIT)
            return RetryLater(PAIR_WAIT, f"whatsapp {detail}: pair rate limit")
        if code in NUMBER_RATE or response.status_code == 429:
            wait = NUMBER_RATE.get(code or 0) or _retry_after(response)
            self._limiter.cool_down(number_key, wait)
            return RetryLater(wait, f"whatsapp {detail}: rate limited, retry after {wait:g} s")
        if code in TRANSIENT or response.status_code >= 500 or response.status_code == 401:
            return SendFailed(f"whatsapp {response.status_code}: {detail}")
        return Undeliverable(f"whatsapp {response.status_code}: {detail}")

    def close(self) -> None:
        self._client.close()


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(1.0, float(response.headers.get("Retry-After", "")))
    except ValueError:
        return 2.0


class WhatsAppFetcher:
    """A turn's media: its id → a download URL (Graph) → the bytes, with the bearer token.

    Each fetch opens its own connections and closes them: attachments are occasional, and the
    worker's media processor keeps fetchers for the life of the process without closing them.
    """

    def __init__(self, *, token: str, api_base: str) -> None:
        self._token = token
        self._api_base = api_base
        self._api = api_base.rstrip("/")

    def downloader(self) -> UrlFetcher:
        """Downloads with the token only from Meta's https hosts or `api_base`'s origin."""
        return UrlFetcher(token=self._token, hosts=MEDIA_HOSTS, api_base=self._api_base)

    def _lookup(self, media_id: str) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            with httpx.Client(timeout=TIMEOUT, headers=headers) as client:
                answer = client.get(f"{self._api}/{media_id}")
                found = answer.json() if answer.status_code == 200 else {}
        except (httpx.HTTPError, ValueError) as exc:
            message = f"whatsapp: {type(exc).__name__}: {exc}".replace(self._token, "***")
            if isinstance(exc, httpx.HTTPError):
                raise unreachable(exc, message) from None
            raise FetchFailed(message) from None
        if not isinstance(found, dict) or not isinstance(found.get("url"), str):
            status = answer.status_code
            raise FetchFailed(
                f"the media lookup answered {status} without a URL",
                transient=status == 429 or status >= 500,
            )
        return found

    def fetch(self, attachment: Attachment, max_bytes: int) -> bytes:
        url = attachment.url or ""
        media_id = url.removeprefix(MEDIA_PREFIX)
        if not url.startswith(MEDIA_PREFIX) or not media_id or "/" in media_id:
            raise FetchFailed("not a WhatsApp media reference")
        found = self._lookup(media_id)
        size = found.get("file_size")
        size = size if isinstance(size, int) and not isinstance(size, bool) else None
        mime = found.get("mime_type") if isinstance(found.get("mime_type"), str) else None
        media = Attachment(attachment.kind, attachment.name, mime, found["url"], None, size)
        download = self.downloader()
        try:
            return download.fetch(media, max_bytes)
        finally:
            download.close()

    def close(self) -> None:
        """Nothing is held between fetches."""


def build(conf: WhatsAppSettings, deps: SenderDeps) -> WhatsAppSender:
    """The sender for `platforms.whatsapp` (the descriptor's `sender`)."""
    assert conf.token is not None
    return WhatsAppSender(
        token=conf.token.get_secret_value(),
        phone_number_id=conf.phone_number_id,
        api_base=conf.api_base or GRAPH_API,
        limiter=deps.limiter,
        progress=deps.progress,
        socket_options=deps.socket_options,
    )


def fetcher(conf: WhatsAppSettings) -> WhatsAppFetcher:
    """The media fetcher for `platforms.whatsapp` (the descriptor's `fetcher`)."""
    assert conf.token is not None
    return WhatsAppFetcher(token=conf.token.get_secret_value(), api_base=conf.api_base or GRAPH_API)
