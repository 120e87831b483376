"""SMS's receiving side: only the webhook route (Twilio's number is configured in its console)."""

from __future__ import annotations

import logging

from producers.gateway.deps import Gateway
from producers.gateway.plugin import Options, ReceiverPlugin
from producers.sms.receiver import SmsReceiver
from shared.platforms.sms import SmsSettings

log = logging.getLogger(__name__)


class SmsPlugin(ReceiverPlugin):
    def build(self, gateway: Gateway, conf: SmsSettings) -> SmsReceiver | None:
        if not conf.enabled or conf.token is None:
            return None
        return SmsReceiver(
            gateway, token=conf.token.get_secret_value(), webhook_url=conf.webhook_url
        )

    async def starting(self, gateway: Gateway, conf: SmsSettings, options: Options) -> None:
        if conf.webhook_url is None:
            log.info(
                "sms: no platforms.sms.webhook_url: signatures are checked against the URL "
                "each request arrives at (set it when a proxy sits in front)"
            )


PLUGIN = SmsPlugin()
