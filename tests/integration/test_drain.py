"""The drain on a real state.db: order, exactly once, fencing, batches, retries, dead turns."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select, text

from producers.intake import accept
from shared.db import Store
from shared.db.schema import inbox as inbox_table
from shared.db.schema import routes as routes_table
from shared.pipeline import inbox, leases, outbox, routes
from shared.ports import RecordingWaker
from shared.settings import Settings, load_settings
from shared.turns import TurnRejected
from tests.pipeline_helpers import ScriptedAgent, make_runtime, transcript_of, turn
from workers.agent.offline import OfflineAgent
from workers.delivery.base import MemorySender, RetryLater
from workers.drain import drain
from workers.flush import flush
from workers.runtime import Runtime

pytestmark = pytest.mark.both_databases


class Runtimes:
    """`make_runtime` for one test; `close` stops each runtime's lease renewer. A renewer left
    running is still writing (every 50 ms in the stop test) when the store fixture closes the
    store: that write's connection went back to a disposed pool and psycopg warned about it,
    unclosed, whenever the collector freed it (once in CI, in another module's test)."""

    def __init__(self) -> None:
        self._made: list[Runtime] = []

    def __call__(
        self, settings: Settings, store: Store, agent: object | None = None
    ) -> tuple[Runtime, RecordingWaker]:
        rt, waker = make_runtime(settings, store, agent)
        self._made.append(rt)
        return rt, waker

    def close(self) -> None:
        while self._made:
            self._made.pop().renewer.close()


@pytest.fixture
def runtime(store: Store) -> Iterator[Runtimes]:
    """Torn down before `store` (it depends on it): the renewers stop before the store closes."""
    made = Runtimes()
    yield made
    made.close()


@pytest.fixture
def fast_settings(hermes_env: dict[str, str]) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_PIPELINE__BATCH_TURNS": "5",
            "HERMES_PIPELINE__LEASE_SECONDS": "2",
            "HERMES_PIPELINE__RETRY_BACKOFF_SECONDS": "0",
        }
    )


def _sent(rt: object) -> list[str]:
    """What the terminal's (memory) sender was asked to send, in order."""
    return [row.text for row in rt.senders.get("cli").sent]  # type: ignore[attr-defined]


def test_turns_run_in_arrival_order_once_each(
    fast_settings: Settings, store: Store, runtime: Runtimes
) -> None:
    rt, waker = runtime(fast_settings, store, ScriptedAgent())
    keys = {
        accept(store, rt.waker, turn(n), settings=fast_settings, clock=time.time).session_key
        for n in range(3)
    }
    (key,) = keys
    assert drain(rt, key).ran == 3
    assert transcript_of(store, key) == [
        ("user", "message 0"),
        ("assistant", "reply to message 0"),
        ("user", "message 1"),
        ("assistant", "reply to message 1"),
        ("user", "message 2"),
        ("assistant", "reply to message 2"),
    ]
    assert drain(rt, key).ran == 0  # a duplicate wake-up is harmless
    with store.read() as conn:
        statuses = conn.execute(select(inbox_table.c.status)).scalars().all()
        assert statuses == ["done"] * 3
        assert outbox.pending(conn, "cli:c1") == []  # sent inline: the lane was free
    assert _sent(rt) == ["reply to message 0", "reply to message 1", "reply to message 2"]
    assert waker.deliveries == []  # no delivery task was needed


