"""Chaos: real Redis, real worker processes, SIGKILLs, a broker wipe, a paused lease holder
and re-sent events — and afterwards every turn is in its transcript exactly once, in order.

The second test runs the same checker against workers that drain without the lease, to show
that the checker catches exactly the failure the lease prevents.
"""

from __future__ import annotations

import fcntl
import os
import random
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from producers.broker import BrokerWaker, broker_client
from producers.intake import accept
from shared.db import Store
from shared.settings import Settings
from tests.chaos import (
    Fleet,
    env_for,
    lease_holder_pids,
    open_turns,
    opened,
    unsafe_worker_command,
    verify,
    worker_command,
)
from tests.pipeline_helpers import turn

pytestmark = pytest.mark.both_databases

LEASE = 2.0
# Seconds between two turns a producer sends: its 550 turns then span about 10 s, so the kills,
# the pause and the broker wipe all land while turns still arrive, even on an idle machine
# (at 0.004 they spanned only a few seconds: on an idle machine the pause could find no holder).
PACE = 0.015


def _fleet(tmp_path: Path, hermes_env: dict[str, str], command: list[str]) -> Fleet:
    home = tmp_path / "fleet"
    home.mkdir()
    env = env_for(
        home,
        hermes_env,
        HERMES_PIPELINE__LEASE_SECONDS=str(LEASE),
        HERMES_PIPELINE__REDRIVE_SECONDS="1",
        HERMES_PIPELINE__RETRY_BACKOFF_SECONDS="0.2",
        HERMES_MODEL__OFFLINE_LATENCY_MS="20",
    )
    return Fleet(home=home, env=env, worker_script=command)


def _produce(
    settings: Settings,
    fleet: Fleet,
    chats: list[str],
    turns_each: int,
    pace: float,
    expected: dict[str, list[str]],
    sent: list[tuple[str, int]],
    lock: threading.Lock,
) -> None:
    store = opened(settings)
    waker = BrokerWaker(broker_client(settings))
    try:
        for n in range(turns_each):
            for chat in chats:
                t = turn(n, chat, platform="telegram", text=f"{chat} turn {n:02d}")
                accepted = accept(store, waker, t, settings=settings, clock=time.time)
                with lock:
                    expected.setdefault(accepted.session_key, []).append(t.text)
                    sent.append((chat, n))
                time.sleep(pace)
    finally:
        store.close()


def _resend(settings: Settings, picks: list[tuple[str, int]]) -> int:
    store = opened(settings)
    waker = BrokerWaker(broker_client(settings))
    duplicates = 0
    try:
        for chat, n in picks:
            t = turn(n, chat, platform="telegram", text=f"{chat} turn {n:02d}")
            duplicates += accept(store, waker, t, settings=settings, clock=time.time).duplicate
    finally:
        store.close()
    return duplicates


