"""SMS through Twilio: signed form posts at `POST /sms/twilio`, replies by the REST API.

One phone number is one conversation: every SMS chat is a direct message (no groups, no
threads), its chat id the sender's number in E.164. The Auth Token is `token`; the account,
the number replies come from and the public webhook URL are this section's own keys.
"""

from __future__ import annotations

import re
from typing import ClassVar, Self

from pydantic import field_validator, model_validator

from shared.platforms import DM
from shared.platforms.descriptor import Platform, Route, Sdk
from shared.settings import PlatformSettings

SMS = "sms"
TWILIO = Sdk("twilio", "twilio")
TWILIO_API = "https://api.twilio.com"

ACCOUNT_SID = re.compile(r"AC[0-9a-fA-F]{32}")
SERVICE_SID = re.compile(r"MG[0-9a-fA-F]{32}")
E164 = re.compile(r"\+[1-9][0-9]{6,14}")
SHORT_CODE = re.compile(r"[0-9]{3,8}")


class SmsSettings(PlatformSettings):
    """`platforms.sms.*`. `token` is the account's Auth Token: it signs Twilio's webhooks and
    (with `account_sid`) authenticates the REST calls and media downloads."""

    blank_is_unset: ClassVar[frozenset[str]] = PlatformSettings.blank_is_unset | {
        "account_sid",
        "from_number",
        "messaging_service_sid",
        "webhook_url",
    }

    api_base: str | None = TWILIO_API
    account_sid: str | None = None  # AC…: whose REST API and media the token opens
    from_number: str | None = None  # the Twilio number replies come from (E.164 or short code)
    messaging_service_sid: str | None = None  # MG…: send through a Messaging Service instead
    # The exact URL Twilio posts to, as entered in its console: Twilio signs that URL, so
    # behind a proxy or load balancer it is not the URL the receiver sees. Unset: the request's.
    webhook_url: str | None = None

    @field_validator("account_sid")
    @classmethod
    def _account(cls, value: str | None) -> str | None:
        if value is not None and not ACCOUNT_SID.fullmatch(value):
            raise ValueError("an Account SID is AC followed by 32 hex digits")
        return value

    @field_validator("messaging_service_sid")
    @classmethod
    def _service(cls, value: str | None) -> str | None:
        if value is not None and not SERVICE_SID.fullmatch(value):
            raise ValueError("a Messaging Service SID is MG followed by 32 hex digits")
        return value

    @field_validator("from_number")
    @classmethod
    def _number(cls, value: str | None) -> str | None:
        if value is not None and not (E164.fullmatch(value) or SHORT_CODE.fullmatch(value)):
            raise ValueError("from_number must be E.164 (+15551234567) or a short code")
        return value

    @field_validator("webhook_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("https://", "http://")):
            raise ValueError("webhook_url must be the full http(s) URL Twilio posts to")
        return value

    @model_validator(mode="after")
    def _complete(self) -> Self:
        """With a token, replies must be sendable: a half-configured account is refused here,
        not discovered at the first failed delivery."""
        if self.enabled and self.token is not None:
            if self.account_sid is None:
                raise ValueError("platforms.sms needs account_sid (AC…) with its token")
            if self.from_number is None and self.messaging_service_sid is None:
                raise ValueError(
                    "platforms.sms needs from_number (or messaging_service_sid) to reply from"
                )
        return self


def chat_type_of(chat_id: str) -> str:
    """Every SMS conversation is one person's number."""
    return DM


PLATFORM = Platform(
    name=SMS,
    order=50,
    title="SMS",
    settings=SmsSettings,
    receiver="producers.sms.plugin:PLUGIN",
    sender="workers.delivery.sms:build",
    fetcher="workers.delivery.sms:fetcher",
    routes=(Route("/sms/twilio", "twilio"),),
    message_limit=1600,  # Twilio's limit for one message body (it sends it as segments)
    # Per recipient, and per sending number: a long code sends about one message a second
    # (Twilio queues what is over, but a queue hours long is worse than our own backoff).
    rate_limits={"chat": (1.0, 3.0), "bot": (1.0, 10.0)},
    secrets=("token",),
    quiet_loggers=("twilio",),  # its http_client logs every request's parameters at INFO
    redacted_loggers=("twilio.http_client",),
    chat_type_of=chat_type_of,
    keys_from_chat_id=True,
    compose_service="sms",
    receiver_sdks=(TWILIO,),
    sender_sdks=(TWILIO,),
)
