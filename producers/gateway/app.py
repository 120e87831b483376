"""The receivers' one ASGI app: every registered platform's routes (`POST /telegram/webhook`,
`POST /slack/events`, …), `GET /healthz`, `GET /metrics` (Prometheus; producers/gateway/metrics.py).

A platform's routes (its descriptor's, shared/platforms/) are mounted when its receiver plug-in
builds a receiver from the configuration (Telegram: token; Slack: signing secret); an
unconfigured one is a 404. Any error that is not the caller's fault (the database
busy past its timeout, the disk full) is a 503 — the platform redelivers later — and bad input
is a 4xx, so nothing here answers 500. Every `hermes gateway <platform>` process serves this
same app on `gateway.host:gateway.port` (a stack's receivers share the port), so whichever
process the kernel hands a request to can record it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from producers.gateway.deps import Gateway
from producers.gateway.plugin import conf_of, receiver_plugin
from producers.gateway.port import stack_id
from shared.platforms import registry

log = logging.getLogger(__name__)

Endpoint = Callable[[Request], Awaitable[Response]]


def platform_routes(gateway: Gateway, given: Mapping[str, Any]) -> dict[str, list[Route]]:
    """Each registered platform's routes, for those whose receiver is configured."""
    mounted: dict[str, list[Route]] = {}
    for name, platform in registry.platforms().items():
        if not platform.routes:
            continue
        receiver = given.get(name)
        if receiver is None:
            receiver = receiver_plugin(platform).build(gateway, conf_of(gateway.settings, platform))
        if receiver is None:
            continue
        mounted[name] = [
            Route(
                route.path, guarded(getattr(receiver, route.handler)), methods=list(route.methods)
            )
            for route in platform.routes
        ]
    return mounted


def create_app(gateway: Gateway, receivers: Mapping[str, Any] | None = None) -> Starlette:
    """The gateway app; receivers (by platform) default to those the settings configure."""
    by_platform = platform_routes(gateway, receivers or {})
    mounted = list(by_platform)
    stack = stack_id(gateway.settings)  # whose receiver this is (port.py compares it)

    async def healthz(request: Request) -> Response:
        # pid: which of the receivers sharing a port (SO_REUSEPORT) answered
        return JSONResponse({"ok": True, "receivers": mounted, "stack": stack, "pid": os.getpid()})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await gateway.settled()  # the wake-ups of acked turns go out before we stop

    routes = [Route("/healthz", healthz, methods=["GET"])]
    if gateway.metrics is not None:
        endpoint = gateway.metrics.endpoint(gateway.store, gateway.clock)
        routes.append(Route("/metrics", endpoint, methods=["GET"]))
    for mounted_routes in by_platform.values():
        routes.extend(mounted_routes)
    direct = [route for mounted_routes in by_platform.values() for route in mounted_routes]
    return GatewayApp(routes=routes, direct=direct, lifespan=lifespan)


class GatewayApp(Starlette):
    """Starlette, with the platforms' routes dispatched straight to their endpoints.

    A webhook request went through Starlette's middleware stack (server errors, exceptions),
    its router (each route's path and method tried in turn) and `request_response`'s own
    exception wrapper before reaching its endpoint: about a tenth of a receiver's CPU per
    request in py-spy, more than the endpoint's checks. None of it does anything for these
    routes: their endpoints are `guarded` (every Exception is a 503) and raise no
    HTTPException, and no exception handler or middleware is registered. So a request whose
    method and path are exactly one of theirs is handed to the endpoint with the same scope
    keys the router would set and the same Request; anything else (other paths, other
    methods: 404, 405, slash redirects, /healthz, /metrics, lifespan) goes through Starlette
    as before. An error that escapes anyway reaches uvicorn, which answers 500 and logs it,
    as Starlette's ServerErrorMiddleware would have."""

    def __init__(self, *, routes: list[Route], direct: list[Route], lifespan: Any) -> None:
        """`direct`: the routes (among `routes`) whose endpoints are `guarded`."""
        super().__init__(routes=routes, lifespan=lifespan)
        self._direct: dict[tuple[str, str], Endpoint] = {
            (method, route.path): route.endpoint
            for route in direct
            for method in route.methods or ()
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Behind a proxy's root_path the router's own path matching applies (Starlette's).
        if scope["type"] == "http" and not scope.get("root_path"):
            endpoint = self._direct.get((scope["method"], scope["path"]))
            if endpoint is not None:
                scope["app"] = self
                scope["router"] = self.router
                scope["endpoint"] = endpoint
                scope["path_params"] = {}
                response = await endpoint(Request(scope, receive, send))
                await response(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


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
