"""A worker killed while it runs a handoff: the next `hermes worker` to start on that host fails
the handoff at once (a second delivery is worse than a retry), and leaves alone the running
handoffs of a live process and of other hosts. Real processes, real kill."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from producers.broker import BrokerWaker, broker_client
from shared.db import Store, open_store
from shared.settings import load_settings
from shared.store import chats, handoffs
from tests.fakes.delivery import delivery_runtime
from tests.fakes.stack import Proc, redis_db_url, start_worker, wait_for
from tests.fakes.telegram_api import FakeTelegram
from tests.integration.test_handoff import HOME, TOKEN, _say, _session
from workers.handoff import RESTARTED, claimer

pytestmark = pytest.mark.both_databases


@pytest.fixture
def fake() -> Iterator[FakeTelegram]:
    with FakeTelegram(TOKEN) as server:
        yield server


def _status(store: Store, handoff_id: int) -> handoffs.Handoff:
    with store.read() as conn:
        found = handoffs.get(conn, handoff_id)
    assert found is not None
    return found


def test_a_restarted_worker_fails_the_handoff_its_killed_predecessor_ran(
    hermes_env: dict[str, str], hermes_home: Path, redis_url: str, fake: FakeTelegram
) -> None:
    env = {
        **hermes_env,
        "HERMES_BROKER_URL": redis_db_url(redis_url),
        "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN,
        "HERMES_PLATFORMS__TELEGRAM__API_BASE": fake.api_base,
    }
    settings = load_settings(env)
    store = open_store(settings.resolved_database_url)
    procs: list[Proc] = []
    try:
        with store.write() as conn:
            chats.set_home_channel(conn, HOME)
        with delivery_runtime(settings, store) as (rt, waker):
            _say(rt, 1, "plan my trip to Lisbon")
            session_id = _session(rt)
            _say(rt, 2, "/handoff telegram")
            ((handoff_id, _),) = waker.handoffs
        now = time.time()
        with store.write() as conn:  # running elsewhere: a live process here, another host
            live = handoffs.request(conn, "s-live", "k1", "telegram", now, 3600)
            assert handoffs.claim(conn, live, now, claimer())
            remote = handoffs.request(conn, "s-remote", "k2", "telegram", now, 3600)
            assert handoffs.claim(conn, remote, now, "another-host:4242:1700000000.00")
        fake.script("createForumTopic", "hang:20")  # the worker is mid-way when it is killed
        procs.append(start_worker(env, hermes_home))
        BrokerWaker(broker_client(settings)).handoff(handoff_id)
        wait_for(lambda: "createForumTopic" in fake.methods(), timeout=60)
        assert _status(store, handoff_id).status == handoffs.RUNNING
        os.killpg(procs[0].proc.pid, signal.SIGKILL)  # the worker and its pool, at once
        procs[0].proc.wait()

        procs.append(start_worker(env, hermes_home))
        wait_for(lambda: _status(store, handoff_id).status == handoffs.FAILED, timeout=60)
        assert _status(store, handoff_id).error == RESTARTED
        assert _status(store, live).status == handoffs.RUNNING  # its process is alive
        assert _status(store, remote).status == handoffs.RUNNING  # the sweep's, after 300 s
        assert fake.sent("-100777") == []  # nothing delivered, and nothing will be
        with store.read() as conn:
            assert handoffs.open_for(conn, session_id) is None  # /handoff can be run again
    finally:
        for proc in reversed(procs):
            proc.stop()
        store.close()
