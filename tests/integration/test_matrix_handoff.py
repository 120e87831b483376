"""`/handoff matrix` posts a seed message in the home room (matrix-nio's room_send against the
fake homeserver) and continues the session in the m.thread it roots; when the homeserver
refuses the seed, the room itself. The home room is set by a Matrix `/sethome` turn."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from producers.intake import accept
from shared.db import Store, open_store
from shared.settings import Settings, load_settings
from shared.store import chats, handoffs
from tests.fakes.delivery import delivery_runtime
from tests.fakes.matrix_api import BOT, FakeMatrix
from tests.fakes.stack import redis_db_url
from tests.integration.test_handoff import _bound, _say, _session
from tests.pipeline_helpers import turn
from workers.drain import drain
from workers.handoff import run_handoff

pytestmark = pytest.mark.both_databases

TOKEN = "syt_matrix_handoff_token"
ROOM = "!home:fake.test"


@pytest.fixture
def fake() -> Iterator[FakeMatrix]:
    with FakeMatrix(TOKEN) as server:
        yield server


@pytest.fixture
def mx(hermes_env: dict[str, str], redis_url: str, fake: FakeMatrix) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url),
            "HERMES_PLATFORMS__MATRIX__TOKEN": TOKEN,
            "HERMES_PLATFORMS__MATRIX__HOMESERVER": fake.base,
            "HERMES_PLATFORMS__MATRIX__USER_ID": BOT,
        }
    )


@pytest.fixture
def mx_store(mx: Settings) -> Iterator[Store]:
    store = open_store(mx.resolved_database_url)
    yield store
    store.close()


def _sethome(rt: object, mx: Settings, store: Store) -> chats.HomeChannel:
    home = turn(1, ROOM, text="/sethome", platform="matrix", chat_type="group",
                user_id="@alice:fake.test", event_id="$sethome")  # fmt: skip
    accepted = accept(store, rt.waker, home, settings=mx, clock=time.time)  # type: ignore[attr-defined]
    drain(rt, accepted.session_key)  # type: ignore[arg-type]
    with store.read() as conn:
        found = chats.get_home_channel(conn, "matrix")
    assert found is not None and found.chat_id == ROOM
    return found


def test_matrix_handoff_opens_an_m_thread_under_a_seed_message(
    mx: Settings, mx_store: Store, fake: FakeMatrix
) -> None:
    with delivery_runtime(mx, mx_store) as (rt, waker):
        home = _sethome(rt, mx, mx_store)
        _say(rt, 1, "plan my trip to Lisbon")
        session_id = _session(rt)
        _say(rt, 2, "/handoff matrix")
        assert run_handoff(rt, waker.handoffs[0][0]).outcome == "completed"
        with mx_store.read() as conn:
            found = handoffs.get(conn, waker.handoffs[0][0])
        assert found is not None and found.thread_id is not None
        root = found.thread_id
        assert found.target_key and found.target_key != home.session_key
        assert _bound(rt, found.target_key) == session_id
    sent = [s for s in fake.sent if s["room"] == ROOM]
    seed = next(s for s in sent if s["event_id"] == root)
    assert "m.relates_to" not in seed["content"] and "Lisbon" in seed["content"]["body"]
    in_thread = [s for s in sent if s["content"].get("m.relates_to", {}).get("event_id") == root]
    assert len(in_thread) == 2  # the note and the summary, in the thread
    assert all(s["content"]["m.relates_to"]["rel_type"] == "m.thread" for s in in_thread)
    assert in_thread[0]["content"]["body"].startswith("↻ Continuing session ")


def test_matrix_handoff_falls_back_to_the_room_when_the_seed_is_refused(
    mx: Settings, mx_store: Store, fake: FakeMatrix
) -> None:
    with delivery_runtime(mx, mx_store) as (rt, waker):
        home = _sethome(rt, mx, mx_store)
        _say(rt, 1, "plan my trip")
        session_id = _session(rt)
        _say(rt, 2, "/handoff matrix")
        before = len(fake.sent)
        fake.send_errors.append((403, {"errcode": "M_FORBIDDEN", "error": "no threads here"}))
        assert run_handoff(rt, waker.handoffs[0][0]).outcome == "completed"
        with mx_store.read() as conn:
            found = handoffs.get(conn, waker.handoffs[0][0])
        # the room's own key (everyone in it continues), not the /sethome user's
        assert found is not None and found.thread_id is None and found.target_key
        assert found.target_key != home.session_key
        assert _bound(rt, found.target_key) == session_id
    note, _summary = fake.sent[before:]
    assert note["content"]["body"].startswith("↻ Continuing session ")
    assert "m.relates_to" not in note["content"]
