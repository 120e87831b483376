"""`hermes up` on a bare machine: embedded Redis, a worker, beat; a turn in, a reply out; Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from producers.broker import BrokerWaker, broker_client
from producers.intake import accept
from shared.db import open_store
from shared.pipeline import outbox
from shared.settings import load_settings
from tests.pipeline_helpers import turn

ROOT = Path(__file__).resolve().parents[2]


def _hermes(
    env: dict[str, str], *args: str, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "producers.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.timeout(180)
def test_up_runs_a_turn_end_to_end_and_stops_cleanly(
    hermes_env: dict[str, str], hermes_home: Path
) -> None:
    up = subprocess.Popen(
        [sys.executable, "-m", "producers.cli.main", "up", "-w", "1", "-c", "4"],
        env=hermes_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 60
        report: dict[str, object] = {}
        while time.monotonic() < deadline:
            result = _hermes(hermes_env, "status", "--json")
            report = json.loads(result.stdout) if result.returncode == 0 else {}
            if report.get("workers"):
                break
            time.sleep(0.5)
        assert report.get("workers"), f"no worker came up: {report}"
        assert (hermes_home / "run" / "redis.sock").exists()

        second = _hermes(hermes_env, "up")
        assert second.returncode == 1 and "already running" in second.stderr

        settings = load_settings(hermes_env)
        store = open_store(settings.resolved_database_url)
        waker = BrokerWaker(broker_client(settings))
        accepted = accept(store, waker, turn(1, "term"), settings=settings, clock=time.time)
        assert accepted.woken
        sent = []
        while time.monotonic() < deadline and not sent:
            with store.read() as conn:
                sent = [r for r in outbox.for_turn(conn, accepted.turn_id) if r.status == "sent"]
            time.sleep(0.1)
        store.close()
        assert sent and "offline model" in sent[0].text
    finally:
        up.send_signal(signal.SIGINT)
        output, _ = up.communicate(timeout=60)
    assert up.returncode == 0, output
    assert "Stopped." in output
    pids = [
        int(line.split("│")[2].strip())
        for line in output.splitlines()
        if line.startswith(("│ worker", "│ beat", "│ broker"))
    ]
    assert len(pids) == 3, output
    assert not [pid for pid in pids if _alive(pid)]
    assert not (hermes_home / "run" / "redis.sock").exists()


@pytest.mark.timeout(120)
def test_up_says_why_a_half_configured_platform_has_no_receiver(
    hermes_env: dict[str, str],
) -> None:
    """A Slack token without its signing secret: one clear line, no receiver restart loop."""
    env = {**hermes_env, "HERMES_PLATFORMS__SLACK__TOKEN": "xoxb-up-only-a-token"}
    up = subprocess.Popen(
        [sys.executable, "-m", "producers.cli.main", "up", "-w", "1", "-c", "1", "--no-beat"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            result = _hermes(env, "status", "--json")
            if result.returncode == 0 and json.loads(result.stdout).get("workers"):
                break
            time.sleep(0.5)
        time.sleep(3)  # a receiver that exits at once would have been restarted by now
    finally:
        up.send_signal(signal.SIGINT)
        output, _ = up.communicate(timeout=60)
    assert up.returncode == 0, output
    lines = [line for line in output.splitlines() if "slack" in line]
    assert lines == [
        "slack receiver not started: the Slack Events API needs platforms.slack.signing_secret"
    ], output
    assert "restarting" not in output


def test_status_says_when_nothing_is_running(hermes_env: dict[str, str]) -> None:
    result = _hermes(hermes_env, "status")
    assert result.returncode == 0
    assert "not reachable" in result.stdout
    assert "Waiting turns: 0" in result.stdout
