"""The Signal receiver: polls signal-cli-rest-api's `GET /v1/receive/{number}`.

Why polling, not the daemon's websocket (its json-rpc mode) nor a receive webhook:
- each poll is one plain HTTP request that either answers a JSON list or fails: there is no
  socket state to lose, reconnect or heartbeat, and a test drives it with an ordinary HTTP
  fake. The daemon must run in its `normal` or `native` mode (json-rpc serves only a socket).
- the daemon is local and trusted (it holds the account's keys; run it beside hermes, never
  exposed): nothing is signed, so the receiver speaks only to the configured `api_base`,
  never follows a redirect, and builds every URL from that base. There is no inbound route,
  so nothing outside can post a forged message to hermes.
- in those modes signal-cli acknowledges what a receive returns, so an envelope is held in
  memory until it is recorded: a store error retries the same envelopes (with backoff)
  before polling again. A crash between a poll and its commit loses that poll's envelopes
  (the daemon has already acknowledged them); the websocket mode has the same gap.

Every item is checked (translate.py) before anything is stored: a malformed one is logged
and skipped, never retried forever and never fatal; a redelivered one is a no-op (the
inbox's unique event id). A sender not in `allowed_users` gets one short refusal an hour.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import quote

import httpx

from producers.gateway.deps import Gateway
from producers.signal.translate import BadEnvelope, Ignored, translate
from shared.db.errors import is_transient
from shared.platforms.signal import GROUP_PREFIX
from shared.surrogates import scrub
from shared.turns import InboundTurn, TurnRejected

log = logging.getLogger(__name__)

BACKOFF_MAX = 30.0


class SignalReceiver:
    def __init__(
        self, gateway: Gateway, *, account: str, api_base: str, poll_timeout: int = 10
    ) -> None:
        self.gateway = gateway
        self.account = account
        self.api_base = api_base.rstrip("/")
        self.poll_timeout = poll_timeout
        self._pending: list[Any] = []

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.api_base,
            follow_redirects=False,
            timeout=httpx.Timeout(10.0, read=self.poll_timeout + 20.0),
        )

    async def run(self) -> None:
        """Poll until cancelled."""
        async with self._client() as client:
            log.info("signal: polling %s for the account's messages", self.api_base)
            backoff = 1.0
            while True:
                if not self._pending:
                    try:
                        self._pending = await self.poll(client)
                    except (httpx.HTTPError, ValueError) as exc:
                        log.warning(
                            "signal receive failed (%s); retrying in %.0f s", _clean(exc), backoff
                        )
                        await asyncio.sleep(backoff)
                        backoff = min(BACKOFF_MAX, backoff * 2)
                        continue
                if await self.take(client):
                    backoff = 1.0
                else:
                    await asyncio.sleep(backoff)
                    backoff = min(BACKOFF_MAX, backoff * 2)

    async def poll(self, client: httpx.AsyncClient) -> list[Any]:
        """One receive; the daemon's list of items. Raises on an answer that is not one."""
        path = f"/v1/receive/{quote(self.account, safe='')}"
        answer = await client.get(path, params={"timeout": self.poll_timeout})
        if answer.status_code != 200:
            raise ValueError(f"the daemon answered {answer.status_code}")
        items = answer.json()
        if not isinstance(items, list):
            raise ValueError("the daemon's answer is not a list")
        return items

    async def take(self, client: httpx.AsyncClient) -> bool:
        """Record the pending items in order, dropping each once done; False on a store error
        that may pass (they are tried again)."""
        while self._pending:
            item = scrub(self._pending[0])
            try:
                await self.handle(client, item)
            except Exception as exc:
                if is_transient(exc):
                    log.warning("signal message not recorded (%s); will try again", exc)
                    return False
                log.error("signal message cannot be recorded (%s); skipped", _clean(exc))
            self._pending.pop(0)
        return True

    async def handle(self, client: httpx.AsyncClient, item: Any) -> None:
        """Record (or skip) one item; store errors propagate."""
        try:
            result = translate(item, account=self.account, api_base=self.api_base)
        except BadEnvelope as exc:
            log.warning("signal: skipping a malformed envelope: %s", exc)
            return
        if isinstance(result, Ignored):
            log.debug("signal envelope ignored: %s", result.reason)
            return
        refusal = self.gateway.refusal_for(result)
        if refusal is not None:
            if refusal:
                await self._refuse(client, result, refusal)
            return
        try:
            await self.gateway.record(result)
        except TurnRejected as exc:
            log.warning("signal message %s not recorded: %s", result.event_id, exc)

    async def _refuse(self, client: httpx.AsyncClient, turn: InboundTurn, text: str) -> None:
        recipient = turn.chat_id if turn.chat_id.startswith(GROUP_PREFIX) else turn.user_id
        try:
            await client.post(
                "/v2/send",
                json={"message": text, "number": self.account, "recipients": [recipient]},
            )
        except httpx.HTTPError as exc:  # a refusal is best-effort
            log.info("signal refusal not sent: %s", _clean(exc))


def _clean(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
