"""Real beat on a short schedule, and real Flower reading a drained turn's task by name."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from producers.intake import accept
from shared.db import open_store
from shared.pipeline import cron
from shared.ports import RecordingWaker
from tests.chaos import ROOT, Fleet, env_for, free_port, open_turns, worker_command
from tests.pipeline_helpers import turn


def _fleet(tmp_path: Path, hermes_env: dict[str, str], **extra: str) -> Fleet:
    home = tmp_path / "fleet"
    home.mkdir()
    env = env_for(
        home,
        hermes_env,
        HERMES_PIPELINE__REDRIVE_SECONDS="1",
        HERMES_MAINTENANCE__CRON_SECONDS="1",
        **extra,
    )
    return Fleet(home=home, env=env, worker_script=worker_command())


def _wait(predicate, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.timeout(180)
def test_beat_redrives_a_lost_wake_up_and_runs_a_cron_slot_once(
    tmp_path: Path, hermes_env: dict[str, str]
) -> None:
    fleet = _fleet(tmp_path, hermes_env)
    try:
        fleet.start_redis()
        settings = fleet.settings()
        store = open_store(settings.resolved_database_url)
        with store.write() as conn:  # every minute, created two minutes ago: a slot is due
            job = cron.add_job(
                conn,
                schedule="* * * * *",
                prompt="tick report",
                now=time.time() - 120,
                name="every-minute",
            )
        # a turn whose wake-up is lost (nobody sends it): only the redrive sweep can find it
        accept(store, RecordingWaker(), turn(0, "lost"), settings=settings, clock=time.time)
        fleet.start_worker(concurrency=4)
        fleet.start_beat()
        assert _wait(lambda: open_turns(store) == 0 and _cron_turns(store) >= 1, 60), fleet.logs()[
            -3000:
        ]
        time.sleep(3)  # several more ticks inside the same minute slot
        runs = _cron_runs(store, job.id)
        assert len({slot for slot, _ in runs}) == len(runs)  # never twice for one slot
        assert len(runs) <= 2  # this minute's slot, and at most the next one
        assert _cron_turns(store) == len(runs)
        store.close()
    finally:
        fleet.stop()


def _cron_turns(store) -> int:  # type: ignore[no-untyped-def]
    from sqlalchemy import text

    with store.read() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM inbox WHERE platform = 'cron' AND status = 'done'")
            ).scalar_one()
        )


def _cron_runs(store, job_id: str) -> list[tuple[float, int]]:  # type: ignore[no-untyped-def]
    from sqlalchemy import text

    with store.read() as conn:
        rows = conn.execute(
            text("SELECT slot, turn_id FROM cron_runs WHERE job_id = :j"), {"j": job_id}
        ).all()
    return [(float(r[0]), int(r[1])) for r in rows]


@pytest.mark.timeout(180)
def test_flower_shows_a_drained_turn_by_its_readable_name(
    tmp_path: Path, hermes_env: dict[str, str]
) -> None:
    port = free_port()
    fleet = _fleet(
        tmp_path, hermes_env, HERMES_FLOWER__BASIC_AUTH="ops:s3cret", HERMES_FLOWER__PORT=str(port)
    )
    flower: subprocess.Popen[bytes] | None = None
    try:
        fleet.start_redis()
        settings = fleet.settings()
        store = open_store(settings.resolved_database_url)
        with (fleet.home / "flower.log").open("wb") as log:
            flower = subprocess.Popen(
                [sys.executable, "-m", "producers.cli.main", "flower"],
                env=fleet.process_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        fleet.start_worker(concurrency=2)
        base = f"http://127.0.0.1:{port}"
        assert _wait(lambda: _up(base), 60), (fleet.home / "flower.log").read_text()[-2000:]
        assert httpx.get(f"{base}/api/workers", timeout=5).status_code == 401  # auth required
        from producers.broker import BrokerWaker, broker_client

        waker = BrokerWaker(broker_client(settings))
        deadline = time.monotonic() + 60
        found: list[dict[str, object]] = []
        n = 0
        while time.monotonic() < deadline and not found:
            # Flower learns about tasks from events; keep a turn flowing until it has seen one.
            accept(store, waker, turn(n, "flower"), settings=settings, clock=time.time)
            n += 1
            time.sleep(1)
            tasks = httpx.get(f"{base}/api/tasks", auth=("ops", "s3cret"), timeout=5).json()
            found = [
                t
                for t in tasks.values()
                if t.get("name") == "hermes.turns.drain" and t.get("state") == "SUCCESS"
            ]
        store.close()
        assert found, "Flower never showed a successful hermes.turns.drain task"
        assert found[0]["args"] and "agent:main:cli:dm:flower" in str(found[0]["args"])
    finally:
        if flower is not None:
            flower.terminate()
            flower.wait(15)
        fleet.stop()


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthcheck", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("auth", [":", "ops:", ":secret", "ops:secret,:", " : "])
def test_flower_refuses_empty_credentials_before_it_listens(
    hermes_env: dict[str, str], auth: str
) -> None:
    port = free_port()
    env = {**hermes_env, "HERMES_FLOWER__BASIC_AUTH": auth, "HERMES_FLOWER__PORT": str(port)}
    done = subprocess.run(
        [sys.executable, "-m", "producers.cli.main", "flower", "--address", "0.0.0.0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "flower.basic_auth must look like user:password (both non-empty" in done.stderr
