"""Telegram receivers: the webhook route (`POST /telegram/webhook`) and long polling.

Webhook: the `X-Telegram-Bot-Api-Secret-Token` header is compared in constant time (401
without it), the body must be JSON (415) under the size cap (413), and 200 is sent only after
the turn is committed. An update that is not a turn (edits, reactions, kinds we do not know)
is answered 200 and ignored, or Telegram would redeliver it for a day. A refused user gets
one short refusal, sent inline as the webhook's answer (a `sendMessage` method payload).

Groups: only messages addressed to the bot are turns (translate.py), which needs the bot's
@username: `platforms.telegram.username`, or else one getMe, the first time a group message
naming some @account (or `/cmd@bot`) would be ignored without it. A getMe that fails is a
transient error (503 to the webhook, a retry when polling): guessing would either answer
every message in a group or none of the mentions.

Polling, for machines without inbound access: the webhook is removed without dropping what is
pending, then getUpdates from the first unconfirmed update; the offset moves past an update
only once it is recorded (or proved unrecordable), so a crash or a database error means the
same updates come again, and the inbox's unique event id makes that a no-op.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import warnings
from typing import Any

from anyio import to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from producers.gateway.body import BadRequest, media_type, parse_json, read_body
from producers.gateway.deps import Gateway
from producers.telegram.translate import (
    NOT_ADDRESSED,
    BadUpdate,
    Ignored,
    Migration,
    bot_id_of,
    may_name_a_bot,
    migration,
    translate,
)
from shared.db.errors import is_transient
from shared.platforms import TELEGRAM
from shared.store import chats
from shared.surrogates import scrub
from shared.turns import InboundTurn, TurnRejected

log = logging.getLogger(__name__)

SECRET_HEADER = "x-telegram-bot-api-secret-token"
ALLOWED_UPDATES = ["message"]
POLL_TIMEOUT = 25
BACKOFF_MAX = 30.0
EMPTY = b"{}"  # the usual answer: nothing to send back
# The usual answer, one object for every request: a Response is only read when sent, and
# building one (its headers encoded) was a few us a request for the same bytes.
ANSWER = Response(EMPTY, media_type="application/json")


class TelegramReceiver:
    def __init__(
        self,
        gateway: Gateway,
        *,
        token: str,
        secret: str | None,
        api_base: str = "",
        username: str | None = None,
    ) -> None:
        self.gateway = gateway
        self.bot_id = bot_id_of(token)
        self.username = username.lstrip("@") if username else None
        self._token = token
        self._api_base = api_base
        self._secret = secret.encode() if secret else None
        self._asking: asyncio.Lock | None = None

    # --- the webhook ---

    def _check_secret(self, request: Request) -> None:
        if self._secret is None:
            raise BadRequest(404, "the webhook is off: set platforms.telegram.webhook_secret")
        given = request.headers.get(SECRET_HEADER)
        if given is None or not hmac.compare_digest(given.encode(), self._secret):
            raise BadRequest(401, "missing or wrong secret token")

    async def webhook(self, request: Request) -> Response:
        try:
            self._check_secret(request)
            if media_type(request) != "application/json":
                raise BadRequest(415, "the body must be application/json")
            update = parse_json(await read_body(request))
            reply = await self.handle_update(update)
        except BadRequest as exc:
            return exc.response()
        return JSONResponse(reply) if reply else ANSWER

    # --- both modes ---

    async def handle_update(self, update: dict[str, Any]) -> dict[str, Any] | None:
        """Record (or ignore) one update; returns a method payload to answer with, if any.

        Raises BadRequest(400) for something that is not an update; store errors propagate
        (the app answers 503 and Telegram redelivers).
        """
        try:  # validate the whole update (both chat ids too) before anything changes
            result = translate(update, bot_id=self.bot_id, bot_username=self.username)
            moved = migration(update)
        except BadUpdate as exc:
            raise BadRequest(400, str(exc)) from None
        if result == NOT_ADDRESSED and self.username is None and may_name_a_bot(update):
            await self._learn_username()  # only a name can tell whether it was meant for us
            result = translate(update, bot_id=self.bot_id, bot_username=self.username)
        if moved is not None:
            await to_thread.run_sync(self._migrate, moved)
        if isinstance(result, Ignored):
            log.debug("telegram update ignored: %s", result.reason)
            return None
        refusal = self.gateway.refusal_for(result)
        if refusal is not None:
            return send_message_payload(result, refusal) if refusal else None
        try:
            await self.gateway.record(result)
        except TurnRejected as exc:
            log.warning("telegram update %s not recorded: %s", result.event_id, exc)
        return None

    async def _learn_username(self) -> None:
        """The bot's @username from getMe, once (concurrent first messages wait for one call).
        Raises UsernameUnknown (an OSError: transient, so the update comes again)."""
        self._asking = self._asking or asyncio.Lock()
        async with self._asking:
            if self.username is not None:
                return
            self.username = await fetch_username(self._token, self._api_base)
            log.info("telegram bot is @%s", self.username)

    def _migrate(self, moved: Migration) -> None:
        with self.gateway.store.write() as conn:
            done = chats.migrate_chat(conn, TELEGRAM, moved.old, moved.new, self.gateway.clock())
        log.info("telegram chat %s migrated to %s: %s", moved.old, moved.new, done)


class UsernameUnknown(ConnectionError):
    """getMe failed: the update cannot be judged yet (a transient error, like a store one)."""


async def fetch_username(token: str, api_base: str) -> str:
    """getMe's username, through python-telegram-bot (its error text has the token removed)."""
    from telegram import Bot
    from telegram.error import TelegramError
    from telegram.request import HTTPXRequest

    request = HTTPXRequest(connection_pool_size=1)
    bot = Bot(token, base_url=api_base, request=request, get_updates_request=request)
    try:
        me = await bot.get_me()
    except (TelegramError, OSError) as exc:
        said = str(exc).replace(token, "***")
        raise UsernameUnknown(f"getMe failed: {type(exc).__name__}: {said}") from None
    finally:
        await request.shutdown()
    if not me.username:
        raise UsernameUnknown("getMe answered without a username")
    return str(me.username)


