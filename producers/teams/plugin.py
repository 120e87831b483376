"""Teams' receiving side: the messaging endpoint (the Azure bot registration points at it)."""

from __future__ import annotations

import logging

from botframework.connector.auth import AuthenticationConstants
from botframework.connector.auth.jwt_token_extractor import JwtTokenExtractor

from producers.gateway.deps import Gateway
from producers.gateway.plugin import GatewayError, Options, ReceiverPlugin
from producers.teams.receiver import TeamsReceiver
from shared.platforms.teams import TeamsSettings

log = logging.getLogger(__name__)


class TeamsPlugin(ReceiverPlugin):
    def build(self, gateway: Gateway, conf: TeamsSettings) -> TeamsReceiver | None:
        if not conf.enabled or conf.token is None or conf.app_id is None or not conf.api_base:
            return None  # no app id, no audience to check tokens against: no route
        return TeamsReceiver(gateway, conf)

    def check(self, conf: TeamsSettings, options: Options) -> None:
        if conf.app_id is None:
            raise GatewayError("the Teams messaging endpoint needs platforms.teams.app_id")

    async def starting(self, gateway: Gateway, conf: TeamsSettings, options: Options) -> None:
        """Fetch the Bot Framework's signing keys before serving: botframework-connector
        fetches them synchronously, so the first activity would otherwise stall the event loop,
        and an unreachable metadata URL is said now (activities are refused until it answers,
        botframework-connector asking again at each)."""
        url = (
            conf.openid_metadata or AuthenticationConstants.TO_BOT_FROM_CHANNEL_OPENID_METADATA_URL
        )
        metadata = JwtTokenExtractor.get_open_id_metadata(url)
        try:
            await metadata.get("")  # refreshes the keys; no key has the empty id
        except IndexError:
            pass
        except Exception as exc:  # requests' errors, a document that is not metadata
            log.warning("teams: the signing keys at %s could not be fetched: %s", url, exc)
            return
        log.info("teams: %d signing keys from %s", len(metadata.keys), url)


PLUGIN = TeamsPlugin()
