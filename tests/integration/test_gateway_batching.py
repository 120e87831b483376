"""Receivers record turns in batches and send their wake-ups in batches (gateway/recorder.py):
every ack still follows its commit, every session is woken, and a broker that is down loses
no acked turn (the claim is let go; redrive finds the turn)."""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import select
from starlette.testclient import TestClient

from producers.broker import BrokerWaker, broker_client
from producers.gateway.app import create_app
from producers.gateway.deps import Gateway
from producers.gateway.pausing_waker import PausingWaker
from shared.db import Store, open_store
from shared.db.schema import routes
from shared.settings import Settings, load_settings
from shared.tasknames import DRAIN, TURNS_QUEUE, WAKE
from tests.fakes.golden import load
from tests.fakes.server import free_port
from tests.fakes.stack import redis_db_url, start_gateway, start_worker, wait_for
from tests.fakes.telegram_api import FakeTelegram
from tests.pipeline_helpers import make_runtime
from workers.redrive import redrive

TOKEN = "123456789:AAFakeTokenForBatchTests"
SECRET = "batch-webhook-secret"
HEADERS = {"X-Telegram-Bot-Api-Secret-Token": SECRET, "Content-Type": "application/json"}
OFFLINE_ECHO = "so I can only echo: "


def _update(number: int, chat: int, text: str) -> dict[str, Any]:
    payload, _ = load("telegram", "private")
    update = json.loads(json.dumps(payload))
    update["update_id"] = number
    update["message"]["message_id"] = number
    update["message"]["chat"]["id"] = update["message"]["from"]["id"] = chat
    update["message"]["text"] = text
    return dict(update)


def _tg_env(env: dict[str, str], **extra: str) -> dict[str, str]:
    return {
        **env,
        "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN,
        "HERMES_PLATFORMS__TELEGRAM__WEBHOOK_SECRET": SECRET,
        **extra,
    }


@pytest.fixture
def down_settings(hermes_env: dict[str, str]) -> Settings:
    return load_settings(_tg_env(hermes_env, HERMES_BROKER_URL="redis://127.0.0.1:1/0"))


@pytest.fixture
def down_store(down_settings: Settings) -> Iterator[Store]:
    store = open_store(down_settings.resolved_database_url)
    yield store
    store.close()