def test_redelivered_event_is_recorded_once(
    fast_settings: Settings, store: Store, runtime: Runtimes
) -> None:
    rt, _ = runtime(fast_settings, store)
    first = accept(store, rt.waker, turn(1), settings=fast_settings, clock=time.time)
    again = accept(store, rt.waker, turn(1), settings=fast_settings, clock=time.time)
    assert again.duplicate and again.turn_id == first.turn_id
    with store.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM inbox")).scalar_one() == 1


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"text": "x" * 40_000}, "limit"),
        ({"platform": "myspace"}, "unknown platform"),
        ({"chat_id": ""}, "chat id is required"),
        ({"event_id": ""}, "event id is required"),
        ({"text": "   "}, "needs text"),
        ({"chat_type": "town-square"}, "unknown chat type"),
    ],
)
def test_bad_turns_are_refused_and_nothing_is_written(
    fast_settings: Settings, store: Store, bad: dict[str, str], reason: str, runtime: Runtimes
) -> None:
    rt, waker = runtime(fast_settings, store)
    with pytest.raises(TurnRejected, match=reason):
        accept(store, rt.waker, turn(0, **bad), settings=fast_settings, clock=time.time)
    with store.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM inbox")).scalar_one() == 0
        assert conn.execute(text("SELECT count(*) FROM routes")).scalar_one() == 0
    assert waker.drains == []


def test_batch_is_bounded_and_rewakes(
    fast_settings: Settings, store: Store, runtime: Runtimes
) -> None:
    rt, waker = runtime(fast_settings, store)
    for n in range(12):
        key = accept(store, rt.waker, turn(n), settings=fast_settings, clock=time.time).session_key
    waker.drains.clear()
    result = drain(rt, key)
    assert (result.ran, result.reason) == (5, "batch")
    assert waker.drains == [(key, None)]
    assert drain(rt, key).ran == 5
    assert drain(rt, key).ran == 2


def test_failing_turn_is_retried_then_dead_and_never_blocks_forever(
    fast_settings: Settings, store: Store, runtime: Runtimes
) -> None:
    agent = ScriptedAgent(fail_on=frozenset({"message 0"}))
    rt, _ = runtime(fast_settings, store, agent)
    key = accept(store, rt.waker, turn(0), settings=fast_settings, clock=time.time).session_key
    accept(store, rt.waker, turn(1), settings=fast_settings, clock=time.time)
    for _ in range(5):
        drain(rt, key)
    with store.read() as conn:
        rows = conn.execute(
            select(inbox_table.c.status, inbox_table.c.attempts).order_by(inbox_table.c.seq)
        ).all()
    sent = _sent(rt)
    assert [tuple(r) for r in rows] == [("dead", 3), ("done", 1)]
    assert agent.calls.count("message 0") == 3  # bounded: max_attempts
    assert "could not process" in sent[0] and sent[1] == "reply to message 1"


def test_a_fenced_out_holder_writes_nothing(
    fast_settings: Settings, store: Store, runtime: Runtimes
) -> None:
    """Worker A stalls past its lease; B takes over and finishes; A's late write is refused."""
    release_a = threading.Event()
    a_started = threading.Event()

    def slow_reply(request):  # type: ignore[no-untyped-def]
        a_started.set()
        release_a.wait(10)
        return "late reply from A"

    rt_a, _ = runtime(fast_settings, store, ScriptedAgent(reply=slow_reply))
    rt_a.renewer._interval = 60  # A is "paused": it never renews
    key = accept(store, rt_a.waker, turn(0), settings=fast_settings, clock=time.time).session_key
    result_a: list[object] = []
    thread = threading.Thread(target=lambda: result_a.append(drain(rt_a, key)))
    thread.start()
    assert a_started.wait(5)
    time.sleep(fast_settings.pipeline.lease_seconds + 0.3)  # A's lease expires
    rt_b, _ = runtime(fast_settings, store, ScriptedAgent(reply=lambda r: "reply from B"))
    assert drain(rt_b, key).ran == 1
    release_a.set()
    thread.join(10)
    assert result_a[0].reason == "lost"  # type: ignore[attr-defined]
    assert transcript_of(store, key) == [("user", "message 0"), ("assistant", "reply from B")]


def test_lease_fence_only_grows(store: Store) -> None:
    with store.write() as conn:
        inbox.record_turn(conn, turn(0), _key("k"), now=0)
    with store.write() as conn:
        first = routes.acquire_route(conn, "k", "a", now=0, ttl=1)
        assert first is not None
        assert routes.acquire_route(conn, "k", "b", now=0.5, ttl=1) is None
        second = routes.acquire_route(conn, "k", "b", now=2, ttl=1)
        assert second is not None and second.fence > first.fence
        with pytest.raises(leases.LeaseLost):
            routes.check_route(conn, first, now=2, ttl=1)
        routes.check_route(conn, second, now=2, ttl=1)


