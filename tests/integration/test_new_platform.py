"""A platform is a plug-in. "EchoChat", defined in this file and nowhere else, registers at run
time and then goes through the real thing end to end: its GET verification route and its
webhook on the real gateway app over real HTTP, the turn recorded in state.db, a real Celery
worker (real Redis broker) draining it with the offline model, and the reply split to its
message limit and sent by its sender to a fake EchoChat API on 127.0.0.1.

Every list of platforms must pick it up from the registry alone: the settings keys, the CLI's
choices, redaction, configured platforms, the gateway's routes and /healthz, the sender
registry and the session id width.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import click
import httpx
import pytest
from celery.contrib.testing.worker import start_worker
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route as StarletteRoute

from producers.broker import BrokerWaker, broker_client
from producers.cli.gateway import gateway as gateway_command
from producers.gateway.app import create_app
from producers.gateway.deps import Gateway
from producers.gateway.plugin import ReceiverPlugin
from shared.db import Store, open_store
from shared.pipeline.outbox import OutboxRow
from shared.platforms import DM, gateway_platforms, registry
from shared.platforms.descriptor import Platform, Route
from shared.redact import secrets_of
from shared.sdks import configured_platforms
from shared.settings import PlatformSettings, Settings, SettingsError, load_settings
from shared.store import session_listing
from shared.turns import InboundTurn
from tests.fakes.server import Served
from tests.fakes.stack import redis_db_url, wait_for
from workers.app import create_app as create_celery_app
from workers.delivery.base import SenderDeps, Sent
from workers.delivery.split import split_for

ECHO = "echochat"
TOKEN = "echo-bot-token-0123456789"
VERIFY = "echo-verify-token-42"
REDIS_DB = 11


# --- the platform: settings, receiver, sender, descriptor ---


class EchoSettings(PlatformSettings):
    blank_is_unset: ClassVar[frozenset[str]] = PlatformSettings.blank_is_unset | {"verify_token"}

    verify_token: str | None = None


class EchoReceiver:
    def __init__(self, gateway: Gateway, conf: EchoSettings) -> None:
        self.gateway = gateway
        self.verify_token = conf.verify_token

    async def verify(self, request: Request) -> Response:
        """GET: the platform proves the URL is ours by asking us to echo its challenge."""
        if request.query_params.get("token") != self.verify_token:
            return PlainTextResponse("wrong token", status_code=403)
        return PlainTextResponse(request.query_params.get("challenge", ""))

    async def webhook(self, request: Request) -> Response:
        body = json.loads(await request.body())
        turn = InboundTurn(
            platform=ECHO,
            chat_id=str(body["chat"]),
            chat_type=DM,
            event_id=str(body["id"]),
            text=str(body["text"]),
            user_id=str(body["user"]),
            message_id=str(body["id"]),
        )
        accepted = await self.gateway.record(turn)
        return JSONResponse({"ok": True, "duplicate": accepted.duplicate})


class EchoPlugin(ReceiverPlugin):
    def build(self, gateway: Gateway, conf: EchoSettings) -> EchoReceiver | None:
        return EchoReceiver(gateway, conf) if conf.configured else None


PLUGIN = EchoPlugin()


class EchoSender:
    platform = ECHO
    reads_store = False

    def __init__(self, conf: EchoSettings) -> None:
        assert conf.token is not None and conf.api_base is not None
        self._client = httpx.Client(
            base_url=conf.api_base,
            headers={"Authorization": f"Bearer {conf.token.get_secret_value()}"},
            timeout=10,
        )

    def send(self, row: OutboxRow) -> Sent:
        ids = []
        for part in split_for(DESCRIPTOR, row.text):
            answer = self._client.post("/send", json={"chat": row.chat_id, "text": part})
            answer.raise_for_status()
            ids.append(answer.json()["id"])
        return Sent(platform_message_id=ids[-1] if ids else None)

    def close(self) -> None:
        self._client.close()


def build_sender(conf: EchoSettings, deps: SenderDeps) -> EchoSender:
    return EchoSender(conf)


DESCRIPTOR = Platform(
    name=ECHO,
    title="EchoChat",
    order=99,
    settings=EchoSettings,
    receiver=f"{__name__}:PLUGIN",
    sender=f"{__name__}:build_sender",
    routes=(
        Route("/echochat/webhook", "verify", ("GET",)),
        Route("/echochat/webhook", "webhook"),
    ),
    message_limit=40,
    secrets=("token", "verify_token"),
)


# --- its API, faked on 127.0.0.1 ---


class FakeEcho:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.authorization: set[str] = set()
        self._lock = threading.Lock()

    async def send(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.messages.append(body)
            self.authorization.add(request.headers.get("authorization", ""))
            number = len(self.messages)
        return JSONResponse({"id": f"m{number}"})

    def app(self) -> Starlette:
        return Starlette(routes=[StarletteRoute("/send", self.send, methods=["POST"])])

    def text_to(self, chat: str) -> str:
        with self._lock:
            return " ".join(m["text"] for m in self.messages if m["chat"] == chat)


@pytest.fixture
def echo_platform() -> Iterator[Platform]:
    registry.register(DESCRIPTOR)
    try:
        yield DESCRIPTOR
    finally:
        registry.unregister(ECHO)


@pytest.fixture
def fake_echo() -> Iterator[tuple[FakeEcho, str]]:
    fake = FakeEcho()
    with Served(fake.app()) as base:
        yield fake, base


@pytest.fixture
def echo_settings(
    echo_platform: Platform,
    fake_echo: tuple[FakeEcho, str],
    hermes_env: dict[str, str],
    redis_url: str,
) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url, REDIS_DB),
            "HERMES_PLATFORMS__ECHOCHAT__TOKEN": TOKEN,
            "HERMES_PLATFORMS__ECHOCHAT__API_BASE": fake_echo[1],
            "HERMES_PLATFORMS__ECHOCHAT__VERIFY_TOKEN": VERIFY,
        }
    )


@pytest.fixture
def echo_store(echo_settings: Settings) -> Iterator[Store]:
    store = open_store(echo_settings.resolved_database_url)
    yield store
    store.close()


def test_every_list_of_platforms_includes_the_registered_one(echo_settings: Settings) -> None:
    conf = echo_settings.platforms.of(ECHO, EchoSettings)
    assert conf.verify_token == VERIFY
    assert ECHO in gateway_platforms()
    assert ECHO in configured_platforms(echo_settings)
    assert {TOKEN, VERIFY} <= set(secrets_of(echo_settings))
    choice = next(p for p in gateway_command.params if p.name == "platform")
    assert isinstance(choice.type, click.Choice) and ECHO in choice.type.choices


def test_an_unregistered_platform_is_an_unknown_setting(hermes_env: dict[str, str]) -> None:
    with pytest.raises(SettingsError, match=r"platforms\.echochat"):
        load_settings({**hermes_env, "HERMES_PLATFORMS__ECHOCHAT__TOKEN": TOKEN})


@pytest.mark.timeout(120)
def test_a_platform_defined_here_gets_its_webhook_answered_through_the_real_pipeline(
    echo_settings: Settings, echo_store: Store, fake_echo: tuple[FakeEcho, str]
) -> None:
    fake, _ = fake_echo
    celery = create_celery_app(echo_settings)
    producer = broker_client(echo_settings)
    gateway = Gateway(echo_settings, echo_store, BrokerWaker(producer), time.time)
    try:
        with (
            start_worker(celery, pool="threads", concurrency=4, perform_ping_check=False),
            Served(create_app(gateway)) as base,
        ):
            health = httpx.get(f"{base}/healthz", timeout=10).json()
            assert health["receivers"] == [ECHO]
            challenge = httpx.get(
                f"{base}/echochat/webhook",
                params={"token": VERIFY, "challenge": "c-123"},
                timeout=10,
            )
            assert challenge.status_code == 200 and challenge.text == "c-123"
            refused = httpx.get(f"{base}/echochat/webhook", params={"token": "no"}, timeout=10)
            assert refused.status_code == 403
            message = {"id": 1, "chat": "room-7", "user": "u-7", "text": "hello from echochat"}
            for _ in range(2):  # the second is a redelivery: recorded once
                answer = httpx.post(f"{base}/echochat/webhook", json=message, timeout=10)
                assert answer.status_code == 200
            assert answer.json() == {"ok": True, "duplicate": True}
            wait_for(lambda: "hello from echochat" in fake.text_to("room-7"), timeout=60)
    finally:
        celery.hermes_runtimes.close()
        producer.close()
    assert "so I can only echo: hello from echochat" in fake.text_to("room-7")
    assert all(len(m["text"]) <= DESCRIPTOR.message_limit for m in fake.messages)
    assert len(fake.messages) > 1  # the reply was split to the platform's limit
    assert fake.authorization == {f"Bearer {TOKEN}"}
    with echo_store.read() as conn:
        (found,), _ = session_listing.list_sessions(conn, source=ECHO)
    assert len(found.record.id.rsplit("_", 1)[1]) == 8  # a gateway session's id
