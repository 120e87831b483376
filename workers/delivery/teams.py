"""Teams sender and attachment fetcher: the Bot Connector REST API over httpx.

Why httpx and not botframework-connector's ConnectorClient: that client is msrest over
requests (msrest is deprecated), and its errors hide the `Retry-After` a 429 carries; the
connector's REST surface we need is two POSTs.

- The bot token: the client-credentials grant (`app_id`, the app password `token`, scope
  `https://api.botframework.com/.default`) at `token_endpoint`, cached until five minutes
  before it expires, asked for again after a 401.
- A reply is `POST {serviceUrl}/v3/conversations/{conversation}/activities/{reply_to}` (the
  first part answers the user's message), later parts `…/activities`. serviceUrl is the one
  the conversation's latest activity named, stored by the receiver (platform_cursors, account
  `service_url:<chat id>`; read for every reply, so a moved conversation is followed at once:
  one primary-key read beside an HTTPS round trip); `api_base` when none is stored (a home
  channel from the settings nobody has written from) or when `reply_to_service_url` is off.
  In a channel the conversation is the reply chain, `{chat_id};messageid={thread_id}`. Long
  replies are split at 6,000 characters (about 24 KB of UTF-8 at most, under Teams' ~28 KB
  message limit), parts sent in order and resumed (not repeated) on a retry
  (workers/delivery/progress.py).
- Limits, fleet-wide in Redis: per conversation (7 at once, 0.5/s sustained) and per bot
  (50/s). A 429 becomes a cooldown every worker honours, and RetryLater here.
- 403/404 (the bot was removed, the conversation is gone) and other 4xx → Undeliverable;
  401 (token refused: asked for again), 5xx and network trouble → a plain exception (the
  flush backs off, a bounded number of times).
- Handoffs: `open_thread` posts the title to a channel: that post is a reply chain's root.
  A personal or group chat has no reply chains (ThreadUnavailable: the chat itself is used).
- Attachments: image `contentUrl`s on the Bot Connector are fetched with the bot token, only
  from its hosts (and `api_base`'s origin); a file's `downloadUrl` is pre-authenticated and
  fetched without credentials, only from SharePoint. Anything else is refused.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from urllib.parse import quote, urlsplit

import httpx

from shared.db import Store
from shared.db.engine import connect
from shared.pipeline.outbox import OutboxRow
from shared.platforms import CHANNEL
from shared.platforms.teams import (
    CONNECTOR,
    PLATFORM,
    SCOPE,
    SERVICE_URL_CURSOR,
    TeamsSettings,
    chat_type_of,
    service_url_allowed,
)
from shared.store import cursors
from shared.turns import Attachment
from workers.delivery.base import (
    RetryLater,
    SenderDeps,
    Sent,
    ThreadUnavailable,
    Undeliverable,
)
from workers.delivery.fetch import FetchFailed, UrlFetcher
from workers.delivery.progress import Progress
from workers.delivery.ratelimit import Bucket, Limiter, bot_key
from workers.delivery.sockets import SocketOption, http_transport
from workers.delivery.split import split_for

PER_CHAT = PLATFORM.rate_limits["chat"]
PER_BOT = PLATFORM.rate_limits["bot"]
TIMEOUT = 30.0
EARLY = 300.0  # a token is renewed this many seconds before it expires
CONNECTOR_HOSTS = ("trafficmanager.net", "botframework.com", "teams.microsoft.com")
FILE_HOSTS = ("sharepoint.com",)


class SendFailed(Exception):
    """A transient failure (connection dropped, 5xx, token refused); retried with backoff."""


class BotToken:
    """The bot's access token (client credentials), shared by the threads of one worker."""

    def __init__(self, *, app_id: str, password: str, token_url: str) -> None:
        self._grant = {
            "grant_type": "client_credentials",
            "client_id": app_id,
            "client_secret": password,
            "scope": SCOPE,
        }
        self._url = token_url
        self._lock = threading.Lock()
        self._token: str | None = None
        self._until = 0.0

    def get(self) -> str:
        with self._lock:
            if self._token is None or time.monotonic() >= self._until:
                self._token, lifetime = self._ask()
                self._until = time.monotonic() + max(0.0, lifetime - EARLY)
            return self._token

    def forget(self) -> None:
        with self._lock:
            self._token = None

    def _ask(self) -> tuple[str, float]:
        try:
            with httpx.Client(timeout=TIMEOUT) as client:
                answer = client.post(self._url, data=self._grant)
            found = answer.json() if answer.status_code == 200 else {}
        except (httpx.HTTPError, ValueError) as exc:
            raise SendFailed(f"teams token: {type(exc).__name__}") from None
        token = found.get("access_token") if isinstance(found, dict) else None
        if not isinstance(token, str) or not token:
            raise SendFailed(f"teams token endpoint answered {answer.status_code} without a token")
        lifetime = found.get("expires_in")
        return token, float(lifetime) if isinstance(lifetime, int | float) else 3600.0


