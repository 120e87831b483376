"""Telegram sender: python-telegram-bot's `Bot` as the client, driven from worker threads.

- One event loop per worker process (workers/delivery/aioloop.py) runs the Bot's coroutines.
- Long replies are split at 4096 UTF-16 code units; parts go out in order, resumed (not
  repeated) on a retry (workers/delivery/progress.py).
- Limits (Telegram's flood rules): about 1 message/s per chat, 20/min per group, 30/s for the
  bot, as shared token buckets (workers/delivery/ratelimit.py). A 429's retry_after becomes a
  cooldown on that chat for every worker, and RetryLater for this one; one over 5 s
  (BOT_WIDE_AFTER) cools the whole bot down too, since our buckets already keep each chat
  within its own limits.
- 403 (the user blocked the bot, or it was removed from the group) → Undeliverable; a 400 with
  migrate_to_chat_id (the group became a supergroup) → the stored chat id is updated and the
  part is sent to the new id (its errors mapped the same way); network trouble → a plain
  exception (the flush backs off).
- Forum topics get `message_thread_id`; in groups the first part replies to the user's message.
- `stream_edits`: the streamed message is posted and edited (editMessageText) through the same
  buckets, and the reply's first part is an edit of it (workers/delivery/live_message.py).
- Its connections drop a send cut off midway before the chat's lane can move
  (workers/delivery/sockets.py).
- The token is in every Bot API URL: nothing here logs a URL, and error text is redacted.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import partial
from typing import Any

from shared.pipeline.outbox import OutboxRow
from shared.platforms.telegram import PLATFORM, TelegramSettings
from workers.delivery.aioloop import LoopThread
from workers.delivery.base import RetryLater, SenderDeps, Sent, ThreadUnavailable, Undeliverable
from workers.delivery.live_message import LiveMessages, MessageGone, finish_live
from workers.delivery.progress import Progress
from workers.delivery.ratelimit import Bucket, Limiter, bot_key
from workers.delivery.sockets import SocketOption
from workers.delivery.split import split_for

log = logging.getLogger(__name__)

PER_CHAT = PLATFORM.rate_limits["chat"]  # tokens/s, burst
PER_GROUP = PLATFORM.rate_limits["group"]
PER_BOT = PLATFORM.rate_limits["bot"]
TIMEOUT = 30.0
TOPIC_NAME_LIMIT = 128  # createForumTopic's name: 1-128 characters
BOT_WIDE_AFTER = 5.0  # a 429 asking for a longer wait pauses the whole bot, not just the chat

Migrate = Callable[[str, str], None]


class SendFailed(Exception):
    """A transient failure, with the token already removed from the message."""


def _chat_arg(chat_id: str) -> int | str:
    try:
        return int(chat_id)
    except ValueError:
        return chat_id  # @channelusername


def quiet_retry_after_warning() -> None:
    """PTB 22 warns whenever it builds a RetryAfter (about a future type of `retry_after`).

    We read the timedelta it keeps and never the deprecated int, so the warning says nothing
    to us; ignore just that one (process-wide, like the logger levels set for redaction).
    """
    from telegram.warnings import PTBDeprecationWarning

    warnings.filterwarnings(
        "ignore", message=r".*`retry_after` will be of type", category=PTBDeprecationWarning
    )


def retry_after_seconds(exc: Any) -> float:
    """RetryAfter's wait in seconds (read without tripping PTB's int→timedelta warning)."""
    value = getattr(exc, "_retry_after", None)  # a timedelta since 22.2
    if value is None:
        value = getattr(exc, "retry_after", None)  # an int before 22.2 (no warning there)
    if isinstance(value, timedelta):
        return max(0.0, value.total_seconds())
    if isinstance(value, int | float):
        return max(0.0, float(value))
    return 1.0


class TelegramSender:
    platform = PLATFORM.name
    reads_store = False
    typing_every = 4.0  # the "typing…" action shows for 5 s or until a message arrives

    def __init__(
        self,
        *,
        token: str,
        api_base: str,
        limiter: Limiter,
        progress: Progress,
        migrate: Migrate | None = None,
        loop: LoopThread | None = None,
        timeout: float = TIMEOUT,
        live: LiveMessages | None = None,
        stream_interval: float = 1.0,
        socket_options: Sequence[SocketOption] = (),
    ) -> None:
        self.live = live
        self.stream_interval = stream_interval
        self._token = token
        self._api_base = api_base
        self._limiter = limiter
        self._progress = progress
        self._migrate = migrate
        self._timeout = timeout
        self._socket_options = list(socket_options)
        self._loop = loop or LoopThread("hermes-telegram")
        self._loop.on_new_loop(self._forget_bot)
        self._bot: Any | None = None
        self._requests: list[Any] = []
        self._moved: dict[str, str] = {}
        self._keys = bot_key(PLATFORM.name, token)
        quiet_retry_after_warning()

    def _forget_bot(self) -> None:
        self._bot, self._requests = None, []

    def _get_bot(self) -> Any:
        if self._bot is None:
            from telegram import Bot
            from telegram.request import HTTPXRequest

            self._requests = [
                HTTPXRequest(
                    connection_pool_size=64,
                    read_timeout=self._timeout,
                    write_timeout=self._timeout,
                    connect_timeout=10.0,
                    pool_timeout=self._timeout,
                    socket_options=self._socket_options,
                ),
                HTTPXRequest(connection_pool_size=1),
            ]
            self._bot = Bot(
                self._token,
                base_url=self._api_base,
                request=self._requests[0],
                get_updates_request=self._requests[1],
            )
        return self._bot

    def _redact(self, text: str) -> str:
        return text.replace(self._token, "***")

    def buckets(self, chat_id: str) -> list[Bucket]:
        found = [
            Bucket(f"{self._keys}:chat:{chat_id}", *PER_CHAT),
            Bucket(f"{self._keys}:bot", *PER_BOT),
        ]
        if chat_id.startswith("-"):
            found.insert(1, Bucket(f"{self._keys}:group:{chat_id}", *PER_GROUP))
        return found

    def cooldowns(self, chat_id: str) -> list[str]:
        return [f"{self._keys}:cool:chat:{chat_id}", f"{self._keys}:cool:bot"]

    def send(self, row: OutboxRow) -> Sent:
        parts = split_for(PLATFORM, row.text)
        done = self._progress.sent_parts(row.id)
        chat_id = self._moved.get(row.chat_id, row.chat_id)
        for index in range(len(done), len(parts)):
            wait = self._limiter.acquire(
                self.buckets(chat_id), self.cooldowns(chat_id), want=len(parts) - index
            )
            if wait > 0:
                raise RetryLater(wait, f"telegram rate limit for chat {chat_id}")
            message_id = None
            if index == 0:
                message_id = finish_live(self.live, row, parts[0], partial(self._edit, chat_id))
            if message_id is None:
                message_id, chat_id = self._send_part(row, chat_id, parts[index], first=index == 0)
            self._progress.part_sent(row.id, message_id)
            done.append(message_id)
        return Sent(",".join(done) if done else None)

    def _send_part(
        self, row: OutboxRow, chat_id: str, text: str, *, first: bool
    ) -> tuple[str, str]:
        """Send one part; returns (message id, chat id it went to — new after a migration)."""
        from telegram.error import ChatMigrated, TelegramError

        try:
            return self._call(row, chat_id, text, first=first), chat_id
        except ChatMigrated as exc:
            new_id = str(exc.new_chat_id)
        except (TelegramError, OSError, TimeoutError) as exc:
            raise self._map(chat_id, exc) from None
        log.info("telegram chat %s migrated to %s", chat_id, new_id)
        self._moved[row.chat_id] = new_id
        if self._migrate is not None:
            self._migrate(row.chat_id, new_id)
        try:  # the resend's errors mean what they mean anywhere else, for the new id
            return self._call(row, new_id, text, first=first), new_id
        except (TelegramError, OSError, TimeoutError) as exc:
            raise self._map(new_id, exc) from None

    def _map(self, chat_id: str, exc: Exception) -> Exception:
        """A Bot API error → what the flush does with it (RetryLater, Undeliverable, SendFailed).

        A 429 cools the chat down for every worker. Telegram does not say which limit a 429
        is for; our buckets keep each chat and group within its own limits, so a long wait
        (over BOT_WIDE_AFTER) means the bot as a whole is flooded: it cools the bot-wide key
        too, and every worker pauses every chat (as Discord's global 429 does).
        """
        from telegram.error import BadRequest, Forbidden, RetryAfter

        if isinstance(exc, RetryAfter):
            wait = retry_after_seconds(exc)
            chat_key, bot_wide = self.cooldowns(chat_id)
            self._limiter.cool_down(chat_key, wait)
            if wait > BOT_WIDE_AFTER:
                self._limiter.cool_down(bot_wide, wait)
                return RetryLater(wait, f"telegram 429 (whole bot): retry after {wait:g} s")
            return RetryLater(wait, f"telegram 429: retry after {wait:g} s")
        if isinstance(exc, Forbidden):
            return Undeliverable(f"telegram 403: {self._redact(str(exc))}")
        if isinstance(exc, BadRequest):
            return Undeliverable(f"telegram 400: {self._redact(str(exc))}")
        return SendFailed(f"telegram: {type(exc).__name__}: {self._redact(str(exc))}")

    def _call(self, row: OutboxRow, chat_id: str, text: str, *, first: bool) -> str:
        from telegram import ReplyParameters

        kwargs: dict[str, Any] = {}
        if row.thread_id:
            kwargs["message_thread_id"] = int(row.thread_id)
        if first and row.reply_to and chat_id.startswith("-"):
            kwargs["reply_parameters"] = ReplyParameters(
                message_id=int(row.reply_to), allow_sending_without_reply=True
            )

        async def go() -> Any:
            return await self._get_bot().send_message(
                chat_id=_chat_arg(chat_id), text=text, **kwargs
            )

        message = self._loop.run(go, self._timeout + 5)
        return str(message.message_id)

    def _take_token(self, chat_id: str) -> None:
        wait = self._limiter.acquire(self.buckets(chat_id), self.cooldowns(chat_id))
        if wait > 0:
            raise RetryLater(wait, f"telegram rate limit for chat {chat_id}")

    def post_live(self, row: OutboxRow, text: str) -> str:
        """The streamed message's first post, placed as a reply's first part would be."""
        chat_id = self._moved.get(row.chat_id, row.chat_id)
        self._take_token(chat_id)
        return self._send_part(row, chat_id, text, first=True)[0]

    def edit_live(self, row: OutboxRow, message_id: str, text: str) -> None:
        chat_id = self._moved.get(row.chat_id, row.chat_id)
        self._take_token(chat_id)
        self._edit(chat_id, message_id, text)

    def _edit(self, chat_id: str, message_id: str, text: str) -> None:
        """editMessageText; an unchanged text is done already, a message gone → MessageGone."""
        from telegram.error import BadRequest, TelegramError

        async def go() -> Any:
            return await self._get_bot().edit_message_text(
                text, chat_id=_chat_arg(chat_id), message_id=int(message_id)
            )

        try:
            self._loop.run(go, self._timeout + 5)
        except BadRequest as exc:
            said = str(exc).lower()
            if "not modified" in said:
                return
            if "not found" in said or "can't be edited" in said:
                raise MessageGone(self._redact(str(exc))) from None
            raise self._map(chat_id, exc) from None
        except (TelegramError, OSError, TimeoutError) as exc:
            raise self._map(chat_id, exc) from None

    def typing(self, chat_id: str, thread_id: str | None) -> None:
        """`sendChatAction` typing (in the topic, if any); errors are the caller's to log."""
        from telegram.constants import ChatAction

        kwargs: dict[str, Any] = {}
        if thread_id:
            kwargs["message_thread_id"] = int(thread_id)
        target = _chat_arg(self._moved.get(chat_id, chat_id))

        async def go() -> Any:
            return await self._get_bot().send_chat_action(
                chat_id=target, action=ChatAction.TYPING, **kwargs
            )

        self._loop.run(go, self._timeout + 5)

    def open_thread(self, chat_id: str, title: str) -> str:
        """A forum topic in `chat_id` (a forum supergroup, or a private chat with topics on);
        its message_thread_id. Raises ThreadUnavailable with Telegram's reason otherwise."""
        from telegram.error import TelegramError

        async def go() -> Any:
            return await self._get_bot().create_forum_topic(
                chat_id=_chat_arg(chat_id), name=title[:TOPIC_NAME_LIMIT] or "hermes"
            )

        try:
            topic = self._loop.run(go, self._timeout + 5)
        except (TelegramError, OSError, TimeoutError) as exc:
            raise ThreadUnavailable(f"telegram: {self._redact(str(exc))}") from None
        return str(topic.message_thread_id)

    def close(self) -> None:
        requests = list(self._requests)

        async def shutdown() -> None:
            for request in requests:
                await request.shutdown()

        self._loop.close(shutdown)
        self._forget_bot()


def build(conf: TelegramSettings, deps: SenderDeps) -> TelegramSender:
    """The sender for `platforms.telegram` (the descriptor's `sender`)."""
    assert conf.token is not None
    return TelegramSender(
        token=conf.token.get_secret_value(),
        api_base=conf.api_base or "",
        limiter=deps.limiter,
        progress=deps.progress,
        migrate=partial(deps.migrate_chat, PLATFORM.name),
        live=deps.live if conf.stream_edits else None,
        stream_interval=conf.stream_edit_interval,
        socket_options=deps.socket_options,
    )
