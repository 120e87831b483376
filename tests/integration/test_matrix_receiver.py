"""The Matrix receiver (matrix-nio's sync loop) against a fake homeserver, real store: DMs,
groups and threads recorded; the first sync's backlog, own events, malformed events and
chatter not; a redelivered event once; a restart resumes from the stored `next_batch`."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from producers.gateway.deps import Gateway
from producers.matrix.receiver import MatrixReceiver
from shared.db import Store
from shared.ports import RecordingWaker
from shared.settings import Settings, load_settings
from shared.store import cursors
from tests.fakes.background import Background
from tests.fakes.matrix_api import BOT, FakeMatrix
from tests.fakes.stack import wait_for

pytestmark = pytest.mark.both_databases

TOKEN = "syt_fake_matrix_token"
DM_ROOM = "!dm:fake.test"
GROUP_ROOM = "!group:fake.test"


def inbox(store: Store) -> list[tuple[str, str, str]]:
    with store.read() as conn:
        rows = conn.execute(text("SELECT event_id, session_key, text FROM inbox ORDER BY id"))
        return [(r[0], r[1], r[2]) for r in rows]


@pytest.fixture
def fake() -> Iterator[FakeMatrix]:
    with FakeMatrix(TOKEN) as server:
        server.room(DM_ROOM, 2)
        server.room(GROUP_ROOM, 5)
        yield server


def _settings(env: dict[str, str], fake: FakeMatrix, **extra: str) -> Settings:
    return load_settings(
        {
            **env,
            "HERMES_PLATFORMS__MATRIX__TOKEN": TOKEN,
            "HERMES_PLATFORMS__MATRIX__HOMESERVER": fake.base,
            "HERMES_PLATFORMS__MATRIX__USER_ID": BOT,
            "HERMES_PLATFORMS__MATRIX__SYNC_TIMEOUT_MS": "500",
            **extra,
        }
    )


def _receiver(settings: Settings, store: Store, fake: FakeMatrix) -> MatrixReceiver:
    return MatrixReceiver(
        Gateway(settings, store, RecordingWaker(), time.time),
        homeserver=fake.base,
        user_id=BOT,
        token=TOKEN,
        sync_timeout_ms=500,
    )


def _stored_token(store: Store) -> str | None:
    with store.read() as conn:
        return cursors.load(conn, "matrix", BOT)


@pytest.mark.timeout(90)
def test_turns_recorded_backlog_own_and_malformed_skipped_restart_resumes(
    hermes_env: dict[str, str], store: Store, fake: FakeMatrix
) -> None:
    settings = _settings(hermes_env, fake)
    fake.message(DM_ROOM, "old news before the bot started")  # the first sync's backlog
    receiver = _receiver(settings, store, fake)
    with Background(receiver.run):
        wait_for(lambda: receiver.batches >= 1, timeout=20)
        assert _stored_token(store) == "s1"
        dm = fake.message(DM_ROOM, "hello bot")
        fake.message(GROUP_ROOM, "people chatting, not to the bot")
        group = fake.message(GROUP_ROOM, f"{BOT}: what is 2+2?")
        thread = fake.message(
            GROUP_ROOM,
            "in the thread",
            **{"m.relates_to": {"rel_type": "m.thread", "event_id": "$root1"}},
        )
        fake.message(DM_ROOM, "my own words", sender=BOT)
        fake.post(DM_ROOM, {"type": "m.room.message", "event_id": "$bad1", "sender": "@a:x",
                            "content": "not an object"})  # fmt: skip
        fake.post(DM_ROOM, {"type": "m.room.message", "event_id": "nosigil", "sender": "@a:x",
                            "content": {"msgtype": "m.text", "body": "x"}})  # fmt: skip
        fake.post(DM_ROOM, {"type": "m.room.message", "sender": "@a:x"})  # no event id
        image = fake.message(
            DM_ROOM,
            "cat.png",
            msgtype="m.image",
            url="mxc://fake.test/cat",
            info={"mimetype": "image/png", "size": 3},
        )
        wait_for(lambda: receiver.recorded >= 4, timeout=20)
        wait_for(lambda: _stored_token(store) == f"s{len(fake.timeline)}", timeout=20)
    rows = inbox(store)
    # Each room's turns in order (a sync response groups its events by room).
    assert [r[0] for r in rows] == [dm["event_id"], image["event_id"], group["event_id"],
                                    thread["event_id"]]  # fmt: skip
    assert rows[2][2] == "what is 2+2?"
    keys = {r[0]: r[1] for r in rows}
    assert keys[dm["event_id"]] != keys[group["event_id"]] != keys[thread["event_id"]]
    assert "$root1" in keys[thread["event_id"]]
    with store.read() as conn:
        attached = conn.execute(
            text("SELECT attachments FROM inbox WHERE event_id = :e"), {"e": image["event_id"]}
        ).scalar_one()
    assert "mxc://fake.test/cat" in attached

    # Stopped: messages written meanwhile are picked up after a restart, nothing replayed.
    stored = _stored_token(store)
    later = fake.message(DM_ROOM, "while you were away")
    receiver = _receiver(settings, store, fake)
    fake.syncs.clear()
    with Background(receiver.run):
        wait_for(lambda: receiver.recorded >= 1, timeout=20)
        wait_for(lambda: receiver.batches >= 2, timeout=20)
    assert fake.syncs[0] == stored  # resumed where the store said
    assert [r[0] for r in inbox(store)][-1] == later["event_id"]
    assert len(inbox(store)) == 5


@pytest.mark.timeout(60)
def test_a_replayed_batch_is_recorded_once(
    hermes_env: dict[str, str], store: Store, fake: FakeMatrix
) -> None:
    settings = _settings(hermes_env, fake)
    receiver = _receiver(settings, store, fake)
    with Background(receiver.run):
        wait_for(lambda: receiver.batches >= 1, timeout=20)
        event = fake.message(DM_ROOM, "once please")
        wait_for(lambda: receiver.recorded >= 1, timeout=20)
        fake.post(DM_ROOM, event)  # the homeserver sends the same event again
        wait_for(lambda: _stored_token(store) == "s2", timeout=20)
    assert [r[0] for r in inbox(store)] == [event["event_id"]]
    # A crash before the token was stored: the whole batch comes again, and is a no-op.
    with store.write() as conn:
        cursors.save(conn, "matrix", BOT, "s0")
    receiver = _receiver(settings, store, fake)
    with Background(receiver.run):
        wait_for(lambda: _stored_token(store) == "s2", timeout=20)
    assert [r[0] for r in inbox(store)] == [event["event_id"]]


@pytest.mark.timeout(60)
def test_a_user_not_on_the_allow_list_is_refused_once_and_nothing_stored(
    hermes_env: dict[str, str], store: Store, fake: FakeMatrix
) -> None:
    settings = _settings(hermes_env, fake, HERMES_PLATFORMS__MATRIX__ALLOWED_USERS="@bob:fake.test")
    receiver = _receiver(settings, store, fake)
    with Background(receiver.run):
        wait_for(lambda: receiver.batches >= 1, timeout=20)
        fake.message(DM_ROOM, "let me in")
        wait_for(lambda: len(fake.sent) >= 1, timeout=20)
        fake.message(DM_ROOM, "again", sender="@bob:fake.test")
        wait_for(lambda: receiver.recorded >= 1, timeout=20)
    assert len(fake.sent) == 1 and fake.sent[0]["room"] == DM_ROOM
    assert [r[2] for r in inbox(store)] == ["again"]
