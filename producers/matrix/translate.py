"""One Matrix room timeline event (its JSON, as `/sync` returns it) → InboundTurn.

Pure: no I/O, no SDK. Decisions it pins:
- event id: the Matrix `event_id` (unique per homeserver), so a redelivered event is a no-op.
- chat: the room id. A room with more than two joined members is a group, else a DM; in a
  group only messages addressed to the bot count (mentioning it, or a known command).
- thread: an `m.thread` relation's root event id is `thread_id` (the session is the thread's).
- a rich reply's fallback (the quoted `> <@user> …` lines older clients put before the reply's
  own text, which the spec tells clients to strip) is cut from the text.
- `m.text`, `m.notice` and `m.emote` bodies are text; `m.image`, `m.file`, `m.audio` and
  `m.video` carry their `mxc://` URL as an attachment (the worker downloads it).
- Our own events, state events, redactions and encrypted events are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.commands import KNOWN, parse_command
from shared.platforms import DM, GROUP
from shared.platforms.matrix import MATRIX
from shared.turns import Attachment, InboundTurn

TEXT_TYPES = frozenset({"m.text", "m.notice", "m.emote"})
MEDIA_KINDS = {"m.image": "image", "m.audio": "audio", "m.file": "file", "m.video": "file"}


class BadEvent(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Ignored:
    reason: str


def _id(value: Any, what: str, sigil: str) -> str:
    if not isinstance(value, str) or not value.startswith(sigil) or len(value) < 2:
        raise BadEvent(f"{what} must be a {sigil}id")
    return value


def _attachment(msgtype: str, content: dict[str, Any]) -> Attachment:
    url = content.get("url")
    if not isinstance(url, str) or not url.startswith("mxc://"):
        raise BadEvent(f"{msgtype} needs an mxc:// url")
    found = content.get("info")
    info: dict[str, Any] = found if isinstance(found, dict) else {}
    mime = info.get("mimetype") if isinstance(info.get("mimetype"), str) else None
    size = info.get("size") if isinstance(info.get("size"), int) else None
    name = content.get("filename") or content.get("body")
    kind = MEDIA_KINDS[msgtype]
    if kind == "file" and mime and mime.startswith(("text/", "application/pdf")):
        kind = "document"
    return Attachment(kind, name if isinstance(name, str) else None, mime, url, None, size)


def _addressed(content: dict[str, Any], body: str, bot: str) -> bool:
    mentions = content.get("m.mentions")
    named = mentions.get("user_ids") if isinstance(mentions, dict) else None
    if isinstance(named, list) and bot in named:
        return True
    localpart = bot[1:].split(":", 1)[0]
    if bot in body or (localpart and body.lower().startswith(localpart.lower())):
        return True
    command = parse_command(body)
    return command is not None and command.name in KNOWN


def _strip_mention(body: str, bot: str) -> str:
    localpart = bot[1:].split(":", 1)[0]
    for prefix in (bot, localpart):
        if prefix and body.lower().startswith(prefix.lower()):
            return body[len(prefix) :].lstrip(" :,")
    return body


def _without_fallback(body: str) -> str:
    """`body` without a rich reply's leading `> ` quote lines and the blank line after them."""
    lines = body.split("\n")
    if not lines or not lines[0].startswith(">"):
        return body
    index = 0
    while index < len(lines) and lines[index].startswith(">"):
        index += 1
    if index < len(lines) and not lines[index].strip():
        index += 1
    return "\n".join(lines[index:])


def _relation(relates: dict[str, Any]) -> tuple[str | None, str | None]:
    """(the thread root, the event replied to) an `m.relates_to` names."""
    thread_id = None
    if relates.get("rel_type") == "m.thread":
        thread_id = _id(relates.get("event_id"), "the thread root", "$")
    replied = relates.get("m.in_reply_to")
    reply_to = replied.get("event_id") if isinstance(replied, dict) else None
    return thread_id, reply_to if isinstance(reply_to, str) else None


def translate(event: Any, *, room_id: str, members: int, bot_user_id: str) -> InboundTurn | Ignored:
    """One timeline event of `room_id` (with `members` joined) → its turn, or why none.

    Raises BadEvent for an event that is not one (nothing is stored for it)."""
    if not isinstance(event, dict):
        raise BadEvent("the event must be an object")
    event_id = _id(event.get("event_id"), "event_id", "$")
    sender = _id(event.get("sender"), "sender", "@")
    if event.get("type") != "m.room.message":
        return Ignored(f"not a message ({event.get('type')})")
    if "state_key" in event:
        return Ignored("a state event")
    if sender == bot_user_id:
        return Ignored("our own event")
    content = event.get("content")
    if not isinstance(content, dict):
        raise BadEvent("content must be an object")
    if not content:
        return Ignored("redacted")
    msgtype = content.get("msgtype")
    body = content.get("body")
    if not isinstance(msgtype, str) or not isinstance(body, str):
        raise BadEvent("content needs a msgtype and a body")
    relates = content.get("m.relates_to")
    relates = relates if isinstance(relates, dict) else {}
    if relates.get("rel_type") == "m.replace":
        return Ignored("an edit")
    thread_id, reply_to = _relation(relates)
    attachments: tuple[Attachment, ...] = ()
    if msgtype in MEDIA_KINDS:
        attachments = (_attachment(msgtype, content),)
        text = ""
    elif msgtype in TEXT_TYPES:
        text = _without_fallback(body) if reply_to and not thread_id else body
    else:
        return Ignored(f"message type {msgtype}")
    chat_type = GROUP if members > 2 else DM
    if chat_type == GROUP and thread_id is None and not _addressed(content, body, bot_user_id):
        return Ignored("not addressed to the bot")
    text = _strip_mention(text, bot_user_id).strip()
    if not text and not attachments:
        return Ignored("nothing to answer")
    return InboundTurn(
        platform=MATRIX,
        chat_id=_id(room_id, "room_id", "!"),
        chat_type=chat_type,
        event_id=event_id,
        text=text,
        user_id=sender,
        user_name=sender[1:].split(":", 1)[0],
        thread_id=thread_id,
        message_id=event_id,
        reply_to=reply_to,
        attachments=attachments,
    )
