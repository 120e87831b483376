"""The Signal receiver: polls signal-cli-rest-api's `GET /v1/receive/{number}`.

Why polling, not the daemon's websocket (its json-rpc mode) nor a receive webhook:
- each poll is one plain HTTP request that either answers a JSON list or fails: there is no
  socket state to lose, reconnect or heartbeat, and a test drives it with an ordinary HTTP
  fake. The daemon must run in its `normal` or `native` mode (json-rpc serves only a socket).
- the daemon is local and trusted (it holds the account's keys; run it beside hermes, never
  exposed): nothing is signed, so the receiver speaks only to the configured `api_base`,
  never follows a redirect, and builds every URL from that base. There is no inbound route,
  so nothing outside can post a forged message to hermes.

What a crash can lose, as far as the daemon allows (signal-cli-rest-api, src/api/api.go and
src/client/client.go; signal-cli's `receive`): there is no acknowledgement to give and no
redelivery to ask for. A receive runs `signal-cli receive --timeout T --max-messages N`, which
acknowledges each envelope to Signal's servers as it takes it and prints it; the REST daemon
answers with all of them when signal-cli exits (N taken, or T seconds without a new one).
Until then an envelope waits on Signal's servers and survives anything we do. So:
- kept: every envelope not yet taken by a receive (a receiver that is down, killed or
  restarting finds them on its next receive), and every envelope whose turn was committed.
- lost: the envelopes of the one receive in flight when this process dies, from the moment
  signal-cli took them until their commit: at most `receive_max_messages` (N, 10 by default),
  and the window is the rest of that receive (at most T seconds after the last arrival, less
  once N are taken) plus the HTTP answer and the commit (milliseconds). The json-rpc mode's
  websocket drops what arrives while no client is connected, and its receive webhook posts
  once without retrying: both lose more, which is why this receiver polls.
- minimised here: the envelopes of a receive are recorded first, in order, before anything
  else is sent (refusals to strangers go after the last commit), and held in memory until
  recorded: a store error retries the same envelopes (with backoff) before polling again.
tests/integration/test_signal_kill.py kills a receiver mid-receive and shows both sides.

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
        self,
        gateway: Gateway,
        *,
        account: str,
        api_base: str,
        poll_timeout: int = 10,
        max_messages: int = 10,
    ) -> None:
        self.gateway = gateway
        self.account = account
        self.api_base = api_base.rstrip("/")
        self.poll_timeout = poll_timeout
        self.max_messages = max_messages
        self._pending: list[Any] = []
        self._refusals: list[tuple[InboundTurn, str]] = []

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
        """One receive; the daemon's list of items. Raises on an answer that is not one.

        `timeout` and `max_messages` are the receive endpoint's query parameters in normal and
        native mode (signal-cli-rest-api's swagger for GET /v1/receive/{number})."""
        path = f"/v1/receive/{quote(self.account, safe='')}"
        params = {"timeout": self.poll_timeout, "max_messages": self.max_messages}
        answer = await client.get(path, params=params)
        if answer.status_code != 200:
            raise ValueError(f"the daemon answered {answer.status_code}")
        items = answer.json()
        if not isinstance(items, list):
            raise ValueError("the daemon's answer is not a list")
        return items

    async def take(self, client: httpx.AsyncClient) -> bool:
        """Record the pending items in order, dropping each once done, then send the refusals
        they earned; False on a store error that may pass (the rest are tried again)."""
        try:
            while self._pending:
                item = scrub(self._pending[0])
                try:
                    await self.handle(item)
                except Exception as exc:
                    if is_transient(exc):
                        log.warning("signal message not recorded (%s); will try again", exc)
                        return False
                    log.error("signal message cannot be recorded (%s); skipped", _clean(exc))
                self._pending.pop(0)
            return True
        finally:
            refusals, self._refusals = self._refusals, []
            for turn, text in refusals:
                await self._refuse(client, turn, text)

    async def handle(self, item: Any) -> None:
        """Record (or skip) one item; a refusal it earns is queued. Store errors propagate."""
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
                self._refusals.append((result, refusal))
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