def _post_all(client: TestClient, updates: list[dict[str, Any]]) -> list[int]:
    """POST every update at once from its own thread (they queue together in the recorder)."""
    statuses: list[int] = [0] * len(updates)
    start = threading.Barrier(len(updates))

    def post(n: int) -> None:
        start.wait(10)
        statuses[n] = client.post("/telegram/webhook", json=updates[n], headers=HEADERS).status_code

    threads = [threading.Thread(target=post, args=(n,)) for n in range(len(updates))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return statuses


def test_with_the_broker_down_every_acked_turn_is_kept_and_redrive_finds_it(
    down_settings: Settings, down_store: Store
) -> None:
    waker = PausingWaker(BrokerWaker(broker_client(down_settings)))
    gateway = Gateway(down_settings, down_store, waker, time.time)
    updates = [_update(900 + n, 5000 + n % 4, f"turn {n}") for n in range(12)]
    with TestClient(create_app(gateway)) as client:
        statuses = _post_all(client, updates)
    assert statuses == [200] * 12
    keys = {f"agent:main:telegram:dm:{5000 + n}" for n in range(4)}
    with down_store.read() as conn:
        marks = dict(conn.execute(select(routes.c.session_key, routes.c.wake_sent_at)).all())
    assert set(marks) == keys
    assert set(marks.values()) == {None}  # the unsent wake-ups' claims were let go
    rt, recording = make_runtime(down_settings, down_store)
    assert redrive(rt).drains == 4
    assert {key for key, _ in recording.drains} == keys


def _published(url: str, keys: list[str]) -> tuple[list[dict[str, Any]], list[Any]]:
    """drain_many(keys) on the broker at `url`: the messages it queued and its sent events."""
    app = broker_client(load_settings({"HERMES_BROKER_URL": url}))
    client = redis.Redis.from_url(url)
    events = client.pubsub()
    try:
        events.psubscribe("*task.sent*")
        assert BrokerWaker(app).drain_many(keys) == set(keys)
        queued = [json.loads(raw) for raw in client.lrange(TURNS_QUEUE, 0, -1)]
        sent = [m for m in iter(lambda: events.get_message(timeout=1.0), None) if m["data"] != 1]
    finally:
        events.close()
        client.delete(TURNS_QUEUE)
        client.close()
        app.close()
    return queued, [m for m in sent if m["type"] == "pmessage"]


def test_a_batch_of_wake_ups_is_one_message_for_the_workers_to_fan_out(
    hermes_env: dict[str, str], redis_url: str
) -> None:
    """Several keys cost the receiver one task (hermes.turns.wake, naming them all, with its
    task-sent event for Flower); one key is its own drain task, with no extra hop."""
    url = redis_db_url(redis_url)
    keys = [f"agent:main:telegram:dm:{n}" for n in range(5)]
    queued, sent = _published(url, [*keys, keys[0]])  # a key twice is woken once
    assert [m["headers"]["task"] for m in queued] == [WAKE]
    assert json.loads(base64.b64decode(queued[0]["body"]))[0] == [keys]
    assert len(sent) == 1
    queued, sent = _published(url, keys[:1])
    assert [m["headers"]["task"] for m in queued] == [DRAIN]
    assert queued[0]["headers"]["argsrepr"] == repr([keys[0]])
    assert len(sent) == 1


@pytest.mark.timeout(180)
def test_a_worker_fans_a_batch_wake_up_out_to_every_session(
    hermes_env: dict[str, str], hermes_home: Path, redis_url: str
) -> None:
    """Turns recorded while the broker was down (their claims let go), then one batch wake-up
    for their four sessions: a real worker sends a drain for each, and every chat is answered."""
    with FakeTelegram(TOKEN) as telegram:
        env = _tg_env(hermes_env, HERMES_PLATFORMS__TELEGRAM__API_BASE=telegram.api_base)
        down = load_settings({**env, "HERMES_BROKER_URL": "redis://127.0.0.1:1/0"})
        store = open_store(down.resolved_database_url)
        try:
            gateway = Gateway(
                down, store, PausingWaker(BrokerWaker(broker_client(down))), time.time
            )
            with TestClient(create_app(gateway)) as client:
                statuses = _post_all(client, [_update(300 + n, 6100 + n, "hi") for n in range(4)])
        finally:
            store.close()
        assert statuses == [200] * 4
        env["HERMES_BROKER_URL"] = redis_db_url(redis_url)
        worker = start_worker(env, hermes_home)
        try:
            keys = [f"agent:main:telegram:dm:{6100 + n}" for n in range(4)]
            app = broker_client(load_settings(env))
            try:
                assert BrokerWaker(app).drain_many(keys) == set(keys)
            finally:
                app.close()
            chats = [str(6100 + n) for n in range(4)]
            wait_for(lambda: all(telegram.sent(c) for c in chats), timeout=60)
        finally:
            code = worker.stop()
    assert all(len(telegram.sent(c)) == 1 for c in chats)
    assert code == 0


def test_an_unreachable_broker_sends_none_of_a_batch(down_settings: Settings) -> None:
    app = broker_client(down_settings)
    try:
        assert BrokerWaker(app).drain_many(["a", "b"]) == set()
    finally:
        app.close()


@pytest.mark.timeout(180)
def test_a_burst_of_webhooks_is_acked_after_commit_and_every_session_answered_in_order(
    hermes_env: dict[str, str], hermes_home: Path, redis_url: str
) -> None:
    """Real processes: `hermes gateway telegram` and `hermes worker` on real Redis. Updates for
    six chats arrive at once (batched together); each 200 comes with its turn committed, and
    every chat gets a reply to each of its turns once, in the order they were recorded."""
    port = free_port()
    with FakeTelegram(TOKEN) as telegram:
        env = _tg_env(
            hermes_env,
            HERMES_BROKER_URL=redis_db_url(redis_url),
            HERMES_GATEWAY__PORT=str(port),
            HERMES_PLATFORMS__TELEGRAM__API_BASE=telegram.api_base,
        )  # no beat runs, so no redrive: every turn is woken by the gateway's wake-ups
        procs = [start_worker(env, hermes_home), start_gateway(env, hermes_home, "telegram", port)]
        try:
            updates = [_update(1000 + n, 7000 + n % 6, f"turn {n}") for n in range(36)]
            committed = _burst(port, updates, hermes_home / "state.db")
            chats = [str(7000 + c) for c in range(6)]
            wait_for(lambda: all(len(telegram.sent(c)) >= 6 for c in chats), timeout=90)
            time.sleep(1.0)  # nothing more arrives
            replies = {
                c: [p["text"].split(OFFLINE_ECHO)[1] for p in telegram.sent(c)] for c in chats
            }
        finally:
            codes = [proc.stop() for proc in reversed(procs)]
    assert committed == [True] * 36
    assert replies == {chat: _arrivals(hermes_home / "state.db", chat) for chat in chats}
    assert {chat: sorted(texts) for chat, texts in replies.items()} == {
        str(7000 + c): sorted(f"turn {n}" for n in range(c, 36, 6)) for c in range(6)
    }
    assert codes == [0, 0]


def _arrivals(db: Path, chat: str) -> list[str]:
    conn = sqlite3.connect(db, timeout=10)
    try:
        rows = conn.execute("SELECT text FROM inbox WHERE chat_id = ? ORDER BY seq", (chat,))
        return [str(row[0]) for row in rows]
    finally:
        conn.close()


def _burst(port: int, updates: list[dict[str, Any]], db: Path) -> list[bool]:
    """POST `updates` at once over HTTP; for each, whether its turn was committed (seen by
    another connection) the moment its 200 arrived."""
    committed = [False] * len(updates)
    start = threading.Barrier(len(updates))

    def post(n: int) -> None:
        start.wait(10)
        response = httpx.post(
            f"http://127.0.0.1:{port}/telegram/webhook",
            json=updates[n],
            headers=HEADERS,
            timeout=30,
        )
        if response.status_code == 200:
            committed[n] = _recorded(db, f"123456789:{updates[n]['update_id']}")

    threads = [threading.Thread(target=post, args=(n,)) for n in range(len(updates))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return committed


def _recorded(db: Path, event_id: str) -> bool:
    conn = sqlite3.connect(db, timeout=10)
    try:
        row = conn.execute("SELECT 1 FROM inbox WHERE event_id = ?", (event_id,)).fetchone()
        return row is not None
    finally:
        conn.close()
