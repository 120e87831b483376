"""Discord: the gateway connection (discord.py) in, REST replies out (httpx, no SDK)."""

from __future__ import annotations

from shared.platforms import DISCORD
from shared.platforms.descriptor import Platform, Sdk
from shared.settings import EditablePlatformSettings

DISCORD_PY = Sdk("discord", "discord.py")


class DiscordSettings(EditablePlatformSettings):
    api_base: str | None = "https://discord.com/api/v10"


PLATFORM = Platform(
    name=DISCORD,
    order=30,
    title="Discord",
    settings=DiscordSettings,
    receiver="producers.discord.plugin:PLUGIN",
    sender="workers.delivery.discord:build",
    fetcher="workers.delivery.fetch:cdn_fetcher",  # signed CDN URLs: no credentials
    message_limit=2000,  # characters of `content`
    rate_limits={"chat": (1.0, 5.0), "bot": (50.0, 50.0)},
    secrets=("token",),
    quiet_loggers=("discord.http", "discord.gateway", "discord.client"),
    compose_service="discord",
    receiver_sdks=(DISCORD_PY,),
    sender_sdks=(),  # replies go over Discord's REST API with httpx
)
