"""Microsoft Teams: Bot Framework activities at `POST /teams/messages`, Bot Connector replies.

Inbound requests carry a Bot Framework JWT, checked by botframework-connector against the
signing keys its OpenID metadata names (`openid_metadata`, Microsoft's by default). Replies are
`POST {serviceUrl}/v3/conversations/{conversation}/activities[/{activity}]` with a bot token
from the client-credentials grant at `token_endpoint` (`app_id` + the app password, `token`),
where serviceUrl is the one the conversation's latest activity named (its JWT's `serviceurl`
claim vouches for it; the Bot Framework asks bots to reply there, since a tenant's region
decides it). `api_base` is where replies go for a conversation no activity has come from yet,
and for every conversation when `reply_to_service_url` is off (a proxy, a test double).

Chat ids are Teams conversation ids without their reply-chain suffix: `a:…` a personal chat
(a DM), `19:…@thread.tacv2` (or `@thread.skype`) a channel, any other `19:…` a group chat.
A channel's reply chain (`19:…;messageid=<root>`) is a thread: its root message id.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self
from urllib.parse import urlsplit

from pydantic import field_validator, model_validator

from shared.platforms import CHANNEL, DM, GROUP
from shared.platforms.descriptor import Platform, Route, Sdk
from shared.settings import PlatformSettings

TEAMS = "teams"
BOTBUILDER = Sdk("botframework.connector", "botframework-connector")
# Where the Bot Framework's service URLs live (public cloud, GCC, GCC High, DoD): an
# activity naming another one is refused unless `service_urls` (or `api_base`) allows it.
SERVICE_URLS = (
    "https://smba.trafficmanager.net/",
    "https://smba.infra.gcc.teams.microsoft.com/",
    "https://smba.infra.gov.teams.microsoft.us/",
    "https://smba.infra.dod.teams.microsoft.us/",
)
# A conversation's service URL is stored as the platform cursor of this account + its chat id.
SERVICE_URL_CURSOR = "service_url:"
# The global Bot Connector endpoint: Microsoft documents it for any public-cloud conversation
# (the regional ones, /amer/, /emea/ …, are paths on the same host).
CONNECTOR = "https://smba.trafficmanager.net/teams/"
TOKEN_ENDPOINT = "https://login.microsoftonline.com/botframework.com/oauth2/v2.0/token"
SCOPE = "https://api.botframework.com/.default"
CHANNEL_SUFFIXES = ("@thread.tacv2", "@thread.skype")


def _http_url(value: str | None, key: str) -> str | None:
    if value is not None and urlsplit(value).scheme not in ("https", "http"):
        raise ValueError(f"{key} must be an http(s) URL")
    return value


class TeamsSettings(PlatformSettings):
    """`platforms.teams.*`. `token` is the bot's app password (client secret); `app_id` its
    Microsoft App ID, the audience every inbound JWT must name."""

    blank_is_unset: ClassVar[frozenset[str]] = PlatformSettings.blank_is_unset | {
        "app_id",
        "openid_metadata",
        "tenant_id",
    }

    # Replies go to the service URL of the conversation's latest activity; here when none is
    # known (a home channel from the settings) or when `reply_to_service_url` is false.
    api_base: str | None = CONNECTOR
    reply_to_service_url: bool = True
    # Prefixes an activity's serviceUrl must start with (api_base's origin is always allowed).
    service_urls: tuple[str, ...] = SERVICE_URLS
    app_id: str | None = None  # the Azure bot's Microsoft App ID
    tenant_id: str | None = None  # single-tenant bots: tokens come from this tenant
    token_endpoint: str = TOKEN_ENDPOINT  # where the bot token is asked for (client credentials)
    # The OpenID metadata naming the keys inbound JWTs are signed with (None: Microsoft's).
    openid_metadata: str | None = None

    @field_validator("api_base", "token_endpoint", "openid_metadata")
    @classmethod
    def _urls(cls, value: str | None) -> str | None:
        return _http_url(value, "a Teams endpoint")

    @field_validator("service_urls", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):  # HERMES_PLATFORMS__TEAMS__SERVICE_URLS=a/,b/
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("service_urls")
    @classmethod
    def _prefixes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for prefix in value:
            parts = urlsplit(prefix)
            if parts.scheme not in ("https", "http") or not parts.netloc:
                raise ValueError(f"service_urls: {prefix!r} must be an http(s) URL")
            if not parts.path.endswith("/"):
                raise ValueError(f"service_urls: {prefix!r} must end with '/'")
        return value

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if self.enabled and self.token is not None and self.app_id is None:
            raise ValueError("platforms.teams needs app_id (the Microsoft App ID) with its token")
        return self

    @property
    def token_url(self) -> str:
        """The token endpoint, for a single tenant's bot when `tenant_id` is set."""
        if self.tenant_id and self.token_endpoint == TOKEN_ENDPOINT:
            return TOKEN_ENDPOINT.replace("botframework.com", self.tenant_id)
        return self.token_endpoint


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def service_url_allowed(conf: TeamsSettings, url: str) -> bool:
    """Whether replies may go to `url`: on api_base's origin, or under one of `service_urls`
    (scheme and host compared without case, the path as a prefix)."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.netloc or parts.username:
        return False
    if conf.api_base and _origin(url) == _origin(conf.api_base):
        return True
    for prefix in conf.service_urls:
        allowed = urlsplit(prefix)
        if _origin(url) == _origin(prefix) and (parts.path or "/").startswith(allowed.path):
            return True
    return False


def chat_type_of(chat_id: str) -> str:
    """`a:…` is a personal chat; `19:…@thread.tacv2` a team's channel; other `19:…` a group."""
    if chat_id.startswith("a:"):
        return DM
    base = chat_id.partition(";")[0]
    return CHANNEL if base.endswith(CHANNEL_SUFFIXES) else GROUP


PLATFORM = Platform(
    name=TEAMS,
    order=60,
    title="Microsoft Teams",
    settings=TeamsSettings,
    receiver="producers.teams.plugin:PLUGIN",
    sender="workers.delivery.teams:build",
    fetcher="workers.delivery.teams:fetcher",
    routes=(Route("/teams/messages", "messages"),),
    # Teams refuses a message over about 28 KB (text, envelope and JSON escapes together):
    # 6,000 characters are at most 24,000 bytes of UTF-8, leaving room for the rest.
    message_limit=6000,
    # Per bot and conversation Teams allows 7 sends a second, 60 in 30 s and 1,800 an hour
    # (0.5/s sustained); per bot and tenant about 50 a second.
    rate_limits={"chat": (0.5, 7.0), "bot": (50.0, 50.0)},
    secrets=("token",),
    quiet_loggers=("msrest", "msal"),
    chat_type_of=chat_type_of,
    keys_from_chat_id=True,
    compose_service="teams",
    receiver_sdks=(BOTBUILDER,),
    sender_sdks=(),  # httpx, an ordinary dependency
)
