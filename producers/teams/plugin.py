"""Teams' receiving side: the messaging endpoint (the Azure bot registration points at it)."""

from __future__ import annotations

from producers.gateway.deps import Gateway
from producers.gateway.plugin import GatewayError, Options, ReceiverPlugin
from producers.teams.receiver import TeamsReceiver
from shared.platforms.teams import TeamsSettings


class TeamsPlugin(ReceiverPlugin):
    def build(self, gateway: Gateway, conf: TeamsSettings) -> TeamsReceiver | None:
        if not conf.enabled or conf.token is None or conf.app_id is None or not conf.api_base:
            return None  # no app id, no audience to check tokens against: no route
        return TeamsReceiver(gateway, conf)

    def check(self, conf: TeamsSettings, options: Options) -> None:
        if conf.app_id is None:
            raise GatewayError("the Teams messaging endpoint needs platforms.teams.app_id")


PLUGIN = TeamsPlugin()