def _wait_done(settings: Settings, timeout: float) -> int:
    store = opened(settings)
    try:
        deadline = time.monotonic() + timeout
        while (left := open_turns(store)) and time.monotonic() < deadline:
            time.sleep(0.5)
        return left
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_chaos_every_turn_exactly_once_in_order(tmp_path: Path, hermes_env: dict[str, str]) -> None:
    fleet = _fleet(tmp_path, hermes_env, worker_command())
    keys, turns_each = 220, 10
    chats = [f"chat{i:03d}" for i in range(keys)]
    expected: dict[str, list[str]] = {}
    sent: list[tuple[str, int]] = []
    lock = threading.Lock()
    rng = random.Random(7)
    log: list[str] = []
    try:
        fleet.start_redis()
        settings = fleet.settings()
        opened(settings).close()  # schema at head before anyone races to create it
        for _ in range(3):
            fleet.start_worker(concurrency=8)
        fleet.start_beat()
        # Every worker is up before the chaos starts: the pause below needs another worker to
        # take over (the replacement started after each kill may still be booting then).
        fleet.wait_ready()
        producers = [
            threading.Thread(
                target=_produce,
                args=(settings, fleet, chats[i::4], turns_each, PACE, expected, sent, lock),
            )
            for i in range(4)
        ]
        for thread in producers:
            thread.start()
        store = opened(settings)
        time.sleep(2)
        paused: set[int] = set()
        in_flight: dict[str, int] = {}
        for round_ in range(3):  # SIGKILL a worker three times, replacing it each time
            victim = rng.choice([w for w in fleet.workers if w.pid not in paused])
            fleet.kill_worker(victim)
            fleet.start_worker(concurrency=8)
            log.append(f"t{round_}: SIGKILL worker {victim.pid}")
            if round_ == 0:
                pid, in_flight = _pause_a_lease_holder(fleet, store, log)
                paused.add(pid)
            if round_ == 1:
                fleet.redis().flushall()
                log.append("FLUSHALL: every queued wake-up is gone")
                with lock:
                    picks = rng.sample(sent, len(sent) // 30)
                log.append(f"re-sent {_resend(settings, picks)} events mid-run")
            time.sleep(1.5)
        for thread in producers:
            thread.join(120)
        picks = rng.sample(sent, len(sent) // 20)  # 5% more re-sent after the fact
        duplicates = _resend(settings, picks)
        log.append(f"re-sent {duplicates} events at the end")
        left = _wait_done(settings, 240)
        verdict = verify(store, expected)
        after = _fences(store, list(in_flight))
        store.close()
        print("\n".join(log))
        print(f"verdict: {verdict}")
        assert left == 0, f"{left} turns never finished"
        assert len(sent) == keys * turns_each
        assert duplicates == len(picks)
        assert verdict.ok, verdict.violations[:10]
        assert verdict.messages == 2 * keys * turns_each
        # At least one session the paused worker was mid-turn on was taken over while it was
        # stopped (checked before SIGCONT), and the checks above show that its late writes
        # there landed nowhere. (Its other sessions it may simply finish once resumed.)
        assert any(after[key] > fence for key, fence in in_flight.items()), (in_flight, after)
    finally:
        fleet.stop()


def _stopped(pid: int, timeout: float = 5.0) -> bool:
    """Wait until every thread of `pid` has stopped. kill() returns before SIGSTOP takes effect:
    a thread running on the other core, or inside a system call, goes on a little longer (a
    probe with a 12-thread Python process at load 6: not all stopped right after kill() in 174
    of 200 tries, up to 94 ms). A lock check made in that time can see a lock free that the
    thread takes an instant later and then holds, stopped: the whole fleet stalls behind it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:  # a thread that just ended
                continue
        if states and all(state in "Tt" for state in states):
            return True
        time.sleep(0.002)
    return False


def _write_lock_free(store: Store, pid: int) -> bool:
    """True if the (just stopped) holder `pid` is between transactions: a holder paused inside
    one would stall others rather than be fenced. SQLite: nobody holds the writers' gate (the
    flock hermes writers queue on) nor SQLite's write lock. PostgreSQL: every connection of
    `pid` is idle — not inside a transaction, and not running a statement (one waiting for a
    lock when the signal came would take it and hold it, stopped)."""
    if store.path is None:
        time.sleep(0.3)  # a statement sent just before the signal finishes on the server
        ports = _tcp_ports(pid)
        if not ports:
            return False
        with store.read() as conn:
            busy = conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(:ports) "
                    "AND state <> 'idle'"
                ),
                {"ports": sorted(ports)},
            ).scalar_one()
        return not busy
    db = store.path
    gate = os.open(f"{db}-writer.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(gate, fcntl.LOCK_UN)
    except BlockingIOError:
        return False
    finally:
        os.close(gate)
    conn = sqlite3.connect(db, timeout=0.5, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def _tcp_ports(pid: int) -> set[int]:
    """The local TCP ports of `pid`'s sockets (its PostgreSQL connections among them)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _held_in_flight(store: Store, pid: int) -> dict[str, int]:
    """Keys whose lease `pid` holds with a turn running under it: key → fence."""
    with store.read() as conn:
        rows = conn.execute(
            text(
                "SELECT r.session_key, r.fence FROM routes r WHERE r.lease_holder LIKE :holder "
                "AND EXISTS (SELECT 1 FROM inbox i WHERE i.session_key = r.session_key "
                "AND i.status = 'running')"
            ),
            {"holder": f"%:{pid}:%"},
        ).all()
    return {str(key): int(fence) for key, fence in rows}


def _fences(store: Store, keys: list[str]) -> dict[str, int]:
    with store.read() as conn:
        return {
            key: int(
                conn.execute(
                    text("SELECT fence FROM routes WHERE session_key = :key"), {"key": key}
                ).scalar_one()
            )
            for key in keys
        }


def _wait_taken_over(store: Store, in_flight: dict[str, int], timeout: float) -> list[str]:
    """The keys whose fence moved past the paused holder's, waiting up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        now = _fences(store, list(in_flight))
        moved = [key for key, fence in in_flight.items() if now[key] > fence]
        if moved or time.monotonic() > deadline:
            return moved
        time.sleep(0.1)


def _pause_a_lease_holder(fleet: Fleet, store: Store, log: list[str]) -> tuple[int, dict[str, int]]:
    """SIGSTOP a worker that holds a session lease, past the lease, then resume it.

    A process frozen inside a write transaction would stall every writer (that is SQLite),
    so the pause is retried until it catches the holder between transactions.
    """
    ours = {proc.pid: proc for proc in fleet.workers}
    # The window opens when a worker first holds a lease (workers starting on a loaded machine
    # may take a while to take their first turn) and lasts 30 s: on an idle machine the fleet
    # keeps up with the producers, and between two turns nobody may hold a lease for a moment.
    deadline = time.monotonic() + 180
    seen = False
    attempts = 0
    while time.monotonic() < deadline:
        holders = [pid for pid in lease_holder_pids(store) if pid in ours]
        if not holders:
            time.sleep(0.02)
            continue
        if not seen:
            seen, deadline = True, time.monotonic() + 30
        victim = ours[holders[attempts % len(holders)]]  # each holder in turn
        attempts += 1
        victim.send_signal(signal.SIGSTOP)
        in_flight = (
            _held_in_flight(store, victim.pid)
            if _stopped(victim.pid) and _write_lock_free(store, victim.pid)
            else {}
        )
        if not in_flight:
            victim.send_signal(signal.SIGCONT)
            time.sleep(0.05)
            continue
        log.append(f"SIGSTOP lease holder {victim.pid} (mid-turn on {len(in_flight)} sessions)")
        stopped_at = time.monotonic()
        time.sleep(LEASE * 2.5)
        # Resume only once another worker has taken over at least one of its sessions, so the
        # resumed holder really is fenced out there (bounded: a takeover needs the lease to
        # expire and a redrive sweep, both a few seconds here, then the wake-up's turn in a
        # queue that may hold thousands of this run's wake-ups on a loaded machine).
        taken_over = _wait_taken_over(store, in_flight, timeout=LEASE * 45)
        assert taken_over, (
            f"no session of the paused holder {victim.pid} was taken over: {in_flight}\n"
            + fleet.diagnose()
        )
        log.append(
            f"{len(taken_over)} of its sessions taken over while it was stopped "
            f"({time.monotonic() - stopped_at:.1f} s after SIGSTOP)"
        )
        victim.send_signal(signal.SIGCONT)
        log.append(f"SIGCONT {victim.pid}")
        return victim.pid, in_flight
    raise AssertionError(
        f"no lease holder caught mid-turn between transactions in {attempts} tries"
        if seen
        else "no worker held a lease to pause"
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_chaos_checker_catches_a_drain_without_the_lease(
    tmp_path: Path, hermes_env: dict[str, str]
) -> None:
    fleet = _fleet(tmp_path, hermes_env, unsafe_worker_command())
    chats = [f"chat{i:03d}" for i in range(40)]
    expected: dict[str, list[str]] = {}
    sent: list[tuple[str, int]] = []
    try:
        fleet.start_redis()
        settings = fleet.settings()
        opened(settings).close()
        for _ in range(2):
            fleet.start_worker(concurrency=8)
        lock = threading.Lock()
        waker = BrokerWaker(broker_client(settings))
        for chat in chats:
            _produce(settings, fleet, [chat], 10, 0.0, expected, sent, lock)
            # A burst sends one wake-up; duplicate it, as a broker redelivering or redrive
            # racing the producer would. Only the lease makes the drains it starts harmless.
            key = next(reversed(expected))
            for _ in range(9):
                waker.drain(key)
        _wait_done(settings, 120)
        store = opened(settings)
        verdict = verify(store, expected)
        store.close()
        print(
            f"unsafe verdict: {len(verdict.violations)} violations, e.g. {verdict.violations[:3]}"
        )
        assert not verdict.ok, "a drain without the lease must break exactly-once or order"
    finally:
        fleet.stop()
