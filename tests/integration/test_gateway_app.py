"""The gateway app hands a platform's webhook straight to its endpoint (GatewayApp): the endpoint
sees the request Starlette's router would have given it, and every other request (other
methods and paths, a slash added, /healthz) is answered by Starlette as before."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.testclient import TestClient

from producers.gateway.app import create_app
from producers.gateway.deps import Gateway
from shared.db import Store
from shared.ports import RecordingWaker
from shared.settings import Settings


class Seeing:
    """A Telegram receiver that answers with what its request looked like."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    async def webhook(self, request: Request) -> Response:
        self.requests.append(request)
        body = await request.body()
        if body == b"fail":
            raise RuntimeError("the store is gone")
        return JSONResponse(
            {
                "method": request.method,
                "path": request.url.path,
                "query": request.url.query,
                "body": body.decode(),
                "path_params": request.path_params,
                "header": request.headers.get("x-test"),
            }
        )


def test_a_webhook_reaches_its_endpoint_as_through_the_router(
    settings: Settings, store: Store
) -> None:
    seeing = Seeing()
    app = create_app(Gateway(settings, store, RecordingWaker(), time.time), {"telegram": seeing})
    with TestClient(app) as client:
        answer = client.post("/telegram/webhook?a=1", content=b"hi", headers={"X-Test": "yes"})
        assert answer.status_code == 200
        assert answer.json() == {
            "method": "POST",
            "path": "/telegram/webhook",
            "query": "a=1",
            "body": "hi",
            "path_params": {},
            "header": "yes",
        }
        request = seeing.requests[-1]
        route = next(r for r in app.routes if getattr(r, "path", "") == "/telegram/webhook")
        scope: dict[str, Any] = request.scope
        assert request.app is app and scope["router"] is app.router
        assert scope["endpoint"] is getattr(route, "endpoint", None)
        # an error the endpoint raises is still the guarded 503
        failed = client.post("/telegram/webhook", content=b"fail")
        assert (failed.status_code, failed.json()) == (
            503,
            {"ok": False, "error": "try again later"},
        )
        # what is not exactly a webhook's method and path is Starlette's, as before
        wrong = client.get("/telegram/webhook")
        assert (wrong.status_code, wrong.headers["allow"]) == (405, "POST")
        slash = client.post("/telegram/webhook/", content=b"hi", follow_redirects=False)
        assert (slash.status_code, slash.headers["location"]) == (
            307,
            "http://testserver/telegram/webhook",
        )
        assert client.post("/slack/events", content=b"{}").status_code == 404
        assert client.get("/healthz").json()["receivers"] == ["telegram"]
    assert len(seeing.requests) == 2


def test_behind_a_proxy_root_path_a_webhook_is_routed_by_starlette(
    settings: Settings, store: Store
) -> None:
    """With a root_path (a proxy mounting the gateway under a prefix) the direct dispatch steps
    aside and Starlette's router, which strips the prefix, finds the same endpoint."""
    seeing = Seeing()
    app = create_app(Gateway(settings, store, RecordingWaker(), time.time), {"telegram": seeing})
    with TestClient(app, root_path="/hooks") as client:
        answer = client.post("/hooks/telegram/webhook", content=b"hi")
        assert answer.status_code == 200
        assert answer.json()["body"] == "hi"
        assert len(seeing.requests) == 1
        assert client.post("/hooks/slack/events", content=b"{}").status_code == 404