def _key(key: str):  # type: ignore[no-untyped-def]
    from shared.session_key import SessionKey

    return SessionKey(key, shared=False)


def test_two_first_messages_at_once_make_one_session(
    fast_settings: Settings, store: Store, runtime: Runtimes
) -> None:
    rt, _ = runtime(fast_settings, store, OfflineAgent(latency=0.05))
    key = accept(store, rt.waker, turn(0), settings=fast_settings, clock=time.time).session_key
    accept(store, rt.waker, turn(1), settings=fast_settings, clock=time.time)
    threads = [threading.Thread(target=drain, args=(rt, key)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    with store.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM sessions")).scalar_one() == 1
        assert conn.execute(text("SELECT count(*) FROM messages")).scalar_one() == 4


def test_stop_cancels_the_running_turn(
    fast_settings: Settings, store: Store, runtime: Runtimes
) -> None:
    rt, _ = runtime(fast_settings, store, OfflineAgent(latency=5))
    rt.renewer._interval = 0.05
    key = accept(store, rt.waker, turn(0), settings=fast_settings, clock=time.time).session_key
    thread = threading.Thread(target=drain, args=(rt, key))
    started = time.monotonic()
    thread.start()
    time.sleep(0.3)
    accept(store, rt.waker, turn(1, text="/stop"), settings=fast_settings, clock=time.time)
    thread.join(10)
    drain(rt, key)
    assert time.monotonic() - started < 4  # the 5 s reply was cut short
    with store.read() as conn:
        rows = conn.execute(select(inbox_table.c.status).order_by(inbox_table.c.seq)).scalars()
        assert list(rows) == ["cancelled", "done"]
    assert _sent(rt) == ["Stopped the reply in progress."]
    assert transcript_of(store, key) == [("user", "message 0")]


def test_delivery_keeps_chat_order_and_honours_retry_after(
    fast_settings: Settings, store: Store, runtime: Runtimes
) -> None:
    rt, waker = runtime(fast_settings, store, ScriptedAgent())

    class Flaky(MemorySender):
        def __init__(self) -> None:
            super().__init__("cli")
            self.refused = False

        def send(self, row):  # type: ignore[no-untyped-def]
            if row.text.endswith("1") and not self.refused:
                self.refused = True
                raise RetryLater(0.2, "429 too many requests")
            return super().send(row)

    sender = Flaky()
    rt.senders.add(sender)
    key = ""
    for n in range(3):
        key = accept(store, rt.waker, turn(n), settings=fast_settings, clock=time.time).session_key
    drain(rt, key)  # delivers inline until the platform says wait
    assert [r.text for r in sender.sent] == ["reply to message 0"]
    assert waker.deliveries and waker.deliveries[-1][1] is not None  # re-scheduled, not slept
    assert flush(rt, "cli:c1").reason == "cooldown"  # the lane waits, whoever asks
    time.sleep(0.25)
    assert flush(rt, "cli:c1").sent == 2
    assert [r.text for r in sender.sent] == [
        "reply to message 0",
        "reply to message 1",
        "reply to message 2",
    ]
    assert waker.deliveries[-1][1] is not None  # re-scheduled, not slept


def test_broker_down_the_turn_is_kept_and_redrive_finds_it(hermes_env: dict[str, str]) -> None:
    from producers.broker import BrokerWaker, broker_client
    from workers.redrive import redrive

    settings = load_settings({**hermes_env, "HERMES_BROKER_URL": "redis://127.0.0.1:1/0"})
    store = open_store_for(settings)
    runtime = Runtimes()
    try:
        waker = BrokerWaker(broker_client(settings))
        accepted = accept(store, waker, turn(0), settings=settings, clock=time.time)
        assert not accepted.woken and not accepted.duplicate
        rt, recording = runtime(settings, store)
        assert redrive(rt).drains == 1
        assert recording.drains == [(accepted.session_key, None)]
        assert drain(rt, accepted.session_key).ran == 1
        assert redrive(rt).drains == 0
    finally:
        runtime.close()  # before its store closes
        store.close()


def open_store_for(settings: Settings) -> Store:
    from shared.db import open_store

    return open_store(settings.resolved_database_url)


def test_no_wake_up_is_sent_while_a_drain_holds_the_session(
    fast_settings: Settings, store: Store, runtime: Runtimes
) -> None:
    """The holder finds a turn committed before it lets go, so the wake-up would be wasted."""
    rt, waker = runtime(fast_settings, store)
    key = accept(store, rt.waker, turn(0), settings=fast_settings, clock=time.time).session_key
    assert waker.drains == [(key, None)]
    with store.write() as conn:
        lease = routes.acquire_route(conn, key, "holder", time.time(), 30)
    assert lease is not None
    during = accept(store, rt.waker, turn(1), settings=fast_settings, clock=time.time)
    assert during.woken and waker.drains == [(key, None)]
    with store.write() as conn:
        routes.release_route(conn, lease)
    after = accept(store, rt.waker, turn(2), settings=fast_settings, clock=time.time)
    assert after.woken and waker.drains == [(key, None), (key, None)]
    assert drain(rt, key).ran == 3


class _UnstorableAgent(ScriptedAgent):
    """Answers with a message the store cannot write: the drain fails outside the agent."""

    def respond(self, request):  # type: ignore[no-untyped-def]
        from workers.agent.base import AgentReply, NewMessage

        self.calls.append(request.turn.text)
        return AgentReply(messages=[NewMessage("assistant", object())], replies=["x"])  # type: ignore[arg-type]


def test_a_drain_that_fails_unexpectedly_lets_go_and_wakes_the_key_again(
    fast_settings: Settings, store: Store, runtime: Runtimes
) -> None:
    rt, waker = runtime(fast_settings, store, _UnstorableAgent())
    key = accept(store, rt.waker, turn(0), settings=fast_settings, clock=time.time).session_key
    waker.drains.clear()
    with pytest.raises(Exception):  # noqa: B017 - whatever the driver raises for the bad value
        drain(rt, key)
    assert waker.drains == [(key, fast_settings.pipeline.retry_backoff_seconds)]
    with store.read() as conn:
        holder = conn.execute(
            select(routes_table.c.lease_holder).where(routes_table.c.session_key == key)
        ).scalar()
        status = conn.execute(select(inbox_table.c.status)).scalar_one()
    assert holder is None  # the lease was let go, so the next wake-up can take it
    assert status in inbox.OPEN_STATUSES  # the turn is still there to retry


def test_a_store_reading_client_gets_its_reply_with_the_commit(
    fast_settings: Settings, store: Store, runtime: Runtimes
) -> None:
    """The terminal reads replies from state.db: the turn's own commit delivers them (written
    as sent, no lane taken, no second write) and the client is nudged once, after it."""
    rt, _ = runtime(fast_settings, store, ScriptedAgent())
    terminal = MemorySender("cli", reads_store=True)
    rt.senders.add(terminal)
    key = accept(store, rt.waker, turn(0), settings=fast_settings, clock=time.time).session_key
    assert drain(rt, key).ran == 1
    with store.read() as conn:
        (done,) = conn.execute(select(inbox_table)).mappings().all()
        (row,) = outbox.for_turn(conn, done["id"])
        lanes = conn.execute(text("SELECT name FROM leases WHERE name LIKE 'lane:%'")).all()
    assert (row.status, row.text, row.attempts) == ("sent", "reply to message 0", 1)
    assert row.sent_at == done["finished_at"]  # the same write
    assert lanes == []
    assert [sent.id for sent in terminal.sent] == [row.id]