def send_message_payload(turn: InboundTurn, text: str) -> dict[str, Any]:
    payload: dict[str, Any] = {"method": "sendMessage", "chat_id": turn.chat_id, "text": text}
    if turn.thread_id:
        payload["message_thread_id"] = int(turn.thread_id)
    return payload


class TelegramPoller:
    """getUpdates long polling through python-telegram-bot's Bot, until cancelled."""

    def __init__(
        self, receiver: TelegramReceiver, *, token: str, api_base: str, timeout: int = POLL_TIMEOUT
    ) -> None:
        self.receiver = receiver
        self._token = token
        self._api_base = api_base
        self._timeout = timeout
        self.offset: int | None = None

    async def run(self) -> None:
        """Poll until cancelled. (Bot.initialize is not used: its error text holds the token.)"""
        from telegram import Bot
        from telegram.request import HTTPXRequest
        from telegram.warnings import PTBDeprecationWarning

        warnings.filterwarnings(  # PTB warns on every RetryAfter it builds; we read the timedelta
            "ignore", message=r".*`retry_after` will be of type", category=PTBDeprecationWarning
        )
        requests = [
            HTTPXRequest(connection_pool_size=4),
            HTTPXRequest(connection_pool_size=1, read_timeout=self._timeout + 10),
        ]
        bot = Bot(
            self._token,
            base_url=self._api_base,
            request=requests[0],
            get_updates_request=requests[1],
        )
        try:
            await self._poll(bot)
        finally:
            for request in requests:
                await request.shutdown()

    async def _poll(self, bot: Any) -> None:
        from telegram.error import RetryAfter, TelegramError

        backoff = 1.0
        await bot.delete_webhook(drop_pending_updates=False)
        log.info("telegram long polling started (pending updates kept)")
        while True:
            try:
                updates = await bot.get_updates(
                    offset=self.offset, timeout=self._timeout, allowed_updates=ALLOWED_UPDATES
                )
            except RetryAfter as exc:
                await asyncio.sleep(_retry_after(exc))
                continue
            except TelegramError as exc:
                log.warning("getUpdates failed (%s); retrying in %.0f s", _clean(exc), backoff)
                await asyncio.sleep(backoff)
                backoff = min(BACKOFF_MAX, backoff * 2)
                continue
            if await self._take(bot, [scrub(u.to_dict()) for u in updates]):
                backoff = 1.0
            else:
                await asyncio.sleep(backoff)
                backoff = min(BACKOFF_MAX, backoff * 2)

    async def _take(self, bot: Any, updates: list[dict[str, Any]]) -> bool:
        """Record `updates` in order, moving the offset past each; False on a store error."""
        for update in updates:
            try:
                reply = await self.receiver.handle_update(update)
            except BadRequest as exc:
                log.warning("skipping a malformed update: %s", exc.reason)
                reply = None
            except Exception as exc:
                if is_transient(exc):
                    log.warning(
                        "could not record update %s (%s); will fetch it again",
                        update.get("update_id"),
                        exc,
                    )
                    return False
                # Fails the same way every time: holding the offset would stop every update
                # behind it from ever being recorded.
                log.error(
                    "update %s cannot be recorded (%s: %s); skipped",
                    update.get("update_id"),
                    type(exc).__name__,
                    exc,
                )
                reply = None
            if reply is not None:
                try:
                    await bot.send_message(
                        chat_id=reply["chat_id"],
                        text=reply["text"],
                        message_thread_id=reply.get("message_thread_id"),
                    )
                except Exception as exc:  # a refusal is best-effort
                    log.info("refusal not sent: %s", _clean(exc))
            self.offset = int(update["update_id"]) + 1
        return True


def _clean(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _retry_after(exc: Any) -> float:
    value = getattr(exc, "_retry_after", None)
    return float(value.total_seconds()) if value is not None else 5.0


async def register_webhook(*, token: str, api_base: str, url: str, secret: str) -> None:
    """setWebhook with our secret token; pending updates are kept (never dropped)."""
    from telegram import Bot
    from telegram.request import HTTPXRequest

    request = HTTPXRequest(connection_pool_size=1)
    bot = Bot(token, base_url=api_base, request=request, get_updates_request=request)
    try:
        await bot.set_webhook(
            url=url,
            secret_token=secret,
            allowed_updates=ALLOWED_UPDATES,
            drop_pending_updates=False,
        )
    finally:
        await request.shutdown()
    log.info("telegram webhook registered")
