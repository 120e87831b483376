"""Telegram's receiving side: the webhook route, long polling, registering the webhook URL."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from producers.gateway.deps import Gateway
from producers.gateway.plugin import GatewayError, Options, ReceiverPlugin
from producers.telegram.receiver import TelegramPoller, TelegramReceiver, register_webhook
from shared.platforms.telegram import TelegramSettings


class TelegramPlugin(ReceiverPlugin):
    def build(self, gateway: Gateway, conf: TelegramSettings) -> TelegramReceiver | None:
        if not conf.enabled or conf.token is None:
            return None
        secret = conf.webhook_secret.get_secret_value() if conf.webhook_secret else None
        return TelegramReceiver(
            gateway,
            token=conf.token.get_secret_value(),
            secret=secret,
            api_base=conf.api_base or "",
            username=conf.username,
        )

    def options(self, conf: TelegramSettings, given: Options) -> dict[str, Any]:
        chosen = super().options(conf, given)
        if chosen.get("polling") is None:  # a webhook needs its secret; without one, poll
            chosen["polling"] = conf.polling or conf.webhook_secret is None
        chosen["webhook_url"] = chosen.get("webhook_url") or conf.webhook_url
        return chosen

    def check(self, conf: TelegramSettings, options: Options) -> None:
        if not options.get("polling") and conf.webhook_secret is None:
            raise GatewayError(
                "the Telegram webhook needs platforms.telegram.webhook_secret (or use --polling)"
            )

    async def starting(self, gateway: Gateway, conf: TelegramSettings, options: Options) -> None:
        url = options.get("webhook_url")
        if not url or options.get("polling"):
            return
        assert conf.token is not None and conf.webhook_secret is not None
        try:
            await register_webhook(
                token=conf.token.get_secret_value(),
                api_base=conf.api_base or "",
                url=url,
                secret=conf.webhook_secret.get_secret_value(),
            )
        except Exception as exc:
            raise GatewayError(f"cannot register the Telegram webhook: {exc}") from None

    def connection(
        self, gateway: Gateway, conf: TelegramSettings, options: Options
    ) -> Coroutine[Any, Any, None] | None:
        if not options.get("polling"):
            return None
        receiver = self.build(gateway, conf)
        assert receiver is not None and conf.token is not None
        return TelegramPoller(
            receiver, token=conf.token.get_secret_value(), api_base=conf.api_base or ""
        ).run()


PLUGIN = TelegramPlugin()
