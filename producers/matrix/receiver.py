"""Matrix receiver: matrix-nio's `AsyncClient.sync` long poll, resumed from the database.

Where it resumes: the sync token (`next_batch`) is kept in `platform_cursors` (shared/store/
cursors.py) under the bot's user id. It is stored strictly AFTER every turn of its batch is
committed (the turns go through the gateway's batched recorder, its own transactions), never
before. A crash between the two replays that batch on restart, and a replayed event is a
no-op (its event id is already in the inbox), so nothing is skipped and nothing answered twice.
A store error leaves the token where it was and the same batch is asked for again.

The very first sync (no stored token) takes the token and drops its backlog: a bot added to
a busy room does not answer its history. Events the bot sent itself are ignored; an event
that is not one (translate's BadEvent) is logged and skipped, nothing stored for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from producers.gateway.deps import Gateway
from producers.matrix.translate import BadEvent, Ignored, translate
from shared.platforms.matrix import MATRIX
from shared.store import cursors
from shared.turns import InboundTurn, TurnRejected

log = logging.getLogger(__name__)

RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)


class MatrixReceiver:
    def __init__(
        self,
        gateway: Gateway,
        *,
        homeserver: str,
        user_id: str,
        token: str,
        sync_timeout_ms: int = 30_000,
    ) -> None:
        self.gateway = gateway
        self.homeserver = homeserver.rstrip("/")
        self.user_id = user_id
        self._token = token
        self.sync_timeout_ms = sync_timeout_ms
        self.client: Any = None
        self.recorded = 0
        self.batches = 0

    def build_client(self) -> Any:
        from nio import AsyncClient, AsyncClientConfig

        config = AsyncClientConfig(store_sync_tokens=False, encryption_enabled=False)
        client = AsyncClient(self.homeserver, self.user_id, config=config)
        client.access_token = self._token
        client.user_id = self.user_id
        self.client = client
        return client

    # --- the stored token ---

    def _load(self) -> str | None:
        with self.gateway.store.read() as conn:
            return cursors.load(conn, MATRIX, self.user_id)

    def _save(self, token: str) -> None:
        with self.gateway.store.write() as conn:
            cursors.save(conn, MATRIX, self.user_id, token)

    # --- one batch ---

    def _members(self, room_id: str) -> int:
        room = self.client.rooms.get(room_id) if self.client is not None else None
        if room is None:
            return 0
        return int(room.joined_count or room.member_count or 0)

    async def handle(self, room_id: str, source: Any) -> None:
        """One timeline event: recorded, refused, or skipped. Store errors propagate."""
        try:
            result = translate(
                source, room_id=room_id, members=self._members(room_id), bot_user_id=self.user_id
            )
        except BadEvent as exc:
            log.warning("matrix event in %s not understood: %s", room_id, exc)
            return
        if isinstance(result, Ignored):
            return
        refusal = self.gateway.refusal_for(result)
        if refusal is not None:
            if refusal:
                await self._reply(result, refusal)
            return
        try:
            await self.gateway.record(result)
            self.recorded += 1
        except TurnRejected as exc:
            log.warning("matrix event %s not recorded: %s", result.event_id, exc)

    async def handle_sync(self, response: Any, since: str | None) -> None:
        """Record a sync response's turns (none on the very first sync), then store its token."""
        if since is not None:
            for room_id, room in response.rooms.join.items():
                for event in room.timeline.events:
                    await self.handle(room_id, getattr(event, "source", None))
        else:
            log.info("matrix first sync: its backlog is not answered")
        await asyncio.to_thread(self._save, response.next_batch)
        self.batches += 1

    async def _reply(self, turn: InboundTurn, text: str) -> None:
        try:
            await self.client.room_send(
                turn.chat_id, "m.room.message", {"msgtype": "m.notice", "body": text}
            )
        except Exception as exc:  # best effort: the turn is refused either way
            log.info("matrix refusal not sent: %s", type(exc).__name__)

    async def run(self) -> None:
        """Sync and record until cancelled."""
        from nio import SyncResponse

        client = self.build_client()
        failures = 0
        try:
            since = await asyncio.to_thread(self._load)
            while True:
                response = await client.sync(
                    timeout=self.sync_timeout_ms if since else 0, since=since, full_state=False
                )
                if not isinstance(response, SyncResponse):
                    wait = RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)]
                    failures += 1
                    log.warning("matrix sync failed (%s); again in %g s", response, wait)
                    await asyncio.sleep(wait)
                    continue
                try:
                    await self.handle_sync(response, since)
                except Exception as exc:  # the store: ask for the same batch again
                    wait = RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)]
                    failures += 1
                    log.error("matrix batch not recorded (%s); again in %g s", exc, wait)
                    await asyncio.sleep(wait)
                    continue
                failures = 0
                since = response.next_batch
        finally:
            await client.close()
