"""The fleet's identity across processes: a worker, beat, receiver or `hermes up` whose database
and broker belong to different fleets refuses at start with one line naming both; a matching
one starts and shows in `hermes status`, and leaves it when killed (its heartbeat's time to
live runs out); a terminal on the fleet's broker but a local SQLite file is refused instead of
waiting for a reply no worker can see. Real `hermes` processes, the test Redis, SQLite and
PostgreSQL for the database's fleet id."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from shared.db import Store
from shared.fleet_registry import FLEET_ID_KEY
from shared.pipeline import inbox
from shared.settings import load_settings
from shared.settings_report import masked_url
from shared.store.fleet import fleet_id
from tests.fakes.server import free_port
from tests.fakes.stack import ROOT, Proc, redis_db_url, wait_for

pytestmark = pytest.mark.both_databases

FLEET_DB = 14  # this module's db on the test Redis (flushed per test)
OTHER_FLEET = "0123456789abcdef0123456789abcdef"
PRESENCE_SECONDS = "2"  # heartbeats every ~0.7 s; a killed process is gone within 2 s


def _hermes(
    env: dict[str, str], *args: str, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "producers.cli.main", *args],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.fixture
def broker(redis_url: str) -> str:
    return redis_db_url(redis_url, FLEET_DB)


@pytest.fixture
def fleet_env(hermes_env: dict[str, str], broker: str) -> dict[str, str]:
    return {
        **hermes_env,
        "HERMES_BROKER_URL": broker,
        "HERMES_FLEET__PRESENCE_SECONDS": PRESENCE_SECONDS,
    }


def _broker_fleet(broker: str) -> str | None:
    client = redis.Redis.from_url(broker, decode_responses=True)
    try:
        found = client.get(FLEET_ID_KEY)
    finally:
        client.close()
    return str(found) if found is not None else None


def _status(env: dict[str, str]) -> dict[str, Any]:
    result = _hermes(env, "status", "--json")
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


ROLES = {
    "worker": ("worker", "-c", "2"),
    "beat": ("beat",),
    "gateway": ("gateway", "telegram"),
    "up": ("up", "--workers", "1"),
}


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_process_on_another_fleets_broker_refuses_naming_both(
    fleet_env: dict[str, str], store: Store, broker: str, role: str
) -> None:
    ours = fleet_id(store)
    client = redis.Redis.from_url(broker)
    client.set(FLEET_ID_KEY, OTHER_FLEET)
    client.close()
    env = {
        **fleet_env,
        "HERMES_GATEWAY__PORT": str(free_port()),
        "HERMES_PLATFORMS__TELEGRAM__TOKEN": "123456789:AAFakeTokenForFleetTests",
        "HERMES_PLATFORMS__TELEGRAM__API_BASE": "http://127.0.0.1:9/bot",  # never reached
    }
    settings = load_settings(env)
    result = _hermes(env, *ROLES[role], timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert f"database {masked_url(settings.resolved_database_url)} belongs to fleet {ours}" in line
    assert f"broker {broker} belongs to fleet {OTHER_FLEET}" in line
    assert _broker_fleet(broker) == OTHER_FLEET  # nothing changed: the broker keeps its fleet
    assert _status(env)["fleet"]["processes"] == []  # and nothing registered itself


def test_matching_workers_start_show_in_status_and_a_killed_one_drops_out(
    fleet_env: dict[str, str], store: Store, broker: str, tmp_path: Path
) -> None:
    ours = fleet_id(store)
    workers = [
        Proc(fleet_env, tmp_path / f"worker{n}.log", "worker", "-c", "2", "-n", f"w{n}@%h")
        for n in (1, 2)
    ]
    try:

        def listed() -> list[dict[str, Any]]:
            rows: list[dict[str, Any]] = _status(fleet_env)["fleet"]["processes"]
            for proc in workers:
                assert proc.proc.poll() is None, proc.output()
            return rows

        pids = {proc.proc.pid for proc in workers}
        rows = wait_for(lambda: len(listed()) == 2 and listed(), timeout=60)
        assert isinstance(rows, list)
        assert {row["pid"] for row in rows} == pids
        assert {row["role"] for row in rows} == {"worker"}
        assert all(row["fleet"] == ours and row["version"] for row in rows)
        assert _broker_fleet(broker) == ours  # the first worker published the database's id

        report = _status(fleet_env)
        assert report["fleet"]["id"] == ours and report["fleet"]["matches"] is True
        assert len(report["fleet"]["hosts"]) == 1
        text = _hermes(fleet_env, "status").stdout
        assert f"Fleet:         {ours}" in text and "Processes:     2" in text
        assert "Waiting turns:" in text  # the existing lines stay

        killed, alive = workers
        os.killpg(killed.proc.pid, signal.SIGKILL)  # no goodbye: only the TTL removes it
        killed.proc.wait()
        workers.remove(killed)
        started = time.monotonic()
        wait_for(lambda: [row["pid"] for row in listed()] == [alive.proc.pid], timeout=30)
        assert time.monotonic() - started < 15

        # A broker that lost its data learns the fleet id again from the next heartbeat.
        client = redis.Redis.from_url(broker)
        client.delete(FLEET_ID_KEY)
        client.close()
        wait_for(lambda: _broker_fleet(broker) == ours, timeout=15)

        assert alive.stop() == 0
        workers.remove(alive)
        assert _status(fleet_env)["fleet"]["processes"] == []  # a clean stop leaves at once
    finally:
        for proc in workers:
            proc.stop()


def test_a_client_on_the_fleets_broker_with_a_local_database_is_refused(
    fleet_env: dict[str, str], store: Store, broker: str, hermes_home: Path, tmp_path: Path
) -> None:
    """The issue's case: HERMES_BROKER_URL set, HERMES_DATABASE_URL forgotten — the terminal
    would write its turn to a local state.db the fleet's workers never see, then time out."""
    ours = fleet_id(store)
    worker = Proc(fleet_env, tmp_path / "worker.log", "worker", "-c", "2")
    try:
        wait_for(lambda: _broker_fleet(broker) == ours, timeout=60)
        laptop = tmp_path / "laptop"
        laptop.mkdir()
        client_env = {
            **{k: v for k, v in fleet_env.items() if k != "HERMES_DATABASE_URL"},
            "HERMES_HOME": str(laptop),
        }
        started = time.monotonic()
        result = _hermes(client_env, "chat", "-q", "hello fleet", "--timeout", "60")
        assert result.returncode == 1, result.stdout + result.stderr
        assert time.monotonic() - started < 30  # refused at start, not after the timeout
        assert result.stdout == ""
        local = f"sqlite:///{laptop / 'state.db'}"
        assert f"hermes: database {local} belongs to fleet " in result.stderr
        assert f"broker {broker} belongs to fleet {ours}" in result.stderr
        with store.read() as conn:
            assert inbox.summary(conn, time.time()).waiting == 0

        # The same client pointed at the fleet's database gets its reply.
        database = fleet_env.get("HERMES_DATABASE_URL") or f"sqlite:///{hermes_home / 'state.db'}"
        result = _hermes(
            {**client_env, "HERMES_DATABASE_URL": database},
            "chat", "-q", "hello fleet", "--timeout", "60",
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr + worker.output()
        assert "hello fleet" in result.stdout
    finally:
        worker.stop()


@pytest.mark.timeout(180)
def test_hermes_up_with_no_broker_configured_shows_its_processes_in_the_fleet(
    hermes_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    """Zero config: the private Redis under HERMES_HOME gets the database's fleet id, and
    `hermes up`, its worker and its beat each show in `hermes status`."""
    env = {**hermes_env, "HERMES_FLEET__PRESENCE_SECONDS": PRESENCE_SECONDS}
    up = Proc(env, tmp_path / "up.log", "up", "--workers", "1")
    try:

        def roles() -> list[str]:
            assert up.proc.poll() is None, up.output()
            return sorted(row["role"] for row in _status(env)["fleet"]["processes"])

        wait_for(lambda: roles() == ["beat", "up", "worker"], timeout=90)
        fleet = _status(env)["fleet"]
        assert fleet["id"] == fleet_id(store) and fleet["matches"] is True
        assert next(r for r in fleet["processes"] if r["role"] == "up")["pid"] == up.proc.pid
    finally:
        assert up.stop() == 0, up.output()
    assert _status(env)["fleet"]["processes"] == []  # its broker is gone with it


@pytest.mark.timeout(120)
def test_a_receiver_shows_in_the_fleet_and_leaves_it_when_stopped(
    fleet_env: dict[str, str], store: Store, broker: str, tmp_path: Path
) -> None:
    env = {
        **fleet_env,
        "HERMES_GATEWAY__PORT": str(free_port()),
        "HERMES_PLATFORMS__TELEGRAM__TOKEN": "123456789:AAFakeTokenForFleetTests",
        "HERMES_PLATFORMS__TELEGRAM__WEBHOOK_SECRET": "fleet-test-secret",
        "HERMES_PLATFORMS__TELEGRAM__API_BASE": "http://127.0.0.1:9/bot",  # never called
    }
    receiver = Proc(env, tmp_path / "gateway.log", "gateway", "telegram", "--webhook")
    try:

        def rows() -> list[dict[str, Any]]:
            assert receiver.proc.poll() is None, receiver.output()
            found: list[dict[str, Any]] = _status(env)["fleet"]["processes"]
            return found

        wait_for(lambda: [r["role"] for r in rows()] == ["gateway telegram"], timeout=60)
        assert rows()[0]["pid"] == receiver.proc.pid
        assert _broker_fleet(broker) == fleet_id(store)
    finally:
        assert receiver.stop() == 0, receiver.output()
    assert _status(env)["fleet"]["processes"] == []
