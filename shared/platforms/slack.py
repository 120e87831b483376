"""Slack: the Events API (`POST /slack/events`, signed) or Socket Mode; replies by the Web API."""

from __future__ import annotations

from typing import ClassVar

from pydantic import SecretStr

from shared.platforms import CHANNEL, DM, SLACK
from shared.platforms.descriptor import Platform, Route, Sdk
from shared.settings import EditablePlatformSettings, PlatformSettings

SLACK_SDK = Sdk("slack_sdk", "slack_sdk")
AIOHTTP = Sdk("aiohttp", "aiohttp")  # Socket Mode's transport


class SlackSettings(EditablePlatformSettings):
    blank_is_unset: ClassVar[frozenset[str]] = PlatformSettings.blank_is_unset | {
        "signing_secret",
        "app_token",
    }

    api_base: str | None = "https://slack.com/api/"
    signing_secret: SecretStr | None = None
    socket_mode: bool = False  # Socket Mode instead of the Events API over HTTP (development)
    app_token: SecretStr | None = None  # xapp-… token, Socket Mode only
    # The app is an AI app ("Agents & AI Apps" on): while a turn from an assistant thread runs,
    # the thread shows its status (assistant.threads.setStatus) until the reply is posted.
    assistant_status: bool = False


def chat_type_of(chat_id: str) -> str:
    """Direct-message conversation ids start with D."""
    return DM if chat_id.startswith("D") else CHANNEL


PLATFORM = Platform(
    name=SLACK,
    order=20,
    title="Slack",
    settings=SlackSettings,
    receiver="producers.slack.plugin:PLUGIN",
    sender="workers.delivery.slack:build",
    fetcher="workers.delivery.fetch:slack_fetcher",
    routes=(Route("/slack/events", "events"),),
    message_limit=4000,  # Slack truncates at 40,000 characters but asks for at most 4,000
    rate_limits={"chat": (1.0, 3.0), "bot": (20.0, 40.0)},
    secrets=("token", "signing_secret", "app_token"),
    quiet_loggers=("slack_sdk",),
    redacted_loggers=("slack_sdk.web.base_client", "slack_sdk.socket_mode"),
    chat_type_of=chat_type_of,
    compose_service="slack",
    receiver_sdks=(SLACK_SDK, AIOHTTP),
    sender_sdks=(SLACK_SDK,),
)
