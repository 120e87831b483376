"""`hermes up` with Signal configured starts its receiver (derived from the platform registry):
it polls the fake signal-cli-rest-api daemon and the fleet's own worker answers by /v2/send."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from producers.cli.up import receivers
from shared.settings import load_settings
from tests.fakes.server import free_port
from tests.fakes.signal_api import ACCOUNT, FakeSignalDaemon, envelope
from tests.fakes.stack import wait_for

ROOT = Path(__file__).resolve().parents[2]
USER = "+15557770001"


def signal_env(hermes_env: dict[str, str], api: str) -> dict[str, str]:
    return {
        **hermes_env,
        "HERMES_PLATFORMS__SIGNAL__TOKEN": ACCOUNT,
        "HERMES_PLATFORMS__SIGNAL__API_BASE": api,
        "HERMES_PLATFORMS__SIGNAL__POLL_TIMEOUT": "1",
    }


def test_up_picks_the_signal_receiver_only_when_configured(hermes_env: dict[str, str]) -> None:
    assert receivers(load_settings(hermes_env)) == ([], {})
    configured = load_settings(signal_env(hermes_env, "http://127.0.0.1:9"))
    assert receivers(configured) == (["signal"], {})
    off = {**signal_env(hermes_env, "http://127.0.0.1:9"), "HERMES_PLATFORMS__SIGNAL__ENABLED": "0"}
    assert receivers(load_settings(off)) == ([], {})


@pytest.mark.timeout(180)
def test_up_polls_signal_and_replies_through_the_daemon(hermes_env: dict[str, str]) -> None:
    port = free_port()
    with FakeSignalDaemon() as daemon:
        env = {**signal_env(hermes_env, daemon.api_base), "HERMES_GATEWAY__PORT": str(port)}
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
                try:
                    health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                except httpx.HTTPError:
                    return False
                # /healthz lists routes; Signal has none, its receiver is the polling loop
                return health.status_code == 200 and bool(daemon.requests)

            wait_for(receiving, timeout=90, every=0.25)
            daemon.deliver(envelope("hello via hermes up", timestamp=1_700_000_000_100))
            wait_for(lambda: daemon.sent(USER), timeout=90)
            sent = daemon.sent(USER)
        finally:
            up.send_signal(signal.SIGINT)
            output, _ = up.communicate(timeout=60)
    assert up.returncode == 0, output
    assert len(sent) == 1 and sent[0]["message"].endswith("echo: hello via hermes up")
    assert "signal" in output and ACCOUNT not in output
