"""Teams receiver: `POST /teams/messages`, one Bot Framework activity per request.

Every request must carry `Authorization: Bearer <JWT>` issued by the Bot Framework: checked by
botframework-connector (`JwtTokenValidation.authenticate_request` with a
`SimpleCredentialProvider` for our app id) against the keys of the OpenID metadata
(`platforms.teams.openid_metadata`, Microsoft's by default): signature, issuer, expiry, the
audience (our app id) and the `serviceurl` claim (the activity's `serviceUrl`). No header →
401; a token that fails any check → 403; nothing is recorded either way. Then the body must be
JSON (415) under the size cap (413) and an activity (400). 200 is sent once the turn is
committed; activities that are not turns are acked and ignored.

Replies go to the activity's `serviceUrl` (the Bot Framework picks it per tenant and region):
it is trusted only once the token has passed, since the token's `serviceurl` claim must name
it, and only under `service_urls` (the Bot Framework's hosts by default) or on `api_base`'s
origin: 403 otherwise. The URL is stored for its conversation (state.db's platform_cursors,
account `service_url:<chat id>`), where the sender finds it, in the turn's own transaction
ahead of the turn (the Recorder's batch: no thread hop or transaction of its own); this
process remembers what it stored, so only a new conversation or a moved one costs a write.
A user not on the allow-list gets one short refusal, sent after the ack, to that URL.

The Bot Framework sends one token with every activity for about an hour, and checking it costs
about a millisecond (botframework-connector decodes it four times): a token that passed is
remembered with the service URL and channel it passed for, until it expires or for ten
minutes at most (whichever is first), in a bounded map of this process.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from functools import partial
from typing import Any
from urllib.parse import quote

import httpx
from botbuilder.schema import Activity
from botframework.connector.auth import (
    ChannelValidation,
    JwtTokenValidation,
    SimpleCredentialProvider,
)
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from producers.gateway.body import BadRequest, media_type, parse_json, read_body
from producers.gateway.deps import Gateway
from producers.teams.translate import BadPayload, Ignored, service_url, translate
from shared.db import Connection
from shared.platforms.teams import (
    SCOPE,
    SERVICE_URL_CURSOR,
    TEAMS,
    TeamsSettings,
    service_url_allowed,
)
from shared.store import cursors
from shared.turns import InboundTurn, TurnRejected

log = logging.getLogger(__name__)

OK = b'{"ok": true}'
# The usual answer, one object for every request: a Response is only read when sent, and
# building one (its headers encoded) was a few us a request for the same bytes.
ACK = Response(OK, media_type="application/json")
TIMEOUT = 10.0
REMEMBER_SECONDS = 600.0
REMEMBERED = 1024  # tokens that passed, kept for REMEMBER_SECONDS at most
# Conversations whose service URL this receiver knows is stored. A conversation it does not
# remember costs its turn a write more (the URL saved again): at 1,024 a bot with a few
# thousand active conversations rewrote it on most turns. An entry is ~200 bytes.
URLS_REMEMBERED = 16_384


class TeamsReceiver:
    def __init__(self, gateway: Gateway, conf: TeamsSettings) -> None:
        assert conf.app_id is not None and conf.token is not None and conf.api_base
        self.gateway = gateway
        self._conf = conf
        self._app_id = conf.app_id
        self._credentials = SimpleCredentialProvider(conf.app_id, "")
        self._stored: OrderedDict[str, str] = OrderedDict()  # chat id → service URL stored
        self._passed: OrderedDict[tuple[str, str, str], float] = OrderedDict()
        # botframework-connector reads the metadata URL from this class attribute (None: the
        # Bot Framework's own); one Teams receiver per process sets it.
        ChannelValidation.open_id_metadata_endpoint = conf.openid_metadata

    async def authenticate(self, header: str, payload: dict[str, Any]) -> None:
        """Raise BadRequest(403) unless `header` is a Bot Framework token for this bot and
        this activity's service URL."""
        channel, url = str(payload.get("channelId") or ""), service_url(payload)
        seen = (header, url or "", channel)
        now = time.time()
        if self._passed.get(seen, 0.0) > now:
            return
        try:
            activity = Activity(channel_id=channel, service_url=url)
            identity = await JwtTokenValidation.authenticate_request(
                activity, header, self._credentials
            )
        except Exception as exc:  # PermissionError, PyJWT's errors, a key not found
            log.info("teams activity refused: %s: %s", type(exc).__name__, exc)
            raise BadRequest(403, "the Bot Framework token is not valid for this bot") from None
        expires = identity.claims.get("exp") if isinstance(identity.claims, dict) else None
        if isinstance(expires, int | float) and not isinstance(expires, bool):
            self._passed[seen] = min(float(expires), now + REMEMBER_SECONDS)
            self._passed.move_to_end(seen)
            while len(self._passed) > REMEMBERED:
                self._passed.popitem(last=False)

    async def messages(self, request: Request) -> Response:
        try:
            header = request.headers.get("authorization")
            if not header:
                raise BadRequest(401, "missing Authorization: Bearer <token>")
            body = await read_body(request)
            if media_type(request) != "application/json":
                raise BadRequest(415, "the body must be application/json")
            payload = parse_json(body)
            await self.authenticate(header, payload)
            refusal = await self.handle(payload)
        except BadRequest as exc:
            return exc.response()
        task = BackgroundTask(self.send_refusal, *refusal) if refusal else None
        return Response(OK, media_type="application/json", background=task) if task else ACK

    async def handle(self, payload: dict[str, Any]) -> tuple[InboundTurn, str, str] | None:
        """Record the activity's turn; returns a refusal to send (turn, text, service URL).

        Raises BadRequest for a body that is not an activity (nothing recorded); store errors
        propagate (the app answers 503 and the Bot Framework redelivers)."""
        url = service_url(payload)
        if url is None or not service_url_allowed(self._conf, url):
            raise BadRequest(403, "serviceUrl is not an allowed Bot Connector (service_urls)")
        try:
            result = translate(payload)
        except BadPayload as exc:
            raise BadRequest(400, str(exc)) from None
        if isinstance(result, Ignored):
            log.debug("teams activity ignored: %s", result.reason)
            return None
        refusal = self.gateway.refusal_for(result)
        if refusal is not None:
            return (result, refusal, url) if refusal else None
        chat_id = result.chat_id
        storing = self._stored.get(chat_id) != url
        try:
            await self.gateway.record(result, partial(_save_url, chat_id, url) if storing else None)
        except TurnRejected as exc:
            raise BadRequest(400, f"not recorded: {exc}") from None
        if storing:  # committed: on the event loop, so no lock is needed
            self._stored[chat_id] = url
            self._stored.move_to_end(chat_id)
            while len(self._stored) > URLS_REMEMBERED:
                self._stored.popitem(last=False)
        return None

    def send_refusal(self, turn: InboundTurn, text: str, url: str) -> None:
        """Reply to the refused message (a worker thread; best effort)."""
        secret = self._conf.token.get_secret_value() if self._conf.token else ""
        grant = {
            "grant_type": "client_credentials",
            "client_id": self._app_id,
            "client_secret": secret,
            "scope": SCOPE,
        }
        conversation = turn.chat_id
        if turn.thread_id:
            conversation += f";messageid={turn.thread_id}"
        path = f"v3/conversations/{quote(conversation, safe='')}/activities"
        path += f"/{quote(turn.message_id or '', safe='')}"
        try:
            with httpx.Client(timeout=TIMEOUT) as client:
                answer = client.post(self._conf.token_url, data=grant)
                token = answer.json().get("access_token") if answer.status_code == 200 else None
                if not isinstance(token, str):
                    log.info("teams refusal not sent: no bot token (%s)", answer.status_code)
                    return
                client.post(
                    url.rstrip("/") + "/" + path,
                    json={"type": "message", "text": text, "textFormat": "plain"},
                    headers={"Authorization": f"Bearer {token}"},
                )
        except (httpx.HTTPError, ValueError) as exc:
            log.info("teams refusal not sent: %s", type(exc).__name__)


def _save_url(chat_id: str, url: str, conn: Connection) -> None:
    """Where replies to `chat_id` go from now on (in its turn's transaction, ahead of it)."""
    cursors.save(conn, TEAMS, SERVICE_URL_CURSOR + chat_id, url)
