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
- In groups only messages addressed to the bot are turns, as on Slack and Discord (and with
  privacy mode off, when Telegram sends the bot everything): a `mention` entity of its
  @username or a `text_mention` of its id, a reply to one of its messages (a topic the bot
  opened counts: every message there replies to the bot's topic root), `/cmd@its_username`,
  or a bare `/cmd` the gateway knows (other bots in the room have commands of their own). A
  leading @mention is removed, so `@bot /new` is /new. Private chats: every message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from shared.commands import KNOWN, parse_command
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


NOT_ADDRESSED = Ignored("not addressed to the bot")


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
    if type(value) is int and -(10**20) < value < 10**20:  # the usual case: no regex needed
        return str(value)
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


def may_name_a_bot(update: Any) -> bool:
    """Whether `update`'s text has an `@`: only then can the bot's username change a verdict."""
    msg = update.get("message") if isinstance(update, dict) else None
    if not isinstance(msg, dict):
        return False
    return any(isinstance(msg.get(k), str) and "@" in msg[k] for k in ("text", "caption"))


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


def _entity_texts(text: str, entities: Any, kind: str) -> list[dict[str, Any]]:
    """`entities` of `kind`, each with the text it covers (`_text`; offsets count UTF-16)."""
    if not isinstance(entities, list):
        return []
    units = text.encode("utf-16-le", errors="surrogatepass")
    found = []
    for entity in entities:
        if not isinstance(entity, dict) or entity.get("type") != kind:
            continue
        start, length = entity.get("offset"), entity.get("length")
        if not isinstance(start, int) or not isinstance(length, int) or start < 0:
            continue
        said = units[2 * start : 2 * (start + length)].decode("utf-16-le", errors="replace")
        found.append({**entity, "_text": said})
    return found


def _mentions_bot(msg: dict[str, Any], text: str, bot_id: str, username: str | None) -> bool:
    entities = (
        msg.get("entities") if isinstance(msg.get("text"), str) else msg.get("caption_entities")
    )
    for entity in _entity_texts(text, entities, "text_mention"):
        user = entity.get("user")
        if isinstance(user, dict) and str(user.get("id")) == bot_id:
            return True
    if username is None:
        return False
    handle = "@" + username.lower()
    return any(e["_text"].lower() == handle for e in _entity_texts(text, entities, "mention"))


def _command_for_bot(text: str, username: str | None) -> bool:
    """`/cmd@our_username` (any command), or a bare `/cmd` that the gateway knows."""
    command = parse_command(text)
    if command is None:
        return False
    head = text.split(maxsplit=1)[0]
    if "@" in head:
        return username is not None and head.split("@", 1)[1].lower() == username.lower()
    return command.name in KNOWN


def _addressed(msg: dict[str, Any], text: str, bot_id: str, username: str | None) -> bool:
    replied = msg.get("reply_to_message")
    author = replied.get("from") if isinstance(replied, dict) else None
    if isinstance(author, dict) and str(author.get("id")) == bot_id:
        return True
    return _mentions_bot(msg, text, bot_id, username) or _command_for_bot(text, username)


def _reply_to(msg: dict[str, Any], thread_id: str | None) -> str | None:
    """The message replied to, unless it is only the topic's root (every topic message has it)."""
    replied = msg.get("reply_to_message")
    if not isinstance(replied, dict) or replied.get("message_id") is None:
        return None
    is_topic_root = thread_id is not None and str(replied["message_id"]) == thread_id
    if is_topic_root or "forum_topic_created" in replied:
        return None
    return str(replied["message_id"])


def _strip_mention(text: str, username: str | None) -> str:
    if username is None:
        return text
    return re.sub(rf"^\s*@{re.escape(username)}\b[\s:,]*", "", text, flags=re.IGNORECASE)


def translate(
    update: Any, *, bot_id: str, bot_username: str | None = None
) -> InboundTurn | Ignored:
    """One update → the turn it carries, or why it carries none. Raises BadUpdate.

    `bot_username` (without the @) recognises @mentions and `/cmd@name` in groups; without
    it, only replies to the bot, text mentions of its id and bare known commands count."""
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
    reply_to = _reply_to(msg, thread_id)
    text = msg.get("text") if isinstance(msg.get("text"), str) else msg.get("caption")
    text = text if isinstance(text, str) else ""
    if chat_type == GROUP:
        if not _addressed(msg, text, bot_id, bot_username):
            return NOT_ADDRESSED
        text = _strip_mention(text, bot_username)
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
