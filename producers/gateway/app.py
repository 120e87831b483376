"""The receivers' one ASGI app: `POST /telegram/webhook`, `POST /slack/events`, `GET /healthz`,
`GET /metrics` (Prometheus; producers/gateway/metrics.py).

A platform's route is mounted when it is configured (Telegram: token; Slack: signing
secret); an unconfigured one is a 404. Any error that is not the caller's fault (the database
busy past its timeout, the disk full) is a 503 — the platform redelivers later — and bad input
is a 4xx, so nothing here answers 500. Every `hermes gateway <platform>` process serves this
same app on `gateway.host:gateway.port` (a stack's receivers share the port), so whichever
process the kernel hands a request to can record it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from producers.gateway.context import Gateway
from producers.gateway.port import stack_id
from producers.slack.receiver import SlackReceiver
from producers.telegram.receiver import TelegramReceiver

log = logging.getLogger(__name__)

Endpoint = Callable[[Request], Awaitable[Response]]


def telegram_receiver(gateway: Gateway) -> TelegramReceiver | None:
    conf = gateway.settings.platforms.telegram
    if not conf.enabled or conf.token is None:
        return None
    secret = conf.webhook_secret.get_secret_value() if conf.webhook_secret else None
    return TelegramReceiver(gateway, token=conf.token.get_secret_value(), secret=secret)


def slack_receiver(gateway: Gateway) -> SlackReceiver | None:
    conf = gateway.settings.platforms.slack
    if not conf.enabled or (conf.signing_secret is None and not conf.socket_mode):
        return None
    return SlackReceiver(
        gateway,
        signing_secret=conf.signing_secret.get_secret_value() if conf.signing_secret else None,
        token=conf.token.get_secret_value() if conf.token else None,
        api_base=conf.api_base or "https://slack.com/api/",
    )


def create_app(
    gateway: Gateway,
    *,
    telegram: TelegramReceiver | None = None,
    slack: SlackReceiver | None = None,
) -> Starlette:
    """The gateway app; receivers default to those the settings configure."""
    telegram = telegram or telegram_receiver(gateway)
    slack = slack or slack_receiver(gateway)
    mounted = [name for name, on in (("telegram", telegram), ("slack", slack)) if on]
    stack = stack_id(gateway.settings)  # whose receiver this is (port.py compares it)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True, "receivers": mounted, "stack": stack})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await gateway.settled()  # the wake-ups of acked turns go out before we stop

    routes = [Route("/healthz", healthz, methods=["GET"])]
    if gateway.metrics is not None:
        endpoint = gateway.metrics.endpoint(gateway.store, gateway.clock)
        routes.append(Route("/metrics", endpoint, methods=["GET"]))
    if telegram is not None:
        routes.append(Route("/telegram/webhook", guarded(telegram.webhook), methods=["POST"]))
    if slack is not None:
        routes.append(Route("/slack/events", guarded(slack.events), methods=["POST"]))
    return Starlette(routes=routes, lifespan=lifespan)


def guarded(endpoint: Endpoint) -> Endpoint:
    """Answer 503 (the platform redelivers) for anything that is not the caller's fault."""

    async def handle(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as exc:
            log.error(
                "%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc
            )
            return JSONResponse({"ok": False, "error": "try again later"}, status_code=503)

    return handle
