"""Matrix end to end: the real receiver (matrix-nio syncing from a fake homeserver on
127.0.0.1), the real store, a real Celery worker on real Redis, and the replies sent by the
real sender with `room_send` — replying to the user's event, split at 16,000 characters,
once each; an mxc:// image downloaded through the media endpoint; /title and /new."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker
from sqlalchemy import text

from producers.broker import BrokerWaker, broker_client
from producers.gateway.deps import Gateway
from producers.matrix.receiver import MatrixReceiver
from shared.db import Store, open_store
from shared.settings import load_settings
from tests.fakes.background import Background
from tests.fakes.matrix_api import BOT, FakeMatrix
from tests.fakes.openai_server import running
from tests.fakes.stack import redis_db_url, wait_for
from tests.integration.test_agent_media import PNG
from workers.app import create_app as create_celery_app

pytestmark = pytest.mark.both_databases

TOKEN = "syt_matrix_e2e_token_secret"
DM_ROOM = "!dm:fake.test"
GROUP_ROOM = "!group:fake.test"
REDIS_DB = 13
OFFLINE = "[offline model] I am the offline model (no model endpoint is configured), "


@dataclass
class Stack:
    fake: FakeMatrix
    store: Store
    receiver: MatrixReceiver

    def settled(self) -> bool:
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
def matrix_stack(
    env: dict[str, str], redis_url: str, fake: FakeMatrix, **extra: str
) -> Iterator[Stack]:
    settings = load_settings(
        {
            **env,
            "HERMES_BROKER_URL": redis_db_url(redis_url, REDIS_DB),
            "HERMES_PLATFORMS__MATRIX__TOKEN": TOKEN,
            "HERMES_PLATFORMS__MATRIX__HOMESERVER": fake.base,
            "HERMES_PLATFORMS__MATRIX__USER_ID": BOT,
            **extra,
        }
    )
    store = open_store(settings.resolved_database_url)
    celery = create_celery_app(settings)
    producer = broker_client(settings)
    gateway = Gateway(settings, store, BrokerWaker(producer), time.time)
    receiver = MatrixReceiver(
        gateway, homeserver=fake.base, user_id=BOT, token=TOKEN, sync_timeout_ms=500
    )
    try:
        with (
            start_worker(celery, pool="threads", concurrency=4, perform_ping_check=False),
            Background(receiver.run),
        ):
            wait_for(lambda: receiver.batches >= 1, timeout=20)  # the first sync is behind us
            yield Stack(fake, store, receiver)
    finally:
        celery.hermes_runtimes.close()
        producer.close()
        store.close()


@pytest.fixture
def fake() -> Iterator[FakeMatrix]:
    with FakeMatrix(TOKEN) as server:
        server.room(DM_ROOM, 2)
        server.room(GROUP_ROOM, 4)
        yield server


@pytest.mark.timeout(180)
def test_a_dm_and_a_group_turn_are_answered_once_replying_to_them(
    hermes_env: dict[str, str], redis_url: str, fake: FakeMatrix
) -> None:
    with matrix_stack(hermes_env, redis_url, fake) as stack:
        dm = fake.message(DM_ROOM, "Does it come in another color?")
        fake.post(DM_ROOM, dm)  # the same event again: a no-op
        group = fake.message(GROUP_ROOM, f"{BOT} what do you all think?")
        wait_for(lambda: fake.texts(DM_ROOM) and fake.texts(GROUP_ROOM), timeout=60)
        wait_for(stack.settled, timeout=60)
        turns = stack.scalar("SELECT count(*) FROM inbox")
        with stack.store.read() as conn:
            keys = sorted(r[0] for r in conn.execute(text("SELECT session_key FROM routes")))
    assert turns == 2
    assert keys[0].startswith("agent:main:matrix:dm:") and "group" in keys[1]
    (reply,) = [s for s in fake.sent if s["room"] == DM_ROOM]
    assert reply["type"] == "m.room.message" and reply["content"]["msgtype"] == "m.text"
    assert (
        reply["content"]["body"] == OFFLINE + "so I can only echo: Does it come in another color?"
    )
    assert reply["content"]["m.relates_to"] == {"m.in_reply_to": {"event_id": dm["event_id"]}}
    (in_group,) = [s for s in fake.sent if s["room"] == GROUP_ROOM]
    assert in_group["content"]["body"].endswith("echo: what do you all think?")
    assert in_group["content"]["m.relates_to"]["m.in_reply_to"]["event_id"] == group["event_id"]


@pytest.mark.timeout(180)
def test_an_image_turn_title_and_new(
    hermes_env: dict[str, str], redis_url: str, fake: FakeMatrix
) -> None:
    fake.media["fake.test/cat"] = PNG
    with matrix_stack(hermes_env, redis_url, fake) as stack:
        fake.message(DM_ROOM, "cat.png", msgtype="m.image", url="mxc://fake.test/cat",
                     info={"mimetype": "image/png", "size": len(PNG)})  # fmt: skip
        wait_for(lambda: len(fake.texts(DM_ROOM)) == 1, timeout=60)
        fake.message(DM_ROOM, "/title Cat questions")
        wait_for(lambda: len(fake.texts(DM_ROOM)) == 2, timeout=60)
        first_session = stack.scalar("SELECT id FROM sessions")
        fake.message(DM_ROOM, "/new")
        wait_for(lambda: len(fake.texts(DM_ROOM)) == 3, timeout=60)
        fake.message(DM_ROOM, "a fresh start")
        wait_for(lambda: len(fake.texts(DM_ROOM)) == 4, timeout=60)
        wait_for(stack.settled, timeout=60)
        sessions = stack.scalar("SELECT count(*) FROM sessions")
        title = stack.scalar(f"SELECT title FROM sessions WHERE id = '{first_session}'")
    image, titled, new, fresh = fake.texts(DM_ROOM)
    assert "Your attachments are noted" in image and "could not be read" not in image
    assert titled == "Title set to 'Cat questions'."
    assert title == "Cat questions"
    assert new == "Started a new session."
    assert fresh.endswith("echo: a fresh start")
    assert sessions == 2


@pytest.mark.timeout(180)
def test_a_long_model_reply_is_split_at_16000(
    hermes_env: dict[str, str], redis_url: str, fake: FakeMatrix
) -> None:
    long = " ".join(f"sentence {n} of a long answer." for n in range(1000))  # ~29,000 chars
    with (
        running() as model,
        matrix_stack(
            hermes_env,
            redis_url,
            fake,
            HERMES_MODEL__BASE_URL=model.url,
            HERMES_MODEL__API_KEY="sk-test-not-secret",
            HERMES_MODEL__NAME="fake-main",
            HERMES_AUXILIARY__NAME="fake-aux",
        ) as stack,
    ):
        asked = fake.message(DM_ROOM, long)
        wait_for(lambda: fake.texts(DM_ROOM), timeout=60)
        wait_for(stack.settled, timeout=60)
    parts = [s for s in fake.sent if s["room"] == DM_ROOM]
    assert len(parts) >= 2
    assert all(len(p["content"]["body"]) <= 16_000 for p in parts)
    words = " ".join(p["content"]["body"] for p in parts).split()
    assert words[-len(long.split()) :] == long.split()
    assert parts[0]["content"]["m.relates_to"]["m.in_reply_to"]["event_id"] == asked["event_id"]
    assert all("m.relates_to" not in p["content"] for p in parts[1:])
    assert len({p["txn"] for p in parts}) == len(parts)
