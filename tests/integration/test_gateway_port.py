"""Only receivers of one stack share a port: real `hermes gateway` processes on two HERMES_HOMEs.

Before, the second stack's receiver bound the same port silently (SO_REUSEPORT) and the kernel
handed it some of the first stack's webhooks, which then landed in the wrong state.db."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from shared.db import open_store
from shared.settings import load_settings
from tests.fakes.golden import load
from tests.fakes.server import free_port
from tests.fakes.stack import REDIS_DB, Proc, redis_db_url, wait_for

TG_TOKEN = "123456789:AAFakeTokenForThePortTests"
TG_SECRET = "port-test-secret"


def _home(tmp_path: Path, name: str) -> Path:
    home = tmp_path / name
    home.mkdir()
    return home


def _env(base: dict[str, str], home: Path, port: int, broker: str) -> dict[str, str]:
    return {
        **base,
        "HERMES_HOME": str(home),
        "HERMES_BROKER_URL": broker,
        "HERMES_GATEWAY__PORT": str(port),
        "HERMES_PLATFORMS__TELEGRAM__TOKEN": TG_TOKEN,
        "HERMES_PLATFORMS__TELEGRAM__WEBHOOK_SECRET": TG_SECRET,
        "HERMES_PLATFORMS__TELEGRAM__API_BASE": "http://127.0.0.1:9/bot",  # never called
    }


def _gateway(env: dict[str, str], log: Path) -> Proc:
    return Proc(env, log, "gateway", "telegram", "--webhook", "-l", "INFO")


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _exited(proc: Proc, timeout: float = 30) -> int:
    wait_for(lambda: proc.proc.poll() is not None, timeout=timeout)
    return int(proc.proc.returncode)


def _recorded(env: dict[str, str]) -> int:
    store = open_store(load_settings(env).resolved_database_url)
    try:
        with store.read() as conn:
            return int(conn.execute(text("SELECT count(*) FROM inbox")).scalar_one())
    finally:
        store.close()


def _post_updates(port: int, count: int) -> None:
    payload, _ = load("telegram", "private")
    for n in range(count):  # fresh connections: a second listener would get some of them
        update = json.loads(json.dumps(payload))
        update["update_id"] = 5000 + n
        response = httpx.post(
            f"http://127.0.0.1:{port}/telegram/webhook",
            json=update,
            headers={"X-Telegram-Bot-Api-Secret-Token": TG_SECRET},
            timeout=10,
        )
        assert response.status_code == 200


@pytest.fixture
def broker(redis_url: str) -> str:
    return redis_db_url(redis_url)


def _own_brokers(redis_url: str) -> list[str]:
    """A broker db for each of two stacks (two homes, two databases: two fleets, which never
    share one db — shared/fleet_registry.py), emptied."""
    return [redis_db_url(redis_url, db) for db in (REDIS_DB, REDIS_DB + 1)]


@pytest.mark.timeout(180)
def test_a_second_stack_is_refused_and_every_webhook_lands_in_the_first(
    hermes_env: dict[str, str], tmp_path: Path, broker: str
) -> None:
    port = free_port()
    a_home, b_home = _home(tmp_path, "a"), _home(tmp_path, "b")
    a_env, b_env = _env(hermes_env, a_home, port, broker), _env(hermes_env, b_home, port, broker)
    first = _gateway(a_env, a_home / "gateway.log")
    second = None
    try:
        wait_for(lambda: _healthy(port), timeout=30)
        second = _gateway(b_env, b_home / "gateway.log")
        code = _exited(second)
        assert code == 1, second.output()
        assert second.output().strip().splitlines()[-1] == (
            f"Error: port {port} is in use by another hermes (home {a_home.resolve()})"
        )
        # A receiver of the same stack may join (hermes up runs one per platform).
        sibling = _gateway(a_env, a_home / "sibling.log")
        try:
            wait_for(lambda: "hermes gateway telegram on" in sibling.output(), timeout=30)
            _post_updates(port, 20)
        finally:
            assert sibling.stop() == 0, sibling.output()
    finally:
        if second is not None:
            second.stop()
        assert first.stop() == 0, first.output()
    assert _recorded(a_env) == 20
    assert not (b_home / "state.db").exists() or _recorded(b_env) == 0


@pytest.mark.timeout(180)
def test_two_stacks_starting_at_once_get_one_port_owner(
    hermes_env: dict[str, str], tmp_path: Path, redis_url: str
) -> None:
    for round_ in range(2):
        port = free_port()
        homes = [_home(tmp_path, f"{round_}-{name}") for name in "ab"]
        brokers = _own_brokers(redis_url)
        envs = [
            _env(hermes_env, home, port, broker)
            for home, broker in zip(homes, brokers, strict=True)
        ]
        procs = [_gateway(env, home / "g.log") for env, home in zip(envs, homes, strict=True)]
        try:
            wait_for(lambda procs=procs: any(p.proc.poll() is not None for p in procs), timeout=60)
            lost = [n for n, p in enumerate(procs) if p.proc.poll() is not None]
            assert len(lost) == 1, [p.output() for p in procs]
            loser, winner = procs[lost[0]], procs[1 - lost[0]]
            assert loser.proc.returncode == 1
            assert f"port {port} is in use by another hermes" in loser.output()
            wait_for(lambda port=port: _healthy(port), timeout=30)
            _post_updates(port, 5)
        finally:
            for proc in procs:
                proc.stop()
        assert winner.proc.returncode == 0, winner.output()
        assert _recorded(envs[1 - lost[0]]) == 5


@pytest.mark.timeout(120)
def test_a_program_that_is_not_hermes_keeps_its_port(
    hermes_env: dict[str, str], hermes_home: Path, broker: str
) -> None:
    """Even one that set SO_REUSEPORT too, which the kernel would let us join."""
    port = free_port()
    other = socket.socket()
    other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    other.bind(("127.0.0.1", port))
    other.listen(8)
    proc = _gateway(_env(hermes_env, hermes_home, port, broker), hermes_home / "g.log")
    try:
        assert _exited(proc) == 1, proc.output()
        assert proc.output().strip().splitlines()[-1] == (
            f"Error: port {port} is in use by another program (not a hermes receiver)"
        )
    finally:
        proc.stop()
        other.close()


@pytest.mark.timeout(180)
def test_a_killed_stack_leaves_the_port_to_the_next(
    hermes_env: dict[str, str], tmp_path: Path, redis_url: str
) -> None:
    port = free_port()
    a_home, b_home = _home(tmp_path, "a"), _home(tmp_path, "b")
    a_broker, b_broker = _own_brokers(redis_url)
    first = _gateway(_env(hermes_env, a_home, port, a_broker), a_home / "g.log")
    wait_for(lambda: _healthy(port), timeout=30)
    os.killpg(first.proc.pid, signal.SIGKILL)  # no clean release: its pid stays recorded
    first.proc.wait()
    second = _gateway(_env(hermes_env, b_home, port, b_broker), b_home / "g.log")
    try:
        wait_for(lambda: _healthy(port), timeout=30)
        assert second.proc.poll() is None, second.output()
    finally:
        assert second.stop() == 0


@pytest.mark.timeout(180)
def test_hermes_up_refuses_a_port_another_stack_holds_before_starting_anything(
    hermes_env: dict[str, str], tmp_path: Path, broker: str
) -> None:
    port = free_port()
    a_home, b_home = _home(tmp_path, "a"), _home(tmp_path, "b")
    first = _gateway(_env(hermes_env, a_home, port, broker), a_home / "g.log")
    up = None
    try:
        wait_for(lambda: _healthy(port), timeout=30)
        b_env = {**_env(hermes_env, b_home, port, broker)}
        b_env.pop("HERMES_BROKER_URL")  # hermes up's own embedded broker
        up = Proc(b_env, b_home / "up.log", "up", "-w", "1", "--no-beat")
        assert _exited(up, timeout=60) == 1, up.output()
        assert up.output().strip().splitlines()[-1] == (
            f"hermes up: port {port} is in use by another hermes (home {a_home.resolve()})"
        )
        assert not (b_home / "run" / "redis.sock").exists()
    finally:
        if up is not None:
            up.stop()  # SIGTERM: an up that did start stops everything it started
        assert first.stop() == 0