class ServiceUrls:
    """Each conversation's service URL, as the receiver stored it (None: never stored).

    The store is opened on first use (in the worker process, after the fork). A stored URL
    the settings no longer allow is not used (api_base is)."""

    def __init__(self, conf: TeamsSettings, database_url: str | None) -> None:
        self._conf = conf
        self._url = database_url
        self._store: Store | None = None
        self._lock = threading.Lock()

    def of(self, chat_id: str) -> str | None:
        if self._url is None or not self._conf.reply_to_service_url:
            return None
        with self._lock:
            if self._store is None:
                self._store = connect(self._url)
            store = self._store
        with store.read() as conn:
            url = cursors.load(conn, PLATFORM.name, SERVICE_URL_CURSOR + chat_id)
        return url if url is not None and service_url_allowed(self._conf, url) else None

    def close(self) -> None:
        with self._lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()


def conversation_of(chat_id: str, thread_id: str | None) -> str:
    """The Bot Connector conversation a reply goes to: a channel's reply chain, or the chat."""
    if thread_id and chat_type_of(chat_id) == CHANNEL:
        return f"{chat_id};messageid={thread_id}"
    return chat_id


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(1.0, float(response.headers.get("Retry-After", "")))
    except ValueError:
        return 2.0


class TeamsSender:
    platform = PLATFORM.name
    reads_store = False

    def __init__(
        self,
        *,
        app_id: str,
        token: BotToken,
        api_base: str,
        limiter: Limiter,
        progress: Progress,
        service_urls: ServiceUrls | None = None,
        socket_options: Sequence[SocketOption] = (),
    ) -> None:
        self._token = token
        self._api = api_base.rstrip("/")
        self._service_urls = service_urls
        self._client = httpx.Client(timeout=TIMEOUT, transport=http_transport(socket_options))
        self._limiter = limiter
        self._progress = progress
        self._keys = bot_key(PLATFORM.name, app_id)

    def buckets(self, chat_id: str) -> list[Bucket]:
        return [Bucket(f"{self._keys}:chat:{chat_id}", *PER_CHAT), Bucket(self._keys, *PER_BOT)]

    def cooldowns(self, chat_id: str) -> list[str]:
        return [f"{self._keys}:cool:chat:{chat_id}", f"{self._keys}:cool"]

    def send(self, row: OutboxRow) -> Sent:
        parts = split_for(PLATFORM, row.text)
        done = self._progress.sent_parts(row.id)
        conversation = conversation_of(row.chat_id, row.thread_id)
        base = self.base_of(row.chat_id)
        for index in range(len(done), len(parts)):
            wait = self._limiter.acquire(
                self.buckets(row.chat_id), self.cooldowns(row.chat_id), want=len(parts) - index
            )
            if wait > 0:
                raise RetryLater(wait, f"teams rate limit for {row.chat_id}")
            reply_to = row.reply_to if index == 0 else None
            sent = self.post(
                conversation, parts[index], reply_to=reply_to, chat_id=row.chat_id, base=base
            )
            self._progress.part_sent(row.id, sent)
            done.append(sent)
        return Sent(",".join(done) if done else None)

    def base_of(self, chat_id: str) -> str:
        """The service URL replies to `chat_id` go to (its activities', else api_base)."""
        found = self._service_urls.of(chat_id) if self._service_urls is not None else None
        return found.rstrip("/") if found else self._api

    def post(
        self,
        conversation: str,
        text: str,
        *,
        reply_to: str | None,
        chat_id: str,
        base: str | None = None,
    ) -> str:
        """One message activity; returns its id. Raises RetryLater, Undeliverable, SendFailed."""
        root = base or self.base_of(chat_id)
        path = f"{root}/v3/conversations/{quote(conversation, safe='')}/activities"
        if reply_to:
            path += f"/{quote(reply_to, safe='')}"
        body = {"type": "message", "text": text, "textFormat": "plain"}
        if reply_to:
            body["replyToId"] = reply_to
        headers = {
            "Authorization": f"Bearer {self._token.get()}",
            "Content-Type": "application/json; charset=utf-8",
        }
        content = json.dumps(body, ensure_ascii=False).encode()  # escapes would double its size
        try:
            response = self._client.post(path, content=content, headers=headers)
        except httpx.HTTPError as exc:
            raise SendFailed(f"teams: {type(exc).__name__}") from None
        if response.status_code in (200, 201, 202):
            try:
                found = response.json()
            except ValueError:
                found = {}
            return str(found.get("id") or "") if isinstance(found, dict) else ""
        raise self._map(chat_id, response)

    def _map(self, chat_id: str, response: httpx.Response) -> Exception:
        status = response.status_code
        detail = _detail(response)
        if status == 429:
            wait = _retry_after(response)
            self._limiter.cool_down(self.cooldowns(chat_id)[0], wait)
            return RetryLater(wait, f"teams 429: {detail}: retry after {wait:g} s")
        if status == 401:
            self._token.forget()
            return SendFailed(f"teams 401: {detail}: the bot token was refused")
        if status >= 500:
            return SendFailed(f"teams {status}: {detail}")
        return Undeliverable(f"teams {status}: {detail}")

    def open_thread(self, chat_id: str, title: str) -> str:
        """A post in a channel whose id roots a reply chain; ThreadUnavailable elsewhere."""
        if chat_type_of(chat_id) != CHANNEL:
            raise ThreadUnavailable("teams: only a channel has reply chains")
        try:
            root = self.post(chat_id, f"🧵 {title}", reply_to=None, chat_id=chat_id)
        except (RetryLater, Undeliverable, SendFailed) as exc:
            raise ThreadUnavailable(f"teams: {exc}") from None
        if not root:
            raise ThreadUnavailable("teams: the post that would root the thread has no id")
        return root

    def close(self) -> None:
        self._client.close()
        if self._service_urls is not None:
            self._service_urls.close()


