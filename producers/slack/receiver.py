"""Slack receivers: the Events API route (`POST /slack/events`) and Socket Mode (development).

HTTP: the signature is verified on the raw body (with the five-minute window) before anything
is parsed; `url_verification` is answered with its challenge; an event is acked (200) as soon
as its turn is committed — a few milliseconds, well inside Slack's 3 s. Retries
(`X-Slack-Retry-Num`) and the app_mention/message double delivery translate to one event id,
so they record nothing new. Slash commands (form-encoded) may use the same URL. Events that
are not turns are acked and ignored, or Slack would retry them. A refused user gets one
ephemeral refusal, posted after the ack from a background thread.

Socket Mode (`platforms.slack.socket_mode` + `app_token`): the same handling, acked over the
socket once recorded.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qsl

from anyio import to_thread
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from producers.gateway.body import BadRequest, media_type, parse_json, read_body
from producers.gateway.deps import Gateway
from producers.slack.signature import BadSignature, check_headers, verify
from producers.slack.translate import BadEvent, Ignored, translate, translate_command
from shared.platforms import DM
from shared.surrogates import scrub
from shared.turns import InboundTurn, TurnRejected

log = logging.getLogger(__name__)
# The usual answer, one object for every request: a Response is only read when sent, and
# building one (its headers encoded) was a few us a request for the same bytes.
ACK = Response(status_code=200)


class SlackReceiver:
    def __init__(
        self,
        gateway: Gateway,
        *,
        signing_secret: str | None,
        token: str | None,
        api_base: str,
    ) -> None:
        self.gateway = gateway
        self._secret = signing_secret
        self._token = token
        self._api_base = api_base
        self._client: Any | None = None

    # --- HTTP ---

    async def events(self, request: Request) -> Response:
        try:
            if self._secret is None:
                raise BadRequest(404, "Slack events are off: set platforms.slack.signing_secret")
            timestamp = request.headers.get("x-slack-request-timestamp")
            signature = request.headers.get("x-slack-signature")
            try:  # refuse what the headers already show before reading up to 1 MiB unsigned
                check_headers(timestamp, signature, now=self.gateway.clock())
                body = await read_body(request)
                verify(self._secret, timestamp, signature, body, now=self.gateway.clock())
            except BadSignature as exc:
                raise BadRequest(401, str(exc)) from None
            if media_type(request) == "application/x-www-form-urlencoded":
                return await self._command(body)
            payload = parse_json(body)
            if payload.get("type") == "url_verification":
                challenge = payload.get("challenge")
                if not isinstance(challenge, str):
                    raise BadRequest(400, "url_verification without a challenge")
                return JSONResponse({"challenge": challenge})
            refusal = await self.handle_event(payload)
        except BadRequest as exc:
            return exc.response()
        task = BackgroundTask(self.send_refusal, *refusal) if refusal else None
        return Response(status_code=200, background=task) if task else ACK

    async def _command(self, body: bytes) -> Response:
        try:
            form = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
            result = translate_command(form)
        except (UnicodeDecodeError, BadEvent) as exc:
            raise BadRequest(400, f"bad slash command: {exc}") from None
        if isinstance(result, Ignored):
            return ACK
        refusal = self.gateway.refusal_for(result)
        if refusal is not None:
            return JSONResponse({"response_type": "ephemeral", "text": refusal or "…"})
        try:
            await self.gateway.record(result)
        except TurnRejected as exc:
            return JSONResponse({"response_type": "ephemeral", "text": str(exc)})
        return ACK

    # --- both modes ---

    async def handle_event(self, payload: dict[str, Any]) -> tuple[InboundTurn, str] | None:
        """Record (or ignore) one event_callback; returns a refusal to send, if one is due.

        Raises BadRequest(400) for a body that is not an event; store errors propagate.
        """
        try:
            result = translate(payload)
        except BadEvent as exc:
            raise BadRequest(400, str(exc)) from None
        if isinstance(result, Ignored):
            log.debug("slack event ignored: %s", result.reason)
            return None
        refusal = self.gateway.refusal_for(result)
        if refusal is not None:
            return (result, refusal) if refusal else None
        try:
            await self.gateway.record(result)
        except TurnRejected as exc:
            log.warning("slack event %s not recorded: %s", result.event_id, exc)
        return None

    def _web(self) -> Any:
        if self._client is None:
            from slack_sdk import WebClient

            self._client = WebClient(
                token=self._token, base_url=self._api_base, timeout=10, retry_handlers=[]
            )
        return self._client

    def send_refusal(self, turn: InboundTurn, text: str) -> None:
        """Post the refusal (a worker thread; best effort): ephemeral outside DMs."""
        if self._token is None:
            return
        try:
            if turn.chat_type == DM:
                self._web().chat_postMessage(channel=turn.chat_id, text=text)
            else:
                self._web().chat_postEphemeral(
                    channel=turn.chat_id, user=turn.user_id, text=text, thread_ts=turn.thread_id
                )
        except Exception as exc:
            log.info("slack refusal not sent: %s", type(exc).__name__)


async def run_socket_mode(
    receiver: SlackReceiver, *, app_token: str, token: str, api_base: str
) -> None:
    """Socket Mode until cancelled: events and slash commands acked once recorded."""
    import asyncio

    from slack_sdk.socket_mode.aiohttp import SocketModeClient
    from slack_sdk.socket_mode.request import SocketModeRequest
    from slack_sdk.socket_mode.response import SocketModeResponse
    from slack_sdk.web.async_client import AsyncWebClient

    web = AsyncWebClient(token=token, base_url=api_base)
    client = SocketModeClient(app_token=app_token, web_client=web)

    async def on_request(client: SocketModeClient, req: SocketModeRequest) -> None:
        payload: dict[str, Any] | None = None
        scrub(req.payload)
        try:
            if req.type == "events_api":
                refusal = await receiver.handle_event(req.payload)
                if refusal:
                    await to_thread.run_sync(receiver.send_refusal, *refusal)
            elif req.type == "slash_commands":
                result = translate_command(req.payload)
                if not isinstance(result, Ignored):
                    refused = receiver.gateway.refusal_for(result)
                    if refused is None:
                        await receiver.gateway.record(result)
                    elif refused:
                        payload = {"response_type": "ephemeral", "text": refused}
        except (BadRequest, BadEvent, TurnRejected) as exc:
            log.warning("socket mode request ignored: %s", exc)
        await client.send_socket_mode_response(
            SocketModeResponse(envelope_id=req.envelope_id, payload=payload)
        )

    client.socket_mode_request_listeners.append(on_request)  # type: ignore[arg-type]
    try:
        await client.connect()
        log.info("slack socket mode connected")
        await asyncio.Event().wait()
    finally:
        await client.close()
