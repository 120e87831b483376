"""Telegram Bot API `Update` (a dict, as the webhook or getUpdates gives it) → InboundTurn.

Pure: no I/O, no SDK. Decisions it pins (golden files in tests/fixtures/telegram/):
- event id `<bot id>:<update_id>`: update ids count per bot, so two bots never collide; a
  redelivered update is the same event and is recorded once.
- `edited_message` is acknowledged and ignored: the original was already answered, and a
  second answer to a typo fix surprises people. Channel posts are broadcasts, not turns.
- chat types: private → dm; group and supergroup → group. A forum topic is a thread
  (`message_thread_id` when `is_topic_message`); the General topic has no thread id and so
  is the group itself. In a supergroup that is not a forum, a reply carries a
  `message_thread_id` too, which is not a topic and is not used.
- In a topic every message "replies" to the topic's first message; that is not a reply-to.
- A message sent on behalf of a chat (anonymous admin, linked channel) has no participant id:
  the room's shared session takes it.
- Files are referenced as `telegram:file/<file_id>`: the download URL embeds the bot token
  and is never stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from shared.platforms import DM, GROUP, TELEGRAM
from shared.turns import Attachment, InboundTurn

INTEGER_ID = re.compile(r"-?[0-9]{1,20}")
CHAT_TYPES = {"private": DM, "group": GROUP, "supergroup": GROUP}
IGNORED_KINDS = {
    "edited_message": "edited message: the original was answered",
    "channel_post": "channel post: a broadcast, not a conversation",
    "edited_channel_post": "edited channel post",
}


class BadUpdate(ValueError):
    """Not a Telegram update at all (a 400): missing update_id, wrong types."""


@dataclass(frozen=True, slots=True)
class Ignored:
    reason: str


@dataclass(frozen=True, slots=True)
class Migration:
    """A group became a supergroup: its chat id changed from `old` to `new`."""

    old: str
    new: str


def bot_id_of(token: str) -> str:
    """The bot's numeric id: the part of the token before the colon (not secret)."""
    return token.split(":", 1)[0]


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadUpdate(f"{what} must be an object")
    return value


def update_id(update: Any) -> int:
    data = _dict(update, "an update")
    value = data.get("update_id")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadUpdate("update_id must be a non-negative integer")
    return value


def _id(value: Any, what: str) -> str:
    """Telegram's ids are integers (chats negative for groups); the sender later sends them as
    such, so anything else is refused here rather than failing every delivery attempt."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise BadUpdate(f"{what} must be an integer id")
    text = str(value)
    if not INTEGER_ID.fullmatch(text):
        raise BadUpdate(f"{what} must be an integer id")
    return text


def _name(user: dict[str, Any]) -> str | None:
    full = " ".join(str(user[k]) for k in ("first_name", "last_name") if user.get(k)).strip()
    return full or user.get("username") or None


def _speaker(msg: dict[str, Any], sender: dict[str, Any] | None, anonymous: bool) -> str | None:
    if anonymous:
        chat = msg.get("sender_chat")
        return str(chat.get("title")) if isinstance(chat, dict) and chat.get("title") else None
    return _name(sender) if sender is not None else None


def _attachments(msg: dict[str, Any]) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    photos = msg.get("photo")
    if isinstance(photos, list) and photos and isinstance(photos[-1], dict):
        best = photos[-1]  # sizes ascend; the last is the largest
        found.append(
            Attachment("image", None, "image/jpeg", _file(best), None, best.get("file_size"))
        )
    for key, kind in (
        ("document", "document"),
        ("voice", "audio"),
        ("audio", "audio"),
        ("video", "file"),
        ("video_note", "file"),
    ):
        item = msg.get(key)
        if isinstance(item, dict) and item.get("file_id"):
            found.append(
                Attachment(
                    kind,
                    item.get("file_name"),
                    item.get("mime_type"),
                    _file(item),
                    None,
                    item.get("file_size"),
                )
            )
    return tuple(found)


def _file(item: dict[str, Any]) -> str:
    return f"telegram:file/{item.get('file_id')}"


def _chat_number(value: Any, what: str) -> str:
    """A chat id as Telegram sends it: a JSON integer (never a bool, string or object)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadUpdate(f"{what} must be an integer")
    return str(value)


def migration(update: Any) -> Migration | None:
    """The chat-id change a service message announces (either side of it), if any.

    Raises BadUpdate when either id is not an integer: a migration re-keys the chat's routes,
    so a malformed one must change nothing.
    """
    msg = update.get("message") if isinstance(update, dict) else None
    if not isinstance(msg, dict) or not isinstance(msg.get("chat"), dict):
        return None
    if msg.get("migrate_to_chat_id") is not None:
        old = _chat_number(msg["chat"].get("id"), "chat.id")
        return Migration(old, _chat_number(msg["migrate_to_chat_id"], "migrate_to_chat_id"))
    if msg.get("migrate_from_chat_id") is not None:
        old = _chat_number(msg["migrate_from_chat_id"], "migrate_from_chat_id")
        return Migration(old, _chat_number(msg["chat"].get("id"), "chat.id"))
    return None


def translate(update: Any, *, bot_id: str) -> InboundTurn | Ignored:
    """One update → the turn it carries, or why it carries none. Raises BadUpdate."""
    number = update_id(update)
    if "message" not in update:
        for kind, reason in IGNORED_KINDS.items():
            if kind in update:
                return Ignored(reason)
        kinds = sorted(k for k in update if k != "update_id")
        return Ignored(f"{kinds[0] if kinds else 'empty'} update: not a message")
    msg = _dict(update["message"], "message")
    chat = _dict(msg.get("chat"), "message.chat")
    chat_id = _id(chat.get("id"), "chat.id")
    message_id = _id(msg.get("message_id"), "message.message_id")
    if migration(update) is not None:
        return Ignored("chat migrated to a supergroup")
    chat_type = CHAT_TYPES.get(str(chat.get("type")))
    if chat_type is None:
        return Ignored(f"{chat.get('type')} chats are not conversations")
    if msg.get("is_automatic_forward"):
        return Ignored("a channel post forwarded into its discussion group")
    sender = msg.get("from") if isinstance(msg.get("from"), dict) else None
    if sender is not None and sender.get("is_bot") and msg.get("sender_chat") is None:
        return Ignored("sent by a bot")
    anonymous = isinstance(msg.get("sender_chat"), dict) or sender is None
    thread_id = None
    if msg.get("is_topic_message") and msg.get("message_thread_id") is not None:
        thread_id = _id(msg["message_thread_id"], "message_thread_id")
    reply_to = None
    replied = msg.get("reply_to_message")
    if isinstance(replied, dict) and replied.get("message_id") is not None:
        is_topic_root = thread_id is not None and str(replied["message_id"]) == thread_id
        if not is_topic_root and "forum_topic_created" not in replied:
            reply_to = str(replied["message_id"])
    text = msg.get("text") if isinstance(msg.get("text"), str) else msg.get("caption")
    text = text if isinstance(text, str) else ""
    attachments = _attachments(msg)
    if not text.strip() and not attachments:
        return Ignored("nothing to answer (no text or file)")
    return InboundTurn(
        platform=TELEGRAM,
        chat_id=chat_id,
        chat_type=chat_type,
        event_id=f"{bot_id}:{number}",
        text=text,
        user_id=None if anonymous or sender is None else _id(sender.get("id"), "from.id"),
        user_name=_speaker(msg, sender, anonymous),
        thread_id=thread_id,
        message_id=message_id,
        reply_to=reply_to,
        attachments=attachments,
    )
