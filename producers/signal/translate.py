"""One signal-cli-rest-api envelope (an item of `GET /v1/receive/{number}`) → InboundTurn.

Pure: no I/O. Decisions it pins:
- event id = `<sender>:<timestamp>`: Signal's message timestamp is the message's id for its
  sender (quotes, reactions and deletes name a message that way), so a message fetched or
  recorded twice is one turn, and a redelivery is a no-op.
- chat id: the sender (number, else ACI uuid) for a direct message; `group.` + base64 of
  `dataMessage.groupInfo.groupId` for a group, which is the id `POST /v2/send` takes.
- only data messages with text or attachments are turns; receipts, typing, sync messages,
  reactions, remote deletes and group updates are ignored.
- attachments become URLs on the daemon (`/v1/attachments/{id}`); the worker fetches them.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from shared.platforms import DM, GROUP
from shared.platforms.signal import E164, GROUP_PREFIX, SIGNAL
from shared.turns import Attachment, InboundTurn

UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
ATTACHMENT_ID = re.compile(r"[A-Za-z0-9_.\-]{1,200}")
GROUP_ID = re.compile(r"[A-Za-z0-9+/_\-]{1,200}={0,2}")  # signal-cli writes group ids in base64
MAX_ATTACHMENTS = 32
MAX_TEXT = 64 * 1024


class BadEnvelope(ValueError):
    """Not an envelope signal-cli would produce: a field missing or of the wrong kind."""


@dataclass(frozen=True, slots=True)
class Ignored:
    reason: str


def _sender(envelope: dict[str, Any]) -> str:
    number = envelope.get("sourceNumber") or envelope.get("source")
    if isinstance(number, str) and E164.fullmatch(number):
        return number
    uuid = envelope.get("sourceUuid") or envelope.get("source")
    if isinstance(uuid, str) and UUID.fullmatch(uuid):
        return uuid.lower()
    raise BadEnvelope("the envelope has no sender (sourceNumber or sourceUuid)")


def _timestamp(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 10**15:
        raise BadEnvelope("timestamp must be a positive whole number of milliseconds")
    return value


def group_chat_id(group_id: str) -> str:
    """The send id of a group (what `recipients` takes) from the id its messages carry."""
    return GROUP_PREFIX + base64.b64encode(group_id.encode()).decode()


def _kind(mime: str) -> str:
    major = mime.split("/", 1)[0]
    if major in ("image", "audio"):
        return major
    if major == "text" or mime == "application/pdf":
        return "document"
    return "file"


def _attachments(data: dict[str, Any], api_base: str) -> tuple[Attachment, ...]:
    items = data.get("attachments") or []
    if not isinstance(items, list) or len(items) > MAX_ATTACHMENTS:
        raise BadEnvelope(f"attachments must be a list of at most {MAX_ATTACHMENTS}")
    found = []
    for item in items:
        if not isinstance(item, dict):
            raise BadEnvelope("an attachment is not an object")
        ident = item.get("id")
        if not isinstance(ident, str) or not ATTACHMENT_ID.fullmatch(ident):
            raise BadEnvelope("an attachment has no usable id")
        mime = item.get("contentType")
        mime = mime.strip().lower() if isinstance(mime, str) and mime.strip() else None
        name = item.get("filename") if isinstance(item.get("filename"), str) else None
        size = item.get("size") if isinstance(item.get("size"), int) else None
        url = f"{api_base}/v1/attachments/{quote(ident, safe='')}"
        found.append(Attachment(_kind(mime or ""), name, mime, url, None, size))
    return tuple(found)


def translate(item: Any, *, account: str, api_base: str) -> InboundTurn | Ignored:
    """One item of the receive list → its turn, or why it is none. Raises BadEnvelope."""
    if not isinstance(item, dict) or not isinstance(item.get("envelope"), dict):
        raise BadEnvelope("not an object with an envelope")
    if item.get("account") not in (None, account):
        return Ignored("an envelope for another account")
    envelope: dict[str, Any] = item["envelope"]
    data = envelope.get("dataMessage")
    if data is None:
        return Ignored("not a data message (receipt, typing, sync, call)")
    if not isinstance(data, dict):
        raise BadEnvelope("dataMessage is not an object")
    sender = _sender(envelope)
    stamp = _timestamp(envelope.get("timestamp", data.get("timestamp")))
    text = data.get("message")
    if text is not None and not isinstance(text, str):
        raise BadEnvelope("dataMessage.message is not text")
    if text is not None and len(text) > MAX_TEXT:
        raise BadEnvelope("dataMessage.message is over 64 KiB")
    if data.get("reaction") is not None or data.get("remoteDelete") is not None:
        return Ignored("a reaction or a deletion")
    group = data.get("groupInfo")
    chat_id, chat_type = sender, DM
    if group is not None:
        group_id = group.get("groupId") if isinstance(group, dict) else None
        if not isinstance(group_id, str) or not GROUP_ID.fullmatch(group_id):
            raise BadEnvelope("dataMessage.groupInfo has no base64 groupId")
        if group.get("type") not in (None, "DELIVER"):
            return Ignored(f"a group {str(group.get('type')).lower()}")
        chat_id, chat_type = group_chat_id(group_id), GROUP
    attachments = _attachments(data, api_base)
    if not (text or "").strip() and not attachments:
        return Ignored("nothing to answer (no text or attachments)")
    name = envelope.get("sourceName")
    return InboundTurn(
        platform=SIGNAL,
        chat_id=chat_id,
        chat_type=chat_type,
        event_id=f"{sender}:{stamp}",
        text=text or "",
        user_id=sender,
        user_name=name if isinstance(name, str) and name else None,
        message_id=f"{sender}:{stamp}",
        attachments=attachments,
    )
