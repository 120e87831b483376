"""Signal through signal-cli's REST daemon (bbernhard/signal-cli-rest-api), one account each.

hermes never speaks Signal's protocol itself: the daemon holds the account's keys (it is
registered or linked there) and hermes polls its receive endpoint and posts to its send
endpoint. `token` is the account's number in E.164 (`+15551234567`): the daemon has no
credential of its own, and the number is what every one of its endpoints is addressed by. It
is redacted from logs like a token. `api_base` is the daemon's URL (it listens on port 8080).

Chat ids: a direct message's is the sender's number (or, for a sender who hides it, their
ACI uuid); a group's is the daemon's send id for it, `group.` + base64 of the group id the
envelope carries, so a reply can be addressed to the chat id as it is.
"""

from __future__ import annotations

import re
from typing import Self

from pydantic import field_validator, model_validator

from shared.platforms import DM, GROUP
from shared.platforms.descriptor import Platform, Sdk
from shared.settings import PlatformSettings

SIGNAL = "signal"
HTTPX = Sdk("httpx", "httpx")
DAEMON = "http://127.0.0.1:8080"
GROUP_PREFIX = "group."
E164 = re.compile(r"\+[1-9][0-9]{6,14}")


class SignalSettings(PlatformSettings):
    """`platforms.signal.*`: `token` is the account's number, `api_base` the daemon's URL."""

    api_base: str | None = DAEMON
    poll_timeout: int = 10  # seconds the daemon waits for messages before answering []
    # Envelopes one receive takes at most: the daemon acknowledges them to Signal's servers
    # before answering, so a receiver killed before they are committed loses at most these
    # (producers/signal/receiver.py); a burst costs one receive per this many envelopes.
    receive_max_messages: int = 10

    @field_validator("api_base")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("platforms.signal.api_base must be the daemon's http(s) URL")
        return value.rstrip("/") if value else value

    @field_validator("poll_timeout")
    @classmethod
    def _timeout(cls, value: int) -> int:
        if not 1 <= value <= 60:
            raise ValueError("platforms.signal.poll_timeout must be 1 to 60 seconds")
        return value

    @field_validator("receive_max_messages")
    @classmethod
    def _max_messages(cls, value: int) -> int:
        if not 1 <= value <= 1000:
            raise ValueError("platforms.signal.receive_max_messages must be 1 to 1000")
        return value

    @model_validator(mode="after")
    def _number(self) -> Self:
        if self.token is not None and not E164.fullmatch(self.token.get_secret_value()):
            raise ValueError(
                "platforms.signal.token is the account's number in E.164 (+15551234567)"
            )
        return self


def chat_type_of(chat_id: str) -> str:
    """A group's chat id is its send id (`group.…`); anything else is one person."""
    return GROUP if chat_id.startswith(GROUP_PREFIX) else DM


PLATFORM = Platform(
    name=SIGNAL,
    order=60,
    title="Signal",
    settings=SignalSettings,
    receiver="producers.signal.plugin:PLUGIN",
    sender="workers.delivery.signal:build",
    fetcher="workers.delivery.signal:fetcher",
    # Signal takes messages far longer than this (long ones go as a text attachment), but a
    # wall of text on a phone is unreadable: replies go in parts of at most 2,000 characters.
    message_limit=2000,
    # Signal's servers answer a burst from one account with a 413 "rate limit" and a captcha
    # challenge; about one message a second per chat and a few a second per account is safe.
    rate_limits={"chat": (1.0, 3.0), "group": (0.5, 3.0), "bot": (3.0, 10.0)},
    secrets=("token",),
    quiet_loggers=("httpx", "httpcore"),
    chat_type_of=chat_type_of,
    keys_from_chat_id=True,
    compose_service="signal",
    receiver_sdks=(HTTPX,),
    sender_sdks=(HTTPX,),
)
