"""Auto-prune when a chat or a receiver starts and the prune is due (the last run is kept in
state.db), as a request to a worker: the start never waits for it, and a prune that is not due
is not asked for. Real processes on a real Redis; the worker that answers the chat does not
consume the maintenance queue, so the prune request is seen waiting there while the reply has
already come."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from shared.db import Store, meta, open_store
from shared.maintenance import PRUNE_LAST_RUN
from shared.settings import load_settings
from shared.store import sessions as session_rows
from shared.store.messages import append_message
from shared.tasknames import MAINTENANCE_QUEUE, PRUNE
from tests.fakes.server import free_port
from tests.fakes.stack import ROOT, Proc, redis_db_url, start_gateway, wait_for

DAY = 86_400.0
OLD = "20250101_000000_aaaaaa"
RECENT = "20250101_000000_bbbbbb"


def _seed(store: Store, now: float) -> None:
    """One session ended 100 days ago (past the 90-day retention), one ended 10 days ago."""
    with store.write() as conn:
        for session_id in (OLD, RECENT):
            session_rows.create_session(
                conn, session_id=session_id, source="cli", now=now - 200 * DAY
            )
            append_message(conn, session_id, "user", "old words", now=now - 200 * DAY)
        session_rows.end_session(conn, OLD, "cli_close", now - 100 * DAY)
        session_rows.end_session(conn, RECENT, "cli_close", now - 10 * DAY)


def _prune_requests(broker: str) -> int:
    client = redis.Redis.from_url(broker)
    try:
        waiting = client.lrange(MAINTENANCE_QUEUE, 0, -1)
    finally:
        client.close()
    return sum(1 for raw in waiting if json.loads(raw)["headers"]["task"] == PRUNE)


def _present(store: Store, session_id: str) -> bool:
    with store.read() as conn:
        return session_rows.get_session(conn, session_id) is not None


def _last_run(store: Store) -> str | None:
    with store.read() as conn:
        return meta.get_meta(conn, PRUNE_LAST_RUN)


def _chat(env: dict[str, str], text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "producers.cli.main", "chat", "-q", text, "--timeout", "60"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


@pytest.fixture
def prune_env(hermes_env: dict[str, str], redis_url: str) -> dict[str, str]:
    return {
        **hermes_env,
        "HERMES_BROKER_URL": redis_db_url(redis_url, 11),
        "HERMES_SESSIONS__AUTO_PRUNE": "true",
        "HERMES_MAINTENANCE__VACUUM_PAUSE_MS": "0",
    }


@pytest.mark.timeout(240)
def test_a_due_prune_is_asked_for_at_chat_start_and_the_reply_does_not_wait_for_it(
    prune_env: dict[str, str], hermes_home: Path
) -> None:
    store = open_store(load_settings(prune_env).resolved_database_url)
    _seed(store, time.time())
    broker = prune_env["HERMES_BROKER_URL"]
    replies = Proc(
        prune_env, hermes_home / "turns.log", "worker", "-c", "2", "-n", "turns@%h",
        "-Q", "hermes.turns,hermes.delivery", "-l", "INFO",
    )  # fmt: skip
    maintenance = None
    try:
        first = _chat(prune_env, "hello")
        assert first.returncode == 0, first.stderr
        assert first.stdout.endswith("echo: hello\n")
        # The reply came while the prune request still waits for a worker: nothing pruned yet.
        assert _prune_requests(broker) == 1
        assert _present(store, OLD)
        maintenance = Proc(
            prune_env, hermes_home / "maintenance.log", "worker", "-c", "1", "-n", "mnt@%h",
            "-Q", "hermes.maintenance", "-l", "INFO",
        )  # fmt: skip
        wait_for(lambda: _last_run(store) is not None, timeout=60)
        assert not _present(store, OLD)
        assert _present(store, RECENT)
        wait_for(lambda: _prune_requests(broker) == 0, timeout=30)
        assert maintenance.stop() == 0

        # The last prune is minutes old (sessions.min_interval_hours is 24): not due, not asked.
        second = _chat(prune_env, "again")
        assert second.returncode == 0, second.stderr
        assert _prune_requests(broker) == 0
    finally:
        replies.stop()
        if maintenance is not None:
            maintenance.stop()
        store.close()


def test_a_chat_does_not_ask_when_auto_prune_is_off(
    prune_env: dict[str, str], hermes_home: Path
) -> None:
    env = {**prune_env, "HERMES_SESSIONS__AUTO_PRUNE": "false"}
    store = open_store(load_settings(env).resolved_database_url)
    _seed(store, time.time())
    replies = Proc(
        env, hermes_home / "turns.log", "worker", "-c", "2", "-n", "turns@%h",
        "-Q", "hermes.turns,hermes.delivery", "-l", "INFO",
    )  # fmt: skip
    try:
        result = _chat(env, "hello")
        assert result.returncode == 0, result.stderr
        assert _prune_requests(env["HERMES_BROKER_URL"]) == 0
    finally:
        replies.stop()
        store.close()


@pytest.mark.timeout(120)
def test_a_receiver_start_asks_for_a_due_prune(
    prune_env: dict[str, str], hermes_home: Path
) -> None:
    port = free_port()
    env = {
        **prune_env,
        "HERMES_GATEWAY__PORT": str(port),
        "HERMES_PLATFORMS__TELEGRAM__TOKEN": "123456789:AAFakeTokenForPruneAtStart",
        "HERMES_PLATFORMS__TELEGRAM__WEBHOOK_SECRET": "prune-at-start",
    }
    store = open_store(load_settings(env).resolved_database_url)
    now = time.time()
    with store.write() as conn:  # the last prune is 25 hours old: due again
        meta.set_meta(conn, PRUNE_LAST_RUN, repr(now - 25 * 3600))
    store.close()
    gateway = start_gateway(env, hermes_home, "telegram", port)
    try:
        wait_for(lambda: _prune_requests(env["HERMES_BROKER_URL"]) == 1, timeout=30)
    finally:
        assert gateway.stop() == 0
