"""Fetching a turn's attachments from Telegram, Slack and Discord (the agent's media port).

- Telegram: the turn holds `telegram:file/<file_id>`; `getFile` gives a path, downloaded from
  the Bot API's file root (`…/file/bot<token>/<path>`, derived from `api_base`). The token is
  in that URL, so it is never logged or stored, and errors are redacted.
- Slack: `url_private`, with the bot token as a bearer header — only to Slack's own https
  hosts (`slack.com` and its subdomains) or the host of the configured `api_base`; a URL
  elsewhere in a (signed) event is refused, never sent the token.
- Discord: the attachment's CDN URL (signed; no credentials).

Every download streams and stops at `max_bytes`. A platform's descriptor names its fetcher
factory (`fetcher`); `register_platform_fetchers` adds those whose platform has a token to a
workers.agent.media.Fetchers registry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import httpx

from shared.platforms import registry
from shared.platforms.descriptor import load
from shared.settings import PlatformSettings, Settings
from shared.turns import Attachment

TIMEOUT = 30.0
# Between tries of an attachment whose fetch failed on the way (no route, refused, reset, timed
# out, a 429 or a 5xx): about half a minute in all, so a network blip or a platform's restart
# costs the turn some seconds, not the attachment.
RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0)
TELEGRAM_PREFIX = "telegram:file/"
SLACK_HOSTS = ("slack.com",)


log = logging.getLogger(__name__)


class FetchFailed(Exception):
    """The attachment could not be fetched (gone, too big, refused); the message says why.

    `transient`: the request got no answer, or a 429 or 5xx one; trying again later may work.
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


def unreachable(exc: httpx.HTTPError, message: str) -> FetchFailed:
    """FetchFailed for an httpx error: transient when the request got no answer at all."""
    return FetchFailed(message, transient=isinstance(exc, httpx.TransportError))


def _transient(status: int) -> bool:
    return status == 429 or status >= 500


def patiently(
    fetch: Callable[[], bytes],
    *,
    delays: tuple[float, ...] = RETRY_DELAYS,
    sleep: Callable[[float], None] = time.sleep,
) -> bytes:
    """`fetch()`, tried again after each delay while it fails transiently."""
    for delay in delays:
        try:
            return fetch()
        except FetchFailed as exc:
            if not exc.transient:
                raise
            log.warning("attachment not fetched (%s); trying again in %.1f s", exc, delay)
        sleep(delay)
    return fetch()


def _download(client: httpx.Client, url: str, max_bytes: int, **kwargs: Any) -> bytes:
    with client.stream("GET", url, **kwargs) as response:
        if response.status_code != 200:
            status = response.status_code
            raise FetchFailed(f"download answered {status}", transient=_transient(status))
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            raise FetchFailed(f"{declared} bytes is over the {max_bytes}-byte limit")
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > max_bytes:
                raise FetchFailed(f"over the {max_bytes}-byte limit")
            chunks.append(chunk)
    return b"".join(chunks)


def telegram_file_base(api_base: str) -> str:
    """`https://api.telegram.org/bot` → `https://api.telegram.org/file/bot` (a proxy alike)."""
    root, _, last = api_base.rstrip("/").rpartition("/")
    return f"{root}/file/{last}"


