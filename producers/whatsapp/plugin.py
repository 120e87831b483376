"""WhatsApp's receiving side: the webhook routes (no long-lived connection)."""

from __future__ import annotations

from producers.gateway.deps import Gateway
from producers.gateway.plugin import GatewayError, Options, ReceiverPlugin
from producers.whatsapp.receiver import WhatsAppReceiver
from shared.platforms.whatsapp import GRAPH_API, WhatsAppSettings


class WhatsAppPlugin(ReceiverPlugin):
    def build(self, gateway: Gateway, conf: WhatsAppSettings) -> WhatsAppReceiver | None:
        if not conf.enabled or conf.app_secret is None:
            return None  # unsigned posts are never accepted: no secret, no route
        return WhatsAppReceiver(
            gateway,
            app_secret=conf.app_secret.get_secret_value(),
            verify_token=conf.verify_token.get_secret_value() if conf.verify_token else None,
            phone_number_id=conf.phone_number_id,
            token=conf.token.get_secret_value() if conf.token else None,
            api_base=conf.api_base or GRAPH_API,
        )

    def check(self, conf: WhatsAppSettings, options: Options) -> None:
        missing = [
            f"platforms.whatsapp.{key}"
            for key in ("phone_number_id", "app_secret", "verify_token")
            if getattr(conf, key) is None
        ]
        if missing:
            raise GatewayError(f"the WhatsApp webhook needs {', '.join(missing)}")


PLUGIN = WhatsAppPlugin()