def _detail(response: httpx.Response) -> str:
    try:
        found = response.json()
    except ValueError:
        return f"HTTP {response.status_code}"
    error = found.get("error") if isinstance(found, dict) else None
    if isinstance(error, dict):
        return " ".join(str(error[k]) for k in ("code", "message") if error.get(k)) or "refused"
    return f"HTTP {response.status_code}"


def _on(host: str, known: tuple[str, ...]) -> bool:
    return any(host == k or host.endswith("." + k) for k in known)


class TeamsFetcher:
    """A turn's files: Bot Connector images with the bot token, SharePoint files without."""

    def __init__(self, *, token: BotToken, api_base: str) -> None:
        self._token = token
        self._api_base = api_base

    def fetch(self, attachment: Attachment, max_bytes: int) -> bytes:
        url = attachment.url or ""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        base = urlsplit(self._api_base)
        ours = (parts.scheme, parts.netloc.lower()) == (base.scheme, base.netloc.lower())
        if ours or (parts.scheme == "https" and _on(host, CONNECTOR_HOSTS)):
            try:
                token = self._token.get()
            except SendFailed as exc:
                raise FetchFailed(str(exc)) from None
            download = UrlFetcher(token=token, hosts=CONNECTOR_HOSTS, api_base=self._api_base)
        elif parts.scheme == "https" and _on(host, FILE_HOSTS):
            download = UrlFetcher()  # a pre-authenticated download URL: no credentials
        else:
            raise FetchFailed(f"not fetched: {host or '?'} is not a Teams or SharePoint host")
        try:
            return download.fetch(attachment, max_bytes)
        finally:
            download.close()

    def close(self) -> None:
        """Nothing is held between fetches."""


def _token(conf: TeamsSettings) -> BotToken:
    assert conf.token is not None and conf.app_id is not None
    return BotToken(
        app_id=conf.app_id, password=conf.token.get_secret_value(), token_url=conf.token_url
    )


def build(conf: TeamsSettings, deps: SenderDeps) -> TeamsSender:
    """The sender for `platforms.teams` (the descriptor's `sender`)."""
    assert conf.app_id is not None
    return TeamsSender(
        app_id=conf.app_id,
        token=_token(conf),
        api_base=conf.api_base or CONNECTOR,
        limiter=deps.limiter,
        progress=deps.progress,
        service_urls=ServiceUrls(conf, deps.settings.resolved_database_url),
        socket_options=deps.socket_options,
    )


def fetcher(conf: TeamsSettings) -> TeamsFetcher:
    """The attachment fetcher for `platforms.teams` (the descriptor's `fetcher`)."""
    return TeamsFetcher(token=_token(conf), api_base=conf.api_base or CONNECTOR)
