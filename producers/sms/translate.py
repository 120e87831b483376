"""Twilio's incoming-message webhook (its form fields, as a dict) → InboundTurn.

Pure: no I/O, no SDK. Decisions it pins (golden files in tests/fixtures/sms/):
- event id = `MessageSid`: unique per message, the same on a redelivery, so that is a no-op.
- chat and user id = `From` (E.164, or a short code): one number is one conversation, a DM.
  SMS has no groups and no threads.
- Carrier keywords (STOP, START, HELP and their synonyms: the whole body, any case) are
  Twilio's and the carrier's to answer; they are never a turn. With Advanced Opt-Out Twilio
  says so itself (`OptOutType`), which also means it is not a turn.
- MMS media (`NumMedia`, `MediaUrl<i>`, `MediaContentType<i>`) become attachments whose URL
  is the Twilio media resource; the worker fetches them with the account's credentials.
- Messages that arrived over another Twilio channel (`whatsapp:+…`, `messenger:…`) on the
  same URL are not SMS: ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from shared.platforms import DM
from shared.platforms.sms import E164, SHORT_CODE, SMS
from shared.turns import Attachment, InboundTurn

MESSAGE_SID = re.compile(r"(SM|MM)[0-9a-fA-F]{32}")
MAX_MEDIA = 10  # Twilio's own limit per MMS
# Twilio's default opt-out, opt-in and help keywords (the carrier answers them).
KEYWORDS = frozenset(
    {
        "STOP",
        "STOPALL",
        "UNSUBSCRIBE",
        "CANCEL",
        "END",
        "QUIT",
        "REVOKE",
        "OPTOUT",
        "START",
        "YES",
        "UNSTOP",
        "HELP",
        "INFO",
    }
)
OTHER_CHANNELS = ("whatsapp:", "messenger:", "rcs:")


class BadForm(ValueError):
    """Not an incoming-message webhook (a 400): a field missing or malformed."""


@dataclass(frozen=True, slots=True)
class Ignored:
    reason: str


def is_keyword(body: str) -> bool:
    """The whole message is a carrier keyword ("stop", " Stop. ")."""
    word = body.strip().rstrip(".!").strip().upper()
    return word in KEYWORDS


def _field(form: Mapping[str, str], name: str) -> str:
    value = form.get(name)
    if value is None or not value.strip():
        raise BadForm(f"{name} is missing")
    return value.strip()


def _media_count(form: Mapping[str, str]) -> int:
    raw = form.get("NumMedia", "0").strip() or "0"
    if not raw.isascii() or not raw.isdigit() or int(raw) > MAX_MEDIA:
        raise BadForm(f"NumMedia must be a whole number from 0 to {MAX_MEDIA}")
    return int(raw)


def _kind(mime: str) -> str:
    major = mime.split("/", 1)[0]
    if major in ("image", "audio"):
        return major
    if major == "text" or mime == "application/pdf":
        return "document"
    return "file"


def _attachments(form: Mapping[str, str]) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    for index in range(_media_count(form)):
        url = _field(form, f"MediaUrl{index}")
        if not url.startswith(("https://", "http://")):
            raise BadForm(f"MediaUrl{index} is not an http(s) URL")
        mime = (form.get(f"MediaContentType{index}") or "").strip().lower() or None
        found.append(Attachment(_kind(mime or ""), None, mime, url, None, None))
    return tuple(found)


def translate(form: Mapping[str, str]) -> InboundTurn | Ignored:
    """One webhook's fields → the turn they carry, or why they carry none. Raises BadForm."""
    sid = form.get("MessageSid") or form.get("SmsMessageSid") or ""
    if not MESSAGE_SID.fullmatch(sid.strip()):
        raise BadForm("MessageSid is missing or is not a message SID (SM… or MM…)")
    sender = _field(form, "From")
    if sender.lower().startswith(OTHER_CHANNELS):
        return Ignored(f"{sender.split(':', 1)[0]} message: not SMS")
    if not (E164.fullmatch(sender) or SHORT_CODE.fullmatch(sender)):
        raise BadForm("From is not a phone number (E.164) or a short code")
    if form.get("OptOutType"):
        return Ignored(f"carrier keyword ({form['OptOutType']}): Twilio answers it")
    body = form.get("Body") or ""
    attachments = _attachments(form)
    if is_keyword(body) and not attachments:
        return Ignored("carrier keyword: the carrier answers it")
    if not body.strip() and not attachments:
        return Ignored("nothing to answer (no text or media)")
    sid = sid.strip()
    return InboundTurn(
        platform=SMS,
        chat_id=sender,
        chat_type=DM,
        event_id=sid,
        text=body,
        user_id=sender,
        message_id=sid,
        attachments=attachments,
    )
