"""A burst of turns for one session costs one wake-up; a lost or unsent one is not trusted."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from producers.intake import Accepted, accept
from shared.db import Store
from shared.db.schema import routes as routes_table
from shared.pipeline import routes
from shared.ports import RecordingWaker
from shared.settings import Settings, load_settings
from tests.pipeline_helpers import ScriptedAgent, make_runtime, transcript_of, turn
from workers.drain import drain

pytestmark = pytest.mark.both_databases


@pytest.fixture
def settings(hermes_env: dict[str, str]) -> Settings:
    return load_settings({**hermes_env, "HERMES_PIPELINE__BATCH_TURNS": "10"})


class Clock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Unreachable(RecordingWaker):
    """A broker that is down until `up` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.up = False

    def drain(self, session_key: str, *, countdown: float | None = None) -> bool:
        return self.up and super().drain(session_key, countdown=countdown)


def _send(
    store: Store, waker: RecordingWaker, settings: Settings, clock: Clock, n: int
) -> Accepted:
    return accept(store, waker, turn(n), settings=settings, clock=clock)


def _mark(store: Store, key: str) -> float | None:
    with store.read() as conn:
        value = conn.execute(
            select(routes_table.c.wake_sent_at).where(routes_table.c.session_key == key)
        ).scalar_one()
        return float(value) if value is not None else None


def test_a_burst_sends_one_wake_up_and_its_drain_runs_every_turn(
    settings: Settings, store: Store
) -> None:
    clock = Clock()
    rt, waker = make_runtime(settings, store, ScriptedAgent(), clock=clock)
    burst = [_send(store, waker, settings, clock, n) for n in range(4)]
    key = burst[0].session_key
    assert all(a.woken for a in burst)
    assert waker.drains == [(key, None)]
    assert drain(rt, key).ran == 4
    assert [text for role, text in transcript_of(store, key) if role == "user"] == [
        f"message {n}" for n in range(4)
    ]
    assert _mark(store, key) is None  # taken by the drain
    assert _send(store, waker, settings, clock, 4).woken
    assert waker.drains == [(key, None), (key, None)]  # the next turn wakes a drain again


def test_a_wake_up_that_could_not_be_sent_is_not_trusted(settings: Settings, store: Store) -> None:
    clock = Clock()
    waker = Unreachable()
    lost = _send(store, waker, settings, clock, 0)
    assert not lost.woken and _mark(store, lost.session_key) is None
    waker.up = True
    clock.now += 1
    assert _send(store, waker, settings, clock, 1).woken
    assert waker.drains == [(lost.session_key, None)]


def test_a_wake_up_the_broker_lost_is_trusted_only_for_a_while(
    settings: Settings, store: Store
) -> None:
    clock = Clock()
    waker = RecordingWaker()
    key = _send(store, waker, settings, clock, 0).session_key
    clock.now += routes.WAKE_PENDING_SECONDS / 2
    assert _send(store, waker, settings, clock, 1).woken
    assert len(waker.drains) == 1  # the first one is presumed on its way
    clock.now += routes.WAKE_PENDING_SECONDS
    assert _send(store, waker, settings, clock, 2).woken
    assert waker.drains == [(key, None), (key, None)]  # it was sent too long ago: again


def test_a_lease_taken_or_let_go_meanwhile_takes_the_mark_with_it(
    settings: Settings, store: Store
) -> None:
    """A wake-up whose drain found the lease taken is spent; the holder saw the turn. The
    next turn after the holder lets go must wake a drain again, not trust the spent one."""
    clock = Clock()
    waker = RecordingWaker()
    key = _send(store, waker, settings, clock, 0).session_key
    with store.write() as conn:
        lease = routes.acquire_route(conn, key, "another drain", clock.now, 30)
    assert lease is not None and _mark(store, key) is None
    assert _send(store, waker, settings, clock, 1).woken  # the holder will see it
    assert len(waker.drains) == 1 and _mark(store, key) is None
    with store.write() as conn:
        routes.release_route(conn, lease)
    assert _send(store, waker, settings, clock, 2).woken
    assert waker.drains == [(key, None), (key, None)]


def test_an_expired_lease_does_not_hold_back_the_wake_up(settings: Settings, store: Store) -> None:
    """A holder that died (or is paused) past its lease: the next turn wakes a new drain."""
    clock = Clock()
    waker = RecordingWaker()
    key = _send(store, waker, settings, clock, 0).session_key
    with store.write() as conn:
        assert routes.acquire_route(conn, key, "a paused drain", clock.now, 5) is not None
    clock.now += 6
    assert _send(store, waker, settings, clock, 1).woken
    assert waker.drains == [(key, None), (key, None)]
    assert _mark(store, key) == clock.now
