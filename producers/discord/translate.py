"""Discord gateway `MESSAGE_CREATE` (its `d`) plus the channel it is in → InboundTurn.

Pure: no I/O, no SDK. The message payload does not say whether its channel is a thread, so
the receiver passes the channel object (as `GET /channels/{id}` returns it, from discord.py's
cache). Decisions it pins (golden files in tests/fixtures/discord/):
- event id: the message id (a snowflake, unique across Discord).
- DMs: every message is a turn. Guild channels and threads: only messages addressed to the
  bot — mentioning it, replying to it, or a known slash command typed as text; the leading
  mention is removed, so `@bot /new` is /new.
- A thread (channel types 10, 11, 12; forum posts are threads too) is the thread id under its
  parent channel, shared by its participants; the guild id is the key's scope.
- Messages from bots (ours included) and system messages (joins, pins, …) are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from shared.commands import KNOWN, parse_command
from shared.platforms import CHANNEL, DISCORD, DM, GROUP
from shared.turns import Attachment, InboundTurn

DM_CHANNEL, GROUP_DM = 1, 3
THREAD_TYPES = frozenset({10, 11, 12})
USER_MESSAGES = frozenset({0, 19})  # DEFAULT, REPLY


class BadMessage(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Ignored:
    reason: str


def _id(value: Any, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise BadMessage(f"{what} must be an id")
    return str(value)


def _kind(mime: Any) -> str:
    if isinstance(mime, str) and mime.startswith("image/"):
        return "image"
    if isinstance(mime, str) and mime.startswith("audio/"):
        return "audio"
    if isinstance(mime, str) and mime.startswith(("text/", "application/pdf")):
        return "document"
    return "file"


def _attachments(message: dict[str, Any]) -> tuple[Attachment, ...]:
    items = message.get("attachments")
    if not isinstance(items, list):
        return ()
    return tuple(
        Attachment(
            _kind(item.get("content_type")),
            item.get("filename"),
            item.get("content_type"),
            item.get("url"),
            None,
            item.get("size"),
        )
        for item in items
        if isinstance(item, dict) and item.get("url")
    )


def _addressed(message: dict[str, Any], content: str, bot: str | None) -> bool:
    if bot is not None:
        mentions = message.get("mentions")
        if isinstance(mentions, list) and any(
            isinstance(m, dict) and str(m.get("id")) == bot for m in mentions
        ):
            return True
        if f"<@{bot}>" in content or f"<@!{bot}>" in content:
            return True
        replied = message.get("referenced_message")
        author = replied.get("author") if isinstance(replied, dict) else None
        if isinstance(author, dict) and str(author.get("id")) == bot:
            return True
    command = parse_command(content)
    return command is not None and command.name in KNOWN


def _speaker(message: dict[str, Any], author: dict[str, Any]) -> str | None:
    member = message.get("member")
    if isinstance(member, dict) and member.get("nick"):
        return str(member["nick"])
    return author.get("global_name") or author.get("username") or None


def translate(
    message: Any, *, channel: dict[str, Any] | None, bot_user_id: str | None
) -> InboundTurn | Ignored:
    """One MESSAGE_CREATE → its turn, or why none. Raises BadMessage."""
    if not isinstance(message, dict):
        raise BadMessage("the message must be an object")
    author = message.get("author")
    if not isinstance(author, dict):
        raise BadMessage("author must be an object")
    message_id = _id(message.get("id"), "id")
    channel_id = _id(message.get("channel_id"), "channel_id")
    if author.get("bot") or (bot_user_id is not None and str(author.get("id")) == bot_user_id):
        return Ignored("sent by a bot")
    if message.get("type", 0) not in USER_MESSAGES:
        return Ignored(f"system message (type {message.get('type')})")
    guild = message.get("guild_id")
    kind = channel.get("type") if isinstance(channel, dict) else None
    chat_id, thread_id = channel_id, None
    if guild is None and kind in (None, DM_CHANNEL, GROUP_DM):
        chat_type = GROUP if kind == GROUP_DM else DM
    else:
        chat_type = CHANNEL
        if kind in THREAD_TYPES and isinstance(channel, dict) and channel.get("parent_id"):
            chat_id, thread_id = _id(channel["parent_id"], "parent_id"), channel_id
    raw = message.get("content")
    content = raw if isinstance(raw, str) else ""
    if chat_type != DM and not _addressed(message, content, bot_user_id):
        return Ignored("not addressed to the bot")
    if bot_user_id is not None:
        content = re.sub(rf"^\s*<@!?{re.escape(bot_user_id)}>[\s:,]*", "", content)
    content = content.strip()
    attachments = _attachments(message)
    if not content and not attachments:
        return Ignored("nothing to answer (no text or file)")
    reference = message.get("message_reference")
    reply_to = None
    if message.get("type") == 19 and isinstance(reference, dict) and reference.get("message_id"):
        reply_to = str(reference["message_id"])
    return InboundTurn(
        platform=DISCORD,
        chat_id=chat_id,
        chat_type=chat_type,
        event_id=message_id,
        text=content,
        user_id=_id(author.get("id"), "author.id"),
        user_name=_speaker(message, author),
        thread_id=thread_id,
        message_id=message_id,
        reply_to=reply_to,
        scope=str(guild) if guild is not None else None,
        attachments=attachments,
    )
