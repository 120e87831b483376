"""`hermes up` with Matrix configured starts its receiver (from the platform registry): a
message in a room of the fake homeserver is answered through the fleet's own worker."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from producers.cli.up import receivers
from shared.settings import load_settings
from tests.fakes.matrix_api import BOT, FakeMatrix
from tests.fakes.server import free_port
from tests.fakes.stack import wait_for

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "syt_matrix_up_token_secret"
ROOM = "!dm:fake.test"


def matrix_env(hermes_env: dict[str, str], homeserver: str) -> dict[str, str]:
    return {
        **hermes_env,
        "HERMES_PLATFORMS__MATRIX__TOKEN": TOKEN,
        "HERMES_PLATFORMS__MATRIX__HOMESERVER": homeserver,
        "HERMES_PLATFORMS__MATRIX__USER_ID": BOT,
        "HERMES_PLATFORMS__MATRIX__SYNC_TIMEOUT_MS": "500",
    }


def test_up_picks_the_matrix_receiver_only_when_configured(hermes_env: dict[str, str]) -> None:
    assert receivers(load_settings(hermes_env)) == ([], {})
    configured = load_settings(matrix_env(hermes_env, "http://127.0.0.1:9"))
    assert receivers(configured) == (["matrix"], {})


@pytest.mark.timeout(180)
def test_up_syncs_matrix_and_replies_with_room_send(hermes_env: dict[str, str]) -> None:
    port = free_port()
    with FakeMatrix(TOKEN) as fake:
        fake.room(ROOM, 2)
        env = {**matrix_env(hermes_env, fake.base), "HERMES_GATEWAY__PORT": str(port)}
        up = subprocess.Popen(
            [sys.executable, "-m", "producers.cli.main", "up", "-w", "1", "-c", "2", "--no-beat"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        try:

            def receiving() -> bool:
                assert up.poll() is None, "hermes up exited"
                return len(fake.syncs) >= 2  # the first sync (the backlog) is behind it

            wait_for(receiving, timeout=90, every=0.25)
            fake.message(ROOM, "hello via hermes up")
            wait_for(lambda: fake.texts(ROOM), timeout=90)
            sent = fake.texts(ROOM)
        finally:
            up.send_signal(signal.SIGINT)
            output, _ = up.communicate(timeout=60)
    assert up.returncode == 0, output
    assert len(sent) == 1 and sent[0].endswith("echo: hello via hermes up")
    assert "matrix" in output and TOKEN not in output
