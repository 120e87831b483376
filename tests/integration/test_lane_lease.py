"""A chat lane's lease: renewed while a send is slow, free again soon after its holder dies.

A worker SIGKILLed in the middle of a send used to keep its lane for a whole minute (a fixed
lease no one renewed), so every later reply to that chat waited that long. The lease is now
short and the holder's Renewer extends it while the send is in flight. Both databases.

A holder whose store answered late (a worker cut off from the database after its commit) used
to send on what that answer told it although its lease had run out meanwhile and another
worker had sent the same replies; only Redis's record of sent parts kept that from being a
reply twice and out of order, and Redis may come back empty.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.db import Store, open_store
from shared.pipeline import outbox
from shared.settings import Settings, load_settings
from tests.fakes.delivery import delivery_runtime, reply, row
from tests.fakes.stack import redis_db_url
from tests.fakes.telegram_api import FakeTelegram
from workers.flush import flush, lane_ttl, open_lane, send_opened

pytestmark = pytest.mark.both_databases

TOKEN = "123456789:AAFakeTokenForLaneLeaseTests"
LEASE = 2.0  # pipeline.lease_seconds here; a lane's lease is at most that
CHAT = "4242"

HOLDER = """
import os, sys
from shared.db import open_store
from shared.settings import load_settings
from tests.fakes.delivery import delivery_runtime
from workers.flush import flush
settings = load_settings(dict(os.environ))
store = open_store(settings.resolved_database_url)
with delivery_runtime(settings, store) as (rt, _):
    print(flush(rt, sys.argv[1]), flush=True)
"""


@pytest.fixture
def fake() -> Iterator[FakeTelegram]:
    with FakeTelegram(TOKEN) as server:
        yield server


@pytest.fixture
def env(hermes_env: dict[str, str], redis_url: str, fake: FakeTelegram) -> dict[str, str]:
    return {
        **hermes_env,
        "HERMES_BROKER_URL": redis_db_url(redis_url),
        "HERMES_PIPELINE__LEASE_SECONDS": str(LEASE),
        "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN,
        "HERMES_PLATFORMS__TELEGRAM__API_BASE": fake.api_base,
    }


@pytest.fixture
def lane_store(env: dict[str, str]) -> Iterator[tuple[Settings, Store]]:
    settings = load_settings(env)
    store = open_store(settings.resolved_database_url)
    yield settings, store
    store.close()


def _sends(fake: FakeTelegram) -> int:
    return sum(call.method == "sendMessage" for call in fake.calls)


def _wait_for(what: str, done: object, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_slow_send_keeps_its_lane_and_a_killed_holders_lane_is_free_within_its_lease(
    env: dict[str, str], lane_store: tuple[Settings, Store], fake: FakeTelegram
) -> None:
    settings, store = lane_store
    row_id = reply(store, "telegram", CHAT, "the reply")
    lane = row(store, row_id).lane
    fake.script("sendMessage", "hang:8")  # the holder's send: no answer for 8 s
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, lane],
        env=env,
        cwd=Path(__file__).parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for("the holder's send", lambda: _sends(fake) == 1, 60)
        with delivery_runtime(settings, store) as (rt, _):
            assert lane_ttl(rt) == LEASE
            # Twice the lease into the send: renewed, so the lane is still the holder's.
            time.sleep(2 * LEASE + 0.5)
            assert holder.poll() is None, holder.communicate()
            assert flush(rt, lane).reason == "busy"
            assert row(store, row_id).status == outbox.PENDING

            os.kill(holder.pid, signal.SIGKILL)
            holder.communicate(timeout=10)
            killed = time.monotonic()
            results = []
            while not results or results[-1].reason == "busy":
                assert time.monotonic() - killed < 6 * LEASE, "the dead holder's lane stayed held"
                results.append(flush(rt, lane))
                time.sleep(0.1)
        # Sent again by the next worker: at least once (the dead holder's send may have left).
        assert results[-1].sent == 1 and results[-1].reason == "idle", results
        assert row(store, row_id).status == outbox.SENT
        assert _sends(fake) == 2
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate(timeout=10)


def _texts(fake: FakeTelegram) -> list[str]:
    return [str(sent["text"]) for sent in fake.sent(CHAT)]


def _opened_long_ago(store: Store, settings: Settings) -> tuple[int, str, Any]:
    """Two replies in the chat's lane, opened by a write whose answer reaches its worker only
    after the lease it took ran out (the write, then the wait): (first row id, lane, opened)."""
    first = reply(store, "telegram", CHAT, "first")
    reply(store, "telegram", CHAT, "second")
    lane = row(store, first).lane
    with delivery_runtime(settings, store) as (rt, _):
        ttl = lane_ttl(rt)
        opened = store.commit(lambda conn: open_lane(conn, "late-worker", lane, time.time(), ttl))
    assert opened.lease is not None and len(opened.rows) == 2
    time.sleep(ttl + 0.3)
    return first, lane, opened


def test_a_holder_answered_after_its_lease_ran_out_does_not_send_what_another_worker_sent(
    lane_store: tuple[Settings, Store], fake: FakeTelegram
) -> None:
    settings, store = lane_store
    _first, lane, opened = _opened_long_ago(store, settings)
    with delivery_runtime(settings, store) as (rt, _):
        taken_over = flush(rt, lane)  # another worker: the lane is free again
        assert (taken_over.sent, taken_over.reason) == (2, "idle"), taken_over
        # Redis came back empty meanwhile (it keeps nothing on disk): which replies were sent
        # is known only to the store now, where the late holder's lease has moved on.
        rt.redis.flushdb()
        late = send_opened(rt, lane, opened)
    assert (late.sent, late.reason) == (0, "lost"), late
    assert _texts(fake) == ["first", "second"]


def test_a_holder_answered_late_sends_once_the_store_says_the_lane_is_still_its_own(
    lane_store: tuple[Settings, Store], fake: FakeTelegram
) -> None:
    settings, store = lane_store
    first, lane, opened = _opened_long_ago(store, settings)  # nobody took the lane meanwhile
    with delivery_runtime(settings, store) as (rt, _):
        late = send_opened(rt, lane, opened)
        assert (late.sent, late.reason) == (2, "idle"), late
        assert flush(rt, lane).reason == "idle"  # let go: free for the next reply
    assert _texts(fake) == ["first", "second"]
    assert {row(store, first).status, row(store, first + 1).status} == {outbox.SENT}
