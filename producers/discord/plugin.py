"""Discord's receiving side: no HTTP routes, one gateway connection."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from producers.gateway.deps import Gateway
from producers.gateway.plugin import Options, ReceiverPlugin
from shared.platforms.discord import DiscordSettings


class DiscordPlugin(ReceiverPlugin):
    def connection(
        self, gateway: Gateway, conf: DiscordSettings, options: Options
    ) -> Coroutine[Any, Any, None] | None:
        from producers.discord.receiver import DiscordReceiver

        assert conf.token is not None
        return DiscordReceiver(
            gateway, token=conf.token.get_secret_value(), api_base=conf.api_base or ""
        ).run()


PLUGIN = DiscordPlugin()
