"""WhatsApp end to end: signed webhooks over real HTTP into the real gateway app (uvicorn),
recorded in state.db, drained by a real Celery worker on real Redis, and the replies sent by
the real sender to a fake Graph API on 127.0.0.1 — quoting the user's message, split at
4,096, once each; media fetched by id; /title and /new; the 24-hour window reported once."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from celery.contrib.testing.worker import start_worker
from sqlalchemy import text

from producers.broker import BrokerWaker, broker_client
from producers.gateway.app import create_app
from producers.gateway.deps import Gateway
from producers.whatsapp.receiver import sign
from shared.db import Store, open_store
from shared.settings import load_settings
from tests.fakes.golden import load
from tests.fakes.graph_api import FakeGraph
from tests.fakes.openai_server import running
from tests.fakes.server import Served
from tests.fakes.stack import redis_db_url, wait_for
from tests.integration.test_agent_media import PNG
from workers.app import create_app as create_celery_app

TOKEN = "EAAGwhatsappE2ETokenSecretPart"
APP_SECRET = "whatsapp-e2e-app-secret"
VERIFY = "whatsapp-e2e-verify"
PHONE = "106540352242922"
USER = "16505551234"
GROUP = "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD"
REDIS_DB = 12
OFFLINE = "[offline model] I am the offline model (no model endpoint is configured), "


@dataclass
class Stack:
    base: str
    graph: FakeGraph
    store: Store

    def post(self, payload: dict[str, Any]) -> httpx.Response:
        body = json.dumps(payload).encode()
        headers = {
            "Content-Type": "application/json",
            "X-Hub-Signature-256": sign(APP_SECRET, body),
        }
        return httpx.post(
            f"{self.base}/whatsapp/webhook", content=body, headers=headers, timeout=10
        )

    def settled(self) -> bool:
        """Every recorded turn finished and every reply sent or failed."""
        with self.store.read() as conn:
            open_turns = conn.execute(
                text("SELECT count(*) FROM inbox WHERE status IN ('waiting', 'running')")
            ).scalar_one()
            pending = conn.execute(
                text("SELECT count(*) FROM outbox WHERE status = 'pending'")
            ).scalar_one()
        return open_turns == 0 and pending == 0

    def scalar(self, sql: str) -> Any:
        with self.store.read() as conn:
            return conn.execute(text(sql)).scalar_one()


@contextmanager
def whatsapp_stack(
    env: dict[str, str], redis_url: str, graph: FakeGraph, **extra: str
) -> Iterator[Stack]:
    settings = load_settings(
        {
            **env,
            "HERMES_BROKER_URL": redis_db_url(redis_url, REDIS_DB),
            "HERMES_PLATFORMS__WHATSAPP__TOKEN": TOKEN,
            "HERMES_PLATFORMS__WHATSAPP__APP_SECRET": APP_SECRET,
            "HERMES_PLATFORMS__WHATSAPP__VERIFY_TOKEN": VERIFY,
            "HERMES_PLATFORMS__WHATSAPP__PHONE_NUMBER_ID": PHONE,
            "HERMES_PLATFORMS__WHATSAPP__API_BASE": graph.api_base,
            **extra,
        }
    )
    store = open_store(settings.resolved_database_url)
    celery = create_celery_app(settings)
    producer = broker_client(settings)
    gateway = Gateway(settings, store, BrokerWaker(producer), time.time)
    try:
        with (
            start_worker(celery, pool="threads", concurrency=4, perform_ping_check=False),
            Served(create_app(gateway)) as base,
        ):
            yield Stack(base, graph, store)
    finally:
        celery.hermes_runtimes.close()
        producer.close()
        store.close()


@pytest.fixture
def graph() -> Iterator[FakeGraph]:
    with FakeGraph(TOKEN, PHONE) as fake:
        yield fake


def message(text_: str, wamid: str) -> dict[str, Any]:
    payload, _ = load("whatsapp", "text")
    found = copy.deepcopy(dict(payload))
    sent = found["entry"][0]["changes"][0]["value"]["messages"][0]
    sent["text"]["body"], sent["id"] = text_, wamid
    return found


def fixture(name: str) -> dict[str, Any]:
    payload, _ = load("whatsapp", name)
    return copy.deepcopy(dict(payload))


@pytest.mark.timeout(180)
def test_a_dm_and_a_group_turn_are_answered_once_quoting_them_and_statuses_store_nothing(
    hermes_env: dict[str, str], redis_url: str, graph: FakeGraph
) -> None:
    with whatsapp_stack(hermes_env, redis_url, graph) as stack:
        health = httpx.get(f"{stack.base}/healthz", timeout=10).json()
        assert health["receivers"] == ["whatsapp"]
        handshake = {"hub.mode": "subscribe", "hub.verify_token": VERIFY, "hub.challenge": "8311"}
        good = httpx.get(f"{stack.base}/whatsapp/webhook", params=handshake, timeout=10)
        assert (good.status_code, good.text) == (200, "8311")
        bad = {**handshake, "hub.verify_token": "guess"}
        assert (
            httpx.get(f"{stack.base}/whatsapp/webhook", params=bad, timeout=10).status_code == 403
        )
        first = fixture("text")
        wamid = first["entry"][0]["changes"][0]["value"]["messages"][0]["id"]
        assert stack.post(first).status_code == 200
        assert stack.post(fixture("repeated_text")).status_code == 200  # Meta's redelivery
        assert stack.post(fixture("status_delivered")).status_code == 200
        assert stack.post(fixture("status_failed_window")).status_code == 200
        assert stack.post(fixture("group_text")).status_code == 200
        wait_for(lambda: graph.sent(USER) and graph.sent(GROUP), timeout=60)
        wait_for(stack.settled, timeout=60)
        assert stack.scalar("SELECT count(*) FROM inbox") == 2
        keys = stack.scalar("SELECT group_concat(session_key, ' ') FROM routes").split()
    assert sorted(keys) == [
        f"agent:main:whatsapp:dm:{USER}",
        f"agent:main:whatsapp:group:{GROUP}:{USER}",
    ]
    (in_group,) = graph.sent(GROUP)
    assert in_group["recipient_type"] == "group"
    assert in_group["text"]["body"].endswith("echo: What do you all think about this?")
    group_wamid = fixture("group_text")["entry"][0]["changes"][0]["value"]["messages"][0]["id"]
    assert in_group["context"] == {"message_id": group_wamid}
    (reply,) = graph.sent(USER)
    assert reply["text"]["body"] == OFFLINE + "so I can only echo: Does it come in another color?"
    assert reply["context"] == {"message_id": wamid}
    assert reply["to"] == USER and reply["recipient_type"] == "individual"


@pytest.mark.timeout(180)
def test_an_image_turn_title_and_new(
    hermes_env: dict[str, str], redis_url: str, graph: FakeGraph
) -> None:
    graph.media["1003383421387256"] = (PNG, "image/png")
    with whatsapp_stack(hermes_env, redis_url, graph) as stack:
        assert stack.post(fixture("image")).status_code == 200
        wait_for(lambda: len(graph.sent(USER)) == 1, timeout=60)
        assert stack.post(message("/title Colour questions", "wamid.E2E.title")).status_code == 200
        wait_for(lambda: len(graph.sent(USER)) == 2, timeout=60)
        first_session = stack.scalar("SELECT id FROM sessions")
        assert stack.post(message("/new", "wamid.E2E.new")).status_code == 200
        wait_for(lambda: len(graph.sent(USER)) == 3, timeout=60)
        assert stack.post(message("a fresh start", "wamid.E2E.fresh")).status_code == 200
        wait_for(lambda: len(graph.sent(USER)) == 4, timeout=60)
        wait_for(stack.settled, timeout=60)
        sessions = stack.scalar("SELECT count(*) FROM sessions")
        title = stack.scalar(f"SELECT title FROM sessions WHERE id = '{first_session}'")
        newest = stack.scalar("SELECT id FROM sessions ORDER BY started_at DESC, id DESC LIMIT 1")
    image, titled, new, fresh = graph.texts(USER)
    assert image.startswith(OFFLINE + "so I can only echo: Is this the one?")
    assert "Your attachments are noted" in image and "could not be read" not in image
    assert graph.downloads == ["1003383421387256"]  # looked up by id, downloaded once
    assert titled == "Title set to 'Colour questions'."
    assert title == "Colour questions"
    assert new == "Started a new session."
    assert fresh.endswith("echo: a fresh start")
    assert sessions == 2 and newest != first_session


@pytest.mark.timeout(180)
def test_outside_the_24_hour_window_the_reply_fails_once_and_is_reported(
    hermes_env: dict[str, str], redis_url: str, graph: FakeGraph
) -> None:
    graph.window_closed.add(USER)
    with whatsapp_stack(hermes_env, redis_url, graph) as stack:
        assert stack.post(fixture("text")).status_code == 200
        wait_for(stack.settled, timeout=60)
        failed = stack.scalar("SELECT count(*) FROM outbox WHERE status = 'failed'")
        error = stack.scalar("SELECT error FROM outbox")
        turn = stack.scalar("SELECT status FROM inbox")
    assert failed == 1 and graph.attempts(USER) == 1 and graph.sent() == []
    assert "131047" in error and "24-hour customer-service window" in error
    assert turn == "done"  # the turn ran; only its delivery failed, and said so


@pytest.mark.timeout(180)
def test_a_long_model_reply_is_split_at_4096(
    hermes_env: dict[str, str], redis_url: str, graph: FakeGraph
) -> None:
    long = " ".join(f"sentence {n} of a long answer." for n in range(600))  # ~17,000 chars
    with (
        running() as model,  # the fake endpoint echoes the user's text back: a long reply
        whatsapp_stack(
            hermes_env,
            redis_url,
            graph,
            HERMES_MODEL__BASE_URL=model.url,
            HERMES_MODEL__API_KEY="sk-test-not-secret",
            HERMES_MODEL__NAME="fake-main",
            HERMES_AUXILIARY__NAME="fake-aux",
        ) as stack,
    ):
        assert stack.post(message(long, "wamid.E2E.long")).status_code == 200
        wait_for(lambda: graph.sent(USER), timeout=60)
        wait_for(stack.settled, timeout=60)
    parts = graph.sent(USER)
    assert len(parts) >= 5
    assert all(len(p["text"]["body"]) <= 4096 for p in parts)
    words = " ".join(p["text"]["body"] for p in parts).split()
    assert words[-len(long.split()) :] == long.split()  # the fake's echo, whole and in order
    assert parts[0]["context"] == {"message_id": "wamid.E2E.long"}
    assert all("context" not in p for p in parts[1:])


@pytest.mark.timeout(180)
def test_a_stranger_is_refused_over_real_http_and_nothing_runs(
    hermes_env: dict[str, str], redis_url: str, graph: FakeGraph
) -> None:
    with whatsapp_stack(
        hermes_env, redis_url, graph, HERMES_PLATFORMS__WHATSAPP__ALLOWED_USERS="447700900123"
    ) as stack:
        assert stack.post(fixture("text")).status_code == 200
        wait_for(lambda: graph.sent(USER), timeout=30)
        counts = [stack.scalar(f"SELECT count(*) FROM {t}") for t in ("inbox", "sessions")]
    assert graph.texts(USER) == ["Sorry, this assistant is private."]
    assert counts == [0, 0]


@pytest.mark.timeout(180)
def test_media_that_cannot_be_fetched_is_said_so_and_the_turn_is_still_answered(
    hermes_env: dict[str, str], redis_url: str, graph: FakeGraph
) -> None:
    with whatsapp_stack(hermes_env, redis_url, graph) as stack:  # the media id is unknown
        assert stack.post(fixture("document")).status_code == 200
        wait_for(lambda: graph.sent(USER), timeout=60)
        wait_for(stack.settled, timeout=60)
        turn = stack.scalar("SELECT status FROM inbox")
    (answer,) = graph.texts(USER)
    assert turn == "done"
    assert "order-4711.pdf — could not be read: the media lookup answered 400" in answer
