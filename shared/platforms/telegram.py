"""Telegram: the Bot API over a webhook (`POST /telegram/webhook`) or long polling."""

from __future__ import annotations

from typing import ClassVar

from pydantic import SecretStr

from shared.platforms import DM, GROUP, TELEGRAM
from shared.platforms.descriptor import Platform, Route, Sdk
from shared.settings import EditablePlatformSettings, PlatformSettings

TELEGRAM_BOT = Sdk("telegram", "python-telegram-bot")


class TelegramSettings(EditablePlatformSettings):
    blank_is_unset: ClassVar[frozenset[str]] = PlatformSettings.blank_is_unset | {
        "webhook_secret",
        "webhook_url",
        "username",
    }

    api_base: str | None = "https://api.telegram.org/bot"
    webhook_secret: SecretStr | None = None
    polling: bool = False  # long polling instead of the webhook (no inbound access needed)
    webhook_url: str | None = None  # public URL of /telegram/webhook, registered at start
    # The bot's @username (without the @), which group messages mention; unset: asked of the
    # Bot API (getMe) once per receiver process, on the first group message.
    username: str | None = None


def chat_type_of(chat_id: str) -> str:
    """Groups and supergroups have negative ids; a user's private chat a positive one."""
    return DM if not chat_id.startswith("-") else GROUP


PLATFORM = Platform(
    name=TELEGRAM,
    order=10,
    title="Telegram",
    settings=TelegramSettings,
    receiver="producers.telegram.plugin:PLUGIN",
    sender="workers.delivery.telegram:build",
    fetcher="workers.delivery.fetch:telegram_fetcher",
    routes=(Route("/telegram/webhook", "webhook"),),
    message_limit=4096,  # UTF-16 code units of the text after entities are parsed (plain text)
    utf16=True,
    rate_limits={"chat": (1.0, 3.0), "group": (20 / 60, 20.0), "bot": (30.0, 30.0)},
    secrets=("token", "webhook_secret"),
    quiet_loggers=("telegram",),
    redacted_loggers=(
        "telegram.Bot",
        "telegram.request",
        "telegram.request.BaseRequest",
        "telegram.request.HTTPXRequest",
    ),
    chat_type_of=chat_type_of,
    keys_from_chat_id=True,
    compose_service="telegram",
    receiver_sdks=(TELEGRAM_BOT,),
    sender_sdks=(TELEGRAM_BOT,),
)
