"""SMS sender and media fetcher: twilio's REST client (`messages.create`), split at 1,600.

- Twilio takes at most 1,600 characters per message body (it sends them as segments), so a
  longer reply goes as parts cut at paragraphs, lines or words, in order, resumed (not
  repeated) on a retry (workers/delivery/progress.py).
- The client is twilio's own `Client` with a custom http client (the SDK's documented hook
  for proxies): requests to https://api.twilio.com go to `platforms.sms.api_base` instead
  (a regional edge, a proxy, or a fake on 127.0.0.1 in tests). No SDK retries: a retried
  POST could send twice; the flush owns retrying. Its requests session's connections (to
  Twilio or to a proxy from the environment) drop a send cut off midway before the chat's
  lane can move (workers/delivery/sockets.py).
- Limits: about 1 message/s per recipient (bursts of 3) and per sending number (bursts of
  10), shared by the fleet; a 429 cools the sending number down for every worker.
- Errors that will never succeed → Undeliverable: the recipient replied STOP (21610), the
  number is invalid or not reachable by SMS, the account or number cannot send; 401/403/404.
  Other 4xx are Undeliverable too (the same request fails the same way); 5xx and network
  trouble → SendFailed (the flush backs off). The token is only ever in the basic-auth
  header: nothing here logs it, and error text is redacted all the same.
- Fetcher: MMS media URLs with the account's basic auth, only to Twilio's https hosts or the
  configured api_base's origin; Twilio redirects media to its CDN, and httpx drops the
  credentials on a redirect that leaves the origin. Media refused for good (another host, not
  200, too big) leaves a note in the turn (MediaRefused); network trouble retries the turn.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx

from shared.pipeline.outbox import OutboxRow
from shared.platforms.sms import PLATFORM, TWILIO_API, SmsSettings
from shared.turns import Attachment
from workers.agent.media import FetchError
from workers.delivery.base import RetryLater, SenderDeps, Sent, Undeliverable
from workers.delivery.fetch import FetchFailed, _download, credential_origins, unreachable
from workers.delivery.progress import Progress
from workers.delivery.ratelimit import Bucket, Limiter, bot_key
from workers.delivery.sockets import SocketOption
from workers.delivery.split import split_for

log = logging.getLogger(__name__)

PER_RECIPIENT = PLATFORM.rate_limits["chat"]
PER_NUMBER = PLATFORM.rate_limits["bot"]
TIMEOUT = 30.0
TWILIO_HOSTS = ("twilio.com",)
# Twilio error codes that the same request will always get again.
FATAL_CODES = frozenset(
    {
        20003,  # authentication failed
        20404,  # resource not found
        21211,  # invalid To number
        21408,  # sending to this region is not enabled
        21601,  # To is not a valid mobile number
        21606,  # From cannot send SMS
        21608,  # trial accounts send only to verified numbers
        21610,  # the recipient replied STOP
        21612,  # this From/To pair cannot be used
        21614,  # To is not a mobile number
        21617,  # the body is over the limit
        30004,  # message blocked
        30006,  # landline or unreachable carrier
    }
)


class SendFailed(Exception):
    """A transient failure (connection dropped, 5xx); the flush retries with backoff."""


def socket_options_adapter(options: Sequence[SocketOption]) -> Any:
    """A requests HTTPAdapter whose connections, direct or through a proxy, carry urllib3's
    default socket options (TCP_NODELAY) and `options`."""
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection

    chosen = [*HTTPConnection.default_socket_options, *options]

    class SocketOptionsAdapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **pool_kwargs: Any) -> None:
            pool_kwargs["socket_options"] = chosen
            super().init_poolmanager(*args, **pool_kwargs)

        def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
            proxy_kwargs["socket_options"] = chosen
            return super().proxy_manager_for(proxy, **proxy_kwargs)

    return SocketOptionsAdapter(pool_maxsize=min(32, (os.cpu_count() or 1) + 4))


def rebased_http_client(
    api_base: str, timeout: float = TIMEOUT, socket_options: Sequence[SocketOption] = ()
) -> Any:
    """twilio's TwilioHttpClient, sending what it would send to api.twilio.com to `api_base`,
    over connections that carry `socket_options`."""
    from twilio.http.http_client import TwilioHttpClient

    base = api_base.rstrip("/")

    class RebasedHttpClient(TwilioHttpClient):  # type: ignore[misc]
        def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            if base != TWILIO_API and url.startswith(TWILIO_API + "/"):
                url = base + url[len(TWILIO_API) :]
            return super().request(method, url, *args, **kwargs)

    client = RebasedHttpClient(timeout=timeout)
    for prefix in ("https://", "http://"):  # http: a plain api_base (a local proxy, a fake)
        client.session.mount(prefix, socket_options_adapter(socket_options))
    return client


def twilio_client(conf: SmsSettings, socket_options: Sequence[SocketOption] = ()) -> Any:
    from twilio.rest import Client

    assert conf.token is not None and conf.account_sid is not None
    return Client(
        conf.account_sid,
        conf.token.get_secret_value(),
        http_client=rebased_http_client(conf.api_base or TWILIO_API, socket_options=socket_options),
    )


class SmsSender:
    platform = PLATFORM.name
    reads_store = False

    def __init__(
        self,
        *,
        client: Any,
        token: str,
        sender: dict[str, str],
        limiter: Limiter,
        progress: Progress,
    ) -> None:
        self._client = client
        self._token = token
        self._from = sender  # from_ or messaging_service_sid
        self._limiter = limiter
        self._progress = progress
        self._keys = bot_key(PLATFORM.name, ":".join(sorted(sender.values())))

    def buckets(self, to: str) -> list[Bucket]:
        return [
            Bucket(f"{self._keys}:chat:{to}", *PER_RECIPIENT),
            Bucket(f"{self._keys}:bot", *PER_NUMBER),
        ]

    def cooldowns(self, to: str) -> list[str]:
        return [f"{self._keys}:cool:chat:{to}", f"{self._keys}:cool:bot"]

    def send(self, row: OutboxRow) -> Sent:
        parts = split_for(PLATFORM, row.text)
        done = self._progress.sent_parts(row.id)
        for index in range(len(done), len(parts)):
            wait = self._limiter.acquire(
                self.buckets(row.chat_id), self.cooldowns(row.chat_id), want=len(parts) - index
            )
            if wait > 0:
                raise RetryLater(wait, f"sms rate limit for {row.chat_id}")
            sid = self._post(row, parts[index])
            self._progress.part_sent(row.id, sid)
            done.append(sid)
        return Sent(",".join(done) if done else None)

    def _redact(self, text: str) -> str:
        return text.replace(self._token, "***")

    def _post(self, row: OutboxRow, text: str) -> str:
        from twilio.base.exceptions import TwilioRestException

        try:
            message = self._client.messages.create(to=row.chat_id, body=text, **self._from)
        except TwilioRestException as exc:
            raise self._map(exc) from None
        except Exception as exc:  # requests: refused, reset, timed out; a garbled answer
            raise SendFailed(self._redact(f"sms: {type(exc).__name__}: {exc}")) from None
        return str(message.sid or "")

    def _map(self, exc: Any) -> Exception:
        status, code = int(exc.status or 0), exc.code
        what = self._redact(f"twilio {status} (error {code}): {exc.msg}")
        if status == 429 or code == 20429:
            _, number = self.cooldowns("")
            self._limiter.cool_down(number, 1.0)
            return RetryLater(1.0, what)
        if code in FATAL_CODES or status in (400, 401, 403, 404, 413, 422):
            return Undeliverable(what)
        return SendFailed(what)

    def close(self) -> None:
        session = getattr(self._client.http_client, "session", None)
        if session is not None:
            session.close()


def build(conf: SmsSettings, deps: SenderDeps) -> SmsSender:
    """The sender for `platforms.sms` (the descriptor's `sender`)."""
    assert conf.token is not None
    sender = (
        {"messaging_service_sid": conf.messaging_service_sid}
        if conf.messaging_service_sid
        else {"from_": conf.from_number or ""}
    )
    return SmsSender(
        client=twilio_client(conf, deps.socket_options),
        token=conf.token.get_secret_value(),
        sender=sender,
        limiter=deps.limiter,
        progress=deps.progress,
    )


class MediaRefused(FetchFailed, FetchError):
    """Fetching this media fails the same way every time (not Twilio's host, gone, too big):
    the turn goes on with a note saying so, rather than being retried until it is dead.
    Network trouble stays a plain FetchFailed, so the turn is retried."""


class SmsFetcher:
    """MMS media: the Twilio media URL with the account's basic auth (Twilio hosts only).

    A client per fetch: MMS are rare, and the agent's media registry never closes fetchers,
    so a pooled connection would outlive the worker's use of it.
    """

    def __init__(self, *, account_sid: str, token: str, api_base: str | None) -> None:
        self._hosts, self._origins = credential_origins(TWILIO_HOSTS, api_base)
        self._auth = httpx.BasicAuth(account_sid, token)
        self._secret = token

    def may_carry_credentials(self, url: str) -> bool:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if f"{parts.scheme}://{parts.netloc}".lower() in self._origins:
            return True
        return parts.scheme == "https" and any(
            host == known or host.endswith("." + known) for known in self._hosts
        )

    def fetch(self, attachment: Attachment, max_bytes: int) -> bytes:
        url = attachment.url or ""
        if not url.startswith(("https://", "http://")):
            raise MediaRefused("no download URL")
        if not self.may_carry_credentials(url):
            host = urlsplit(url).hostname or "?"
            raise MediaRefused(f"not fetched: {host} is not Twilio's (no credentials sent)")
        try:
            with httpx.Client(timeout=TIMEOUT, follow_redirects=True) as client:
                return _download(client, url, max_bytes, auth=self._auth)
        except FetchFailed as exc:  # an answer other than 200, or over the size limit
            raise MediaRefused(str(exc)) from None
        except httpx.HTTPError as exc:
            message = f"{type(exc).__name__}: {exc}".replace(self._secret, "***")
            raise unreachable(exc, message) from None

    def close(self) -> None:
        """Nothing is held between fetches."""


def fetcher(conf: SmsSettings) -> SmsFetcher:
    """The MMS fetcher for `platforms.sms` (the descriptor's `fetcher`)."""
    assert conf.token is not None and conf.account_sid is not None
    return SmsFetcher(
        account_sid=conf.account_sid,
        token=conf.token.get_secret_value(),
        api_base=conf.api_base,
    )
