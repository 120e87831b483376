"""Slack's receiving side: the Events API route, or Socket Mode."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from producers.gateway.deps import Gateway
from producers.gateway.plugin import GatewayError, Options, ReceiverPlugin
from producers.slack.receiver import SlackReceiver, run_socket_mode
from shared.platforms.slack import SlackSettings


class SlackPlugin(ReceiverPlugin):
    def build(self, gateway: Gateway, conf: SlackSettings) -> SlackReceiver | None:
        if not conf.enabled or (conf.signing_secret is None and not conf.socket_mode):
            return None
        return SlackReceiver(
            gateway,
            signing_secret=conf.signing_secret.get_secret_value() if conf.signing_secret else None,
            token=conf.token.get_secret_value() if conf.token else None,
            api_base=conf.api_base or "https://slack.com/api/",
        )

    def options(self, conf: SlackSettings, given: Options) -> dict[str, Any]:
        chosen = super().options(conf, given)
        chosen.setdefault("socket_mode", conf.socket_mode)
        return chosen

    def check(self, conf: SlackSettings, options: Options) -> None:
        if options.get("socket_mode") and conf.app_token is None:
            raise GatewayError("Slack Socket Mode needs platforms.slack.app_token")
        if not options.get("socket_mode") and conf.signing_secret is None:
            raise GatewayError("the Slack Events API needs platforms.slack.signing_secret")

    def connection(
        self, gateway: Gateway, conf: SlackSettings, options: Options
    ) -> Coroutine[Any, Any, None] | None:
        if not options.get("socket_mode"):
            return None
        receiver = self.build(gateway, conf)
        assert receiver is not None and conf.app_token is not None and conf.token is not None
        return run_socket_mode(
            receiver,
            app_token=conf.app_token.get_secret_value(),
            token=conf.token.get_secret_value(),
            api_base=conf.api_base or "",
        )


PLUGIN = SlackPlugin()