class TelegramFetcher:
    def __init__(self, *, token: str, api_base: str) -> None:
        self._token = token
        self._api = f"{api_base}{token}"
        self._files = f"{telegram_file_base(api_base)}{token}"
        self._client = httpx.Client(timeout=TIMEOUT)

    def fetch(self, attachment: Attachment, max_bytes: int) -> bytes:
        url = attachment.url or ""
        if not url.startswith(TELEGRAM_PREFIX):
            raise FetchFailed("not a Telegram file reference")
        file_id = url.removeprefix(TELEGRAM_PREFIX)
        if attachment.size is not None and attachment.size > max_bytes:
            raise FetchFailed(f"{attachment.size} bytes is over the {max_bytes}-byte limit")
        try:
            response = self._client.post(f"{self._api}/getFile", json={"file_id": file_id})
            if _transient(response.status_code):
                raise FetchFailed(f"getFile answered {response.status_code}", transient=True)
            answer = response.json()
            if not answer.get("ok") or not answer.get("result", {}).get("file_path"):
                raise FetchFailed(f"getFile refused: {answer.get('description', 'no path')}")
            path = answer["result"]["file_path"]
            return _download(self._client, f"{self._files}/{path}", max_bytes)
        except httpx.HTTPError as exc:
            message = f"telegram: {type(exc).__name__}: {exc}".replace(self._token, "***")
            raise unreachable(exc, message) from None
        except ValueError as exc:
            raise FetchFailed(f"telegram: {type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        self._client.close()


def credential_origins(hosts: Iterable[str], api_base: str | None) -> tuple[set[str], set[str]]:
    """(https hosts, origins like 'http://127.0.0.1:8000') a platform's token may be sent to."""
    origins: set[str] = set()
    if api_base:
        parts = urlsplit(api_base)
        origins.add(f"{parts.scheme}://{parts.netloc}".lower())
    return {h.lower() for h in hosts}, origins


class UrlFetcher:
    """Slack's url_private (bearer token); with no token, a plain GET (Discord's CDN).

    With a token, the URL must be https on one of `hosts` (or a subdomain) or share the
    origin of the configured API base; httpx drops the header itself on a redirect that
    leaves the origin.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        hosts: Iterable[str] = (),
        api_base: str | None = None,
    ) -> None:
        self._token = token
        self._hosts, self._origins = credential_origins(hosts, api_base)
        self._client = httpx.Client(timeout=TIMEOUT, follow_redirects=True)

    def may_carry_token(self, url: str) -> bool:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if f"{parts.scheme}://{parts.netloc}".lower() in self._origins:
            return True
        return parts.scheme == "https" and any(
            host == known or host.endswith("." + known) for known in self._hosts
        )

    def fetch(self, attachment: Attachment, max_bytes: int) -> bytes:
        if not attachment.url or not attachment.url.startswith(("https://", "http://")):
            raise FetchFailed("no download URL")
        if self._token and not self.may_carry_token(attachment.url):
            host = urlsplit(attachment.url).hostname or "?"
            raise FetchFailed(f"not fetched: {host} is not the platform's (no credentials sent)")
        if attachment.size is not None and attachment.size > max_bytes:
            raise FetchFailed(f"{attachment.size} bytes is over the {max_bytes}-byte limit")
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        try:
            return _download(self._client, attachment.url, max_bytes, headers=headers)
        except httpx.HTTPError as exc:
            message = f"{type(exc).__name__}: {exc}"
            if self._token:
                message = message.replace(self._token, "***")
            raise unreachable(exc, message) from None

    def close(self) -> None:
        self._client.close()


def telegram_fetcher(conf: PlatformSettings) -> TelegramFetcher:
    assert conf.token is not None
    return TelegramFetcher(
        token=conf.token.get_secret_value(),
        api_base=conf.api_base or "https://api.telegram.org/bot",
    )


def slack_fetcher(conf: PlatformSettings) -> UrlFetcher:
    assert conf.token is not None
    return UrlFetcher(
        token=conf.token.get_secret_value(), hosts=SLACK_HOSTS, api_base=conf.api_base
    )


def cdn_fetcher(conf: PlatformSettings) -> UrlFetcher:
    return UrlFetcher()


def platform_fetchers(settings: Settings) -> dict[str, Any]:
    """Fetchers for the registered platforms that have one and a token (descriptor `fetcher`)."""
    found: dict[str, Any] = {}
    for name, platform in registry.platforms().items():
        conf = settings.platforms.of(name)
        if platform.fetcher is not None and conf.configured:
            found[name] = load(platform.fetcher)(conf)
    return found


def register_platform_fetchers(registry: Any, settings: Settings) -> None:
    """`registry.register(platform, fetcher)` for each (workers.agent.media.Fetchers)."""
    for platform, fetcher in platform_fetchers(settings).items():
        registry.register(platform, fetcher)
