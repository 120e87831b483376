"""Discord receiver: a gateway client (discord.py, message-content intent) that records turns.

The raw `MESSAGE_CREATE` payloads (discord.py's `on_socket_raw_receive`) go to the pure
translate function with the channel from discord.py's cache (fetched over REST when not
cached). Turns are recorded in order by one consumer task, each in a worker thread, so the
gateway's event loop (heartbeats included) never waits on SQLite. The gateway does not
redeliver, so a store error is retried a few times before the message is given up (logged).
A refused user gets one short reply in the channel.
"""

from __future__ import annotations

import asyncio
import json
import logging
import warnings
from typing import Any

from producers.discord.translate import BadMessage, Ignored, translate
from producers.gateway.deps import Gateway
from shared.surrogates import scrub
from shared.turns import InboundTurn, TurnRejected

log = logging.getLogger(__name__)

RECORD_TRIES = 5
QUEUE_SIZE = 10_000


def import_discord() -> Any:
    """discord.py, imported without its warning about the stdlib `audioop` (voice; unused)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*audioop", category=DeprecationWarning)
        import discord
    return discord


class DiscordReceiver:
    def __init__(self, gateway: Gateway, *, token: str, api_base: str) -> None:
        self.gateway = gateway
        self._token = token
        self._api_base = api_base.rstrip("/")
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        self.client: Any = None
        self.recorded = 0

    def build_client(self) -> Any:
        discord = import_discord()
        from discord.http import Route

        Route.BASE = self._api_base  # the REST root discord.py talks to (a proxy, a test double)
        intents = discord.Intents.none()
        intents.guilds = True
        intents.guild_messages = True
        intents.dm_messages = True
        intents.message_content = True
        client = discord.Client(intents=intents, enable_debug_events=True)

        async def on_socket_raw_receive(msg: Any) -> None:
            self.feed(msg)

        client.event(on_socket_raw_receive)
        self.client = client
        return client

    def feed(self, raw: Any) -> None:
        """Queue a raw gateway frame if it is a MESSAGE_CREATE (never blocks the loop)."""
        if isinstance(raw, bytes):
            return  # compressed frames reach us decompressed; anything else is not JSON
        if '"MESSAGE_CREATE"' not in raw:
            return
        try:
            frame = scrub(json.loads(raw))
        except (ValueError, RecursionError):
            return
        if frame.get("t") == "MESSAGE_CREATE" and isinstance(frame.get("d"), dict):
            try:
                self._queue.put_nowait(frame["d"])
            except asyncio.QueueFull:
                log.error("discord intake queue full; message %s dropped", frame["d"].get("id"))

    async def _channel(self, message: dict[str, Any]) -> dict[str, Any] | None:
        discord = import_discord()

        if message.get("guild_id") is None or self.client is None:
            return None
        channel_id = int(message["channel_id"])
        channel = self.client.get_channel(channel_id)
        if channel is None:
            try:
                channel = await self.client.fetch_channel(channel_id)
            except discord.HTTPException as exc:
                log.warning("discord channel %s unknown (%s)", channel_id, exc.status)
                return None
        info: dict[str, Any] = {"id": str(channel.id), "type": channel.type.value}
        if isinstance(channel, discord.Thread):
            info["parent_id"] = str(channel.parent_id)
        return info

    def _bot_id(self) -> str | None:
        user = getattr(self.client, "user", None)
        return str(user.id) if user is not None else None

    async def handle(self, message: dict[str, Any]) -> None:
        try:
            result = translate(
                message, channel=await self._channel(message), bot_user_id=self._bot_id()
            )
        except BadMessage as exc:
            log.warning("discord message not understood: %s", exc)
            return
        if isinstance(result, Ignored):
            return
        refusal = self.gateway.refusal_for(result)
        if refusal is not None:
            if refusal:
                await self._reply(result, refusal)
            return
        await self._record(result)

    async def _record(self, turn: InboundTurn) -> None:
        for attempt in range(1, RECORD_TRIES + 1):
            try:
                await self.gateway.record(turn)
                self.recorded += 1
                return
            except TurnRejected as exc:
                log.warning("discord message %s not recorded: %s", turn.event_id, exc)
                return
            except Exception as exc:
                if attempt == RECORD_TRIES:
                    log.error(
                        "discord message %s lost after %d tries: %s", turn.event_id, attempt, exc
                    )
                    return
                await asyncio.sleep(0.5 * 2**attempt)

    async def _reply(self, turn: InboundTurn, text: str) -> None:
        try:
            channel = self.client.get_channel(int(turn.thread_id or turn.chat_id))
            if channel is None:
                channel = await self.client.fetch_channel(int(turn.thread_id or turn.chat_id))
            await channel.send(text)
        except Exception as exc:  # best effort
            log.info("discord refusal not sent: %s", type(exc).__name__)

    async def consume(self) -> None:
        while True:
            message = await self._queue.get()
            try:
                await self.handle(message)
            except Exception:
                log.exception("discord message %s failed", message.get("id"))

    async def run(self) -> None:
        """Connect and record until cancelled."""
        client = self.build_client()  # imports discord (quietly) first
        import yarl
        from discord.gateway import DiscordWebSocket

        consumer = asyncio.create_task(self.consume())
        try:
            await client.login(self._token)
            # Ask the REST root where its gateway is (discord.py would assume Discord's own).
            _, url, _ = await client.http.get_bot_gateway()
            DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
            await client.connect()
        finally:
            consumer.cancel()
            await client.close()
