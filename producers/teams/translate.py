"""A Bot Framework activity from Teams (a dict, as POSTed to /teams/messages) → a turn.

Pure: no I/O. Decisions it pins (golden files in tests/fixtures/teams/, shaped as the Bot
Framework's activity schema and Teams' docs show them):
- only `message` activities are turns; conversationUpdate (the bot added), reactions, typing,
  invokes and the rest are acknowledged and ignored.
- chat = the conversation id without its reply-chain suffix. `personal` → a DM, `groupChat`
  → a group (one session per participant by default), `channel` → the channel, with the
  reply chain's root (`;messageid=<root>`) as the thread: a shared session per chain. Without
  a `conversationType`, the id's shape decides (shared/platforms/teams.py's chat_type_of).
- event id = chat + activity id (Teams' activity ids are unique within a conversation only):
  a redelivered activity is the same event and is recorded once.
- the user is `from.aadObjectId` (the Azure AD object id admins know), else `from.id`.
- mentions of the bot (entities of type `mention` naming the recipient) are cut from the text;
  other people's mentions become their plain names.
- attachments: a file shared in a personal chat (`…teams.file.download.info`, its
  pre-authenticated `downloadUrl`) and images (`image/*` with a `contentUrl` on the Bot
  Connector, fetched with the bot token) are kept; the `text/html` copy of the message and
  cards are not attachments.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from shared.platforms import CHANNEL, DM, GROUP
from shared.platforms.teams import TEAMS, chat_type_of
from shared.turns import Attachment, InboundTurn

MAX_ID = 256
FILE_INFO = "application/vnd.microsoft.teams.file.download.info"
CONVERSATION_TYPES = {"personal": DM, "groupChat": GROUP, "channel": CHANNEL}
REPLY_CHAIN = ";messageid="
SPACES = re.compile(r"[ \t]{2,}")


class BadPayload(ValueError):
    """Not a Bot Framework activity (a 400): wrong shapes, a message without its ids."""


@dataclass(frozen=True, slots=True)
class Ignored:
    reason: str


Result = InboundTurn | Ignored


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadPayload(f"{what} must be an object")
    return value


def _id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID:
        raise BadPayload(f"{what} must be a non-empty string id")
    if any(ch in value for ch in "\x00\r\n"):
        raise BadPayload(f"{what} contains control characters")
    return value


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def split_conversation(conversation_id: str) -> tuple[str, str | None]:
    """`19:x@thread.tacv2;messageid=17` → ("19:x@thread.tacv2", "17"); others unchanged."""
    base, found, root = conversation_id.partition(REPLY_CHAIN)
    return base, (root or None) if found else None


def strip_mentions(text: str, entities: Any, bot_id: str | None) -> str:
    """`text` without the `<at>…</at>` mentions of the bot; other people's keep their name."""
    if not isinstance(entities, list):
        return text
    for entity in entities:
        if not isinstance(entity, dict) or entity.get("type") != "mention":
            continue
        mentioned = entity.get("mentioned")
        who = mentioned.get("id") if isinstance(mentioned, dict) else None
        said = entity.get("text")
        if not isinstance(said, str) or not said:
            continue
        name = said.removeprefix("<at>").removesuffix("</at>")
        text = text.replace(said, " " if bot_id is not None and who == bot_id else name)
    return SPACES.sub(" ", text).strip()


def _attachment(item: Any) -> Attachment | None:
    if not isinstance(item, dict):
        return None
    kind = item.get("contentType")
    name = _str(item.get("name"))
    if kind == FILE_INFO:
        content = item.get("content")
        url = content.get("downloadUrl") if isinstance(content, dict) else None
        if not _str(url):
            return None
        file_type = content.get("fileType") if isinstance(content, dict) else None
        is_image = isinstance(file_type, str) and file_type.lower() in ("png", "jpg", "jpeg", "gif")
        return Attachment("image" if is_image else "document", name, None, url)
    if isinstance(kind, str) and kind.startswith("image/") and _str(item.get("contentUrl")):
        mime = None if "*" in kind else kind  # Teams sends `image/*` for pasted images
        return Attachment("image", name, mime, item["contentUrl"])
    return None


def _event_id(chat_id: str, activity_id: str) -> str:
    event = f"{chat_id}/{activity_id}"
    if len(event) <= MAX_ID:
        return event
    return "sha256:" + hashlib.sha256(event.encode()).hexdigest()


def translate(payload: Any) -> Result:
    """An activity → its turn, or why it is none. Raises BadPayload (nothing is recorded)."""
    activity = _dict(payload, "the body")
    kind = activity.get("type")
    if not isinstance(kind, str):
        raise BadPayload("type must be a string")
    if kind != "message":
        return Ignored(f"a {kind} activity, not a message")
    activity_id = _id(activity.get("id"), "id")
    conversation = _dict(activity.get("conversation"), "conversation")
    sender = _dict(activity.get("from"), "from")
    recipient = activity.get("recipient")
    bot_id = recipient.get("id") if isinstance(recipient, dict) else None
    conversation_id = _id(conversation.get("id"), "conversation.id")
    chat_id, root = split_conversation(conversation_id)
    given = conversation.get("conversationType")
    chat_type = CONVERSATION_TYPES.get(str(given)) if given else chat_type_of(chat_id)
    if chat_type is None:
        return Ignored(f"a {conversation.get('conversationType')} conversation")
    text = activity.get("text")
    if text is not None and not isinstance(text, str):
        raise BadPayload("text must be a string")
    raw = activity.get("attachments")
    if raw is not None and not isinstance(raw, list):
        raise BadPayload("attachments must be a list")
    attachments = tuple(a for a in map(_attachment, raw or []) if a is not None)
    said = strip_mentions(text or "", activity.get("entities"), bot_id)
    if not said and not attachments:
        return Ignored("nothing to answer (no text or files)")
    user = _id(_str(sender.get("aadObjectId")) or sender.get("id"), "from.id")
    return InboundTurn(
        platform=TEAMS,
        chat_id=_id(chat_id, "conversation.id"),
        chat_type=chat_type,
        event_id=_event_id(chat_id, activity_id),
        text=said,
        user_id=user,
        user_name=_str(sender.get("name")),
        thread_id=(root or activity_id) if chat_type == CHANNEL else None,
        message_id=activity_id,
        attachments=attachments,
    )


def service_url(payload: Any) -> str | None:
    """The activity's `serviceUrl` (what its token's `serviceurl` claim must name)."""
    found = payload.get("serviceUrl") if isinstance(payload, dict) else None
    return found if isinstance(found, str) and found else None
