"""Several `hermes beat` on one fleet: exactly one schedules, a standby takes over when it dies
or stalls, a wiped broker does not stop the schedule, and two fleets share one Redis server on
dbs of their own. Real beat processes (one HERMES_HOME each, as on separate hosts), a private
Redis; a beat's sends are told apart by the `origin` header Celery writes into every message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.chaos import ROOT, Fleet, env_for

QUEUE = "hermes.maintenance"
# The lock's time to live (20 s) plus one look (5 s), with room for a loaded machine.
TAKEOVER_WAIT = 60.0
# A beat's first send: its start (a Python process importing Celery), its lock, its first slot.
# The suite runs four tests at once on two cores, where that has taken over 15 s.
FIRST_SEND_WAIT = 90.0


class Beats:
    """Beat processes of one fleet (one database) on a private Redis, and what they send."""

    def __init__(self, tmp: Path, hermes_env: dict[str, str], redis: Fleet, db: int = 0) -> None:
        self.tmp = tmp
        self.redis = redis
        self.db = db
        self.broker_url = f"redis://127.0.0.1:{redis.port}/{db}"
        database = hermes_env.get("HERMES_DATABASE_URL") or f"sqlite:///{tmp / 'state.db'}"
        self.base = {**hermes_env, "HERMES_DATABASE_URL": database}
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, host: str) -> subprocess.Popen[bytes]:
        home = self.tmp / host
        home.mkdir()
        env = env_for(
            home,
            self.base,
            HERMES_DATABASE_URL=self.base["HERMES_DATABASE_URL"],
            HERMES_BROKER_URL=self.broker_url,
            HERMES_PIPELINE__REDRIVE_SECONDS="1",
            PYTHONPATH=str(ROOT),
        )
        with (home / "beat.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "producers.cli.main", "beat", "-l", "INFO"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        self.procs.append(proc)
        return proc

    def senders(self) -> list[int]:
        """The pid of the beat behind each scheduled message sent since the last call."""
        client = redis.Redis(port=self.redis.port, db=self.db)
        try:
            raw = client.lrange(QUEUE, 0, -1)
            client.delete(QUEUE)
        finally:
            client.close()
        origins = [json.loads(message)["headers"]["origin"] for message in reversed(raw)]
        return [int(origin.removeprefix("gen").split("@")[0]) for origin in origins]

    def wait_for_sends(self, timeout: float, *, by: int | None = None) -> list[int]:
        """Messages sent (all of them) until one comes from `by` (or any, when None)."""
        seen: list[int] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen += self.senders()
            if seen and (by is None or by in seen):
                return seen
            time.sleep(0.5)
        raise AssertionError(f"no scheduled message from {by or 'any beat'}:\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-2000:] for p in self.tmp.glob("*/beat.log"))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def redis_box(tmp_path: Path) -> Iterator[Fleet]:
    box = tmp_path / "redis"
    box.mkdir()
    fleet = Fleet(home=box, env={}, worker_script=[])
    fleet.start_redis()
    yield fleet
    if fleet.redis_proc is not None:
        fleet.redis_proc.terminate()
        fleet.redis_proc.wait()


@pytest.fixture
def beats(tmp_path: Path, hermes_env: dict[str, str], redis_box: Fleet) -> Iterator[Beats]:
    group = Beats(tmp_path, hermes_env, redis_box)
    yield group
    group.stop()


def _holder(beats: Beats) -> int:
    """The one beat that schedules, after a few seconds of both running."""
    first = beats.wait_for_sends(FIRST_SEND_WAIT)
    time.sleep(4)
    sent = first + beats.senders()
    assert len(set(sent)) == 1, f"two beats scheduled at once: {sent}\n{beats.logs()}"
    return sent[0]


@pytest.mark.timeout(240)
def test_one_of_two_beats_schedules_and_the_standby_takes_over_when_it_dies(
    beats: Beats,
) -> None:
    a, b = beats.start("host-a"), beats.start("host-b")
    holder = _holder(beats)
    standby = b if holder == a.pid else a
    assert holder in {a.pid, b.pid}

    os.kill(holder, signal.SIGKILL)  # no release: only the lock's time to live frees it
    beats.senders()
    sent = beats.wait_for_sends(TAKEOVER_WAIT, by=standby.pid)
    time.sleep(3)
    sent += beats.senders()
    assert set(sent[sent.index(standby.pid) :]) == {standby.pid}
    assert (
        "standing by"
        in (beats.tmp / ("host-b" if standby is b else "host-a") / "beat.log").read_text()
    )


@pytest.mark.timeout(240)
def test_a_stalled_holder_stands_by_when_it_runs_again(beats: Beats) -> None:
    a, b = beats.start("host-a"), beats.start("host-b")
    holder = _holder(beats)
    standby = b if holder == a.pid else a

    os.kill(holder, signal.SIGSTOP)  # paused past the lock's time to live, as if cut off
    beats.wait_for_sends(TAKEOVER_WAIT, by=standby.pid)
    os.kill(holder, signal.SIGCONT)
    beats.senders()
    time.sleep(8)  # more than one look of the old holder
    assert set(beats.senders()) == {standby.pid}, beats.logs()


@pytest.mark.timeout(180)
def test_a_wiped_broker_does_not_stop_the_schedule(beats: Beats, redis_box: Fleet) -> None:
    beats.start("host-a")
    beats.wait_for_sends(FIRST_SEND_WAIT)
    redis_box.redis().flushall()  # the lock and every queued message are gone
    beats.senders()
    assert beats.wait_for_sends(FIRST_SEND_WAIT), beats.logs()


@pytest.mark.both_databases  # the fleet id each database holds names the lock and the db's fleet
@pytest.mark.timeout(180)
def test_two_fleets_on_one_redis_each_schedule_on_a_db_of_their_own(
    beats: Beats, tmp_path: Path, hermes_env: dict[str, str], redis_box: Fleet
) -> None:
    """One Redis server, two fleets: each on its own db (its wake-ups are its own); the other
    fleet's beat pointed at this fleet's db refuses at start, naming both fleets."""
    other_dir = tmp_path / "other-fleet"
    other_dir.mkdir()
    other_db = f"sqlite:///{other_dir / 'state.db'}"
    intruder = Beats(other_dir, {**hermes_env, "HERMES_DATABASE_URL": other_db}, redis_box)
    other = Beats(other_dir, {**hermes_env, "HERMES_DATABASE_URL": other_db}, redis_box, db=1)
    try:
        mine = beats.start("host-a")
        beats.wait_for_sends(FIRST_SEND_WAIT, by=mine.pid)
        refused = intruder.start("host-b")
        assert refused.wait(timeout=60) == 1, intruder.logs()
        assert "belongs to fleet" in intruder.logs() and other_db in intruder.logs()
        theirs = other.start("host-c")
        assert other.wait_for_sends(FIRST_SEND_WAIT, by=theirs.pid), other.logs()
        assert set(beats.senders()) == {mine.pid}, beats.logs()
    finally:
        intruder.stop()
        other.stop()
