"""WhatsApp: the Cloud API's webhook (`GET|POST /whatsapp/webhook`, signed) in, Graph API out.

Replies go to `POST {api_base}/{phone_number_id}/messages` over httpx: pywa (the Python
library for the Cloud API) sets its client's base URL to `https://graph.facebook.com/v…`
itself, so it cannot be pointed at a proxy or a local test double as `api_base` must be.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import SecretStr

from shared.platforms import DM, GROUP
from shared.platforms.descriptor import Platform, Route
from shared.settings import PlatformSettings

WHATSAPP = "whatsapp"
GRAPH_API = "https://graph.facebook.com/v23.0"


class WhatsAppSettings(PlatformSettings):
    blank_is_unset: ClassVar[frozenset[str]] = PlatformSettings.blank_is_unset | {
        "phone_number_id",
        "app_secret",
        "verify_token",
    }

    api_base: str | None = GRAPH_API  # the Graph API root with its version
    phone_number_id: str | None = None  # the business number replies are sent from
    app_secret: SecretStr | None = None  # signs every webhook POST (X-Hub-Signature-256)
    verify_token: SecretStr | None = None  # the string Meta echoes in the GET handshake


def chat_type_of(chat_id: str) -> str:
    """A user's chat is their wa_id (digits); a group id (Groups API) is not."""
    return DM if chat_id.isdigit() else GROUP


PLATFORM = Platform(
    name=WHATSAPP,
    order=40,
    title="WhatsApp",
    settings=WhatsAppSettings,
    receiver="producers.whatsapp.plugin:PLUGIN",
    sender="workers.delivery.whatsapp:build",
    fetcher="workers.delivery.whatsapp:fetcher",
    routes=(
        Route("/whatsapp/webhook", "verify", ("GET",)),
        Route("/whatsapp/webhook", "webhook"),
    ),
    message_limit=4096,  # characters of a text message's body
    # Cloud API throughput: 80 messages/s per business number (the whole fleet); pair rate:
    # about one message every 6 s to one user, after a burst.
    rate_limits={"number": (80.0, 80.0), "chat": (1 / 6, 45.0)},
    secrets=("token", "app_secret", "verify_token"),
    chat_type_of=chat_type_of,
    keys_from_chat_id=True,
    compose_service="whatsapp",
    receiver_sdks=(),  # httpx, an ordinary dependency
    sender_sdks=(),
)
