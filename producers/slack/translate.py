"""Slack Events API `event_callback` (and slash-command form) → InboundTurn.

Pure: no I/O, no SDK. Decisions it pins (golden files in tests/fixtures/slack/):
- event id `<team>:<channel>:<ts>`, not Slack's `event_id`: an @mention arrives twice, as
  `app_mention` and as `message`, with different event ids but the same channel and ts, so
  both translate to one event and the second is a no-op. Retries (`X-Slack-Retry-Num`) carry
  the same event too.
- In DMs every message is a turn; in channels only messages addressed to the bot
  (`app_mention`, or a `message` that mentions it). The leading mention is removed from the
  text, so `@bot /new` is the /new command.
- The bot's own messages (`bot_id`, or the authorised bot user) and subtypes other than file
  shares, thread broadcasts and /me are ignored (edits, deletes, joins, bot_message …).
- Threads: a message whose `thread_ts` differs from its `ts` is in that thread (shared by its
  participants); a top-level message is the channel. Team id is the key's scope.
- chat types: im → dm, mpim → group, public and private channels → channel (app_mention has
  no channel_type: by the id, D… → dm, else channel).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.commands import KNOWN
from shared.platforms import CHANNEL, DM, GROUP, SLACK
from shared.turns import Attachment, InboundTurn

CHANNEL_TYPES = {"im": DM, "mpim": GROUP, "channel": CHANNEL, "group": CHANNEL}
KEPT_SUBTYPES = frozenset({None, "file_share", "thread_broadcast", "me_message"})
TURN_EVENTS = frozenset({"message", "app_mention"})


class BadEvent(ValueError):
    """Not a Slack event payload (a 400)."""


@dataclass(frozen=True, slots=True)
class Ignored:
    reason: str


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise BadEvent(f"{what} must be a non-empty string")
    return value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def bot_user_of(payload: Mapping[str, Any]) -> str | None:
    auths = payload.get("authorizations")
    if isinstance(auths, list) and auths and isinstance(auths[0], dict):
        user = auths[0].get("user_id")
        return str(user) if user else None
    return None


def _chat_type(event: Mapping[str, Any], channel: str) -> str:
    kind = event.get("channel_type")
    if isinstance(kind, str) and kind in CHANNEL_TYPES:
        return CHANNEL_TYPES[kind]
    return DM if channel.startswith("D") else CHANNEL


def _strip_mention(text: str, bot: str | None) -> str:
    who = re.escape(bot) if bot else r"[UW][A-Z0-9]+"
    return re.sub(rf"^\s*<@{who}(?:\|[^>]*)?>[\s:,]*", "", text)


def _attachments(event: Mapping[str, Any]) -> tuple[Attachment, ...]:
    files = event.get("files")
    if not isinstance(files, list):
        return ()
    found = []
    for item in files:
        if not isinstance(item, dict):
            continue
        mime = item.get("mimetype")
        found.append(
            Attachment(
                _kind(mime), item.get("name"), mime, item.get("url_private"), None, item.get("size")
            )
        )
    return tuple(found)


def _kind(mime: Any) -> str:
    if not isinstance(mime, str):
        return "file"
    if mime.startswith("image/"):
        return "image"
    if mime.startswith("audio/"):
        return "audio"
    if mime.startswith(("text/", "application/pdf")):
        return "document"
    return "file"


def _speaker(event: Mapping[str, Any], user: str) -> str:
    profile = event.get("user_profile")
    if isinstance(profile, dict):
        for key in ("display_name", "real_name", "name"):
            if profile.get(key):
                return str(profile[key])
    return user


def translate(payload: Any) -> InboundTurn | Ignored:
    """One `event_callback` body → its turn, or why none. Raises BadEvent."""
    if not isinstance(payload, dict):
        raise BadEvent("the body must be a JSON object")
    if payload.get("type") != "event_callback":
        return Ignored(f"{payload.get('type')!s} callbacks are not turns")
    event = payload.get("event")
    if not isinstance(event, dict):
        raise BadEvent("event must be an object")
    kind = event.get("type")
    if not isinstance(kind, str):
        raise BadEvent("event.type must be a string")
    if kind not in TURN_EVENTS:
        return Ignored(f"{kind!s} events are not turns")
    subtype = event.get("subtype")
    if subtype is not None and not isinstance(subtype, str):
        raise BadEvent("event.subtype must be a string")
    if subtype not in KEPT_SUBTYPES:
        return Ignored(f"message subtype {event.get('subtype')} is not a turn")
    bot = bot_user_of(payload)
    if event.get("bot_id") or (bot is not None and event.get("user") == bot):
        return Ignored("sent by a bot")
    channel = _str(event.get("channel"), "event.channel")
    ts = _str(event.get("ts"), "event.ts")
    user = _str(event.get("user"), "event.user")
    team = payload.get("team_id") or event.get("team")
    chat_type = _chat_type(event, channel)
    raw = _text(event.get("text"))
    addressed = kind == "app_mention" or chat_type == DM or (bot is not None and f"<@{bot}" in raw)
    if not addressed:
        return Ignored("not addressed to the bot")
    thread_ts = event.get("thread_ts")
    thread_id = thread_ts if isinstance(thread_ts, str) and thread_ts and thread_ts != ts else None
    text = unescape(_strip_mention(raw, bot) if chat_type != DM else raw).strip()
    attachments = _attachments(event)
    if not text and not attachments:
        return Ignored("nothing to answer (no text or file)")
    return InboundTurn(
        platform=SLACK,
        chat_id=channel,
        chat_type=chat_type,
        event_id=f"{team or '-'}:{channel}:{ts}",
        text=text,
        user_id=user,
        user_name=_speaker(event, user),
        thread_id=thread_id,
        message_id=ts,
        scope=str(team) if team else None,
        attachments=attachments,
    )


def translate_command(form: Mapping[str, str]) -> InboundTurn | Ignored:
    """A slash-command POST (form fields) → the command turn.

    `/new foo` registered as its own command is `/new foo`; one umbrella command (say
    `/hermes`) works too: `/hermes new foo` → `/new foo`, `/hermes hello` → "hello".
    """
    command = form.get("command", "").strip()
    if not command.startswith("/"):
        raise BadEvent("command is missing")
    channel = _str(form.get("channel_id"), "channel_id")
    user = _str(form.get("user_id"), "user_id")
    trigger = _str(form.get("trigger_id"), "trigger_id")
    team = form.get("team_id") or None
    args = form.get("text", "").strip()
    name = command[1:].lower()
    if name in KNOWN:
        text = f"/{name} {args}".strip()
    else:
        first, _, rest = args.partition(" ")
        text = f"/{first.lower()} {rest}".strip() if first.lower() in KNOWN else args
    if not text:
        return Ignored("empty command")
    return InboundTurn(
        platform=SLACK,
        chat_id=channel,
        chat_type=DM if channel.startswith("D") else CHANNEL,
        event_id=f"{team or '-'}:cmd:{trigger}",
        text=text,
        user_id=user,
        user_name=form.get("user_name") or user,
        scope=team,
    )
