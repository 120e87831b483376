"""`hermes up` with SMS configured starts its receiver (derived from the platform registry):
a signed Twilio post to it is answered through the fleet's own worker, by the REST API."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest

from producers.cli.up import receivers
from shared.settings import load_settings
from tests.fakes.golden import load
from tests.fakes.server import free_port
from tests.fakes.stack import wait_for
from tests.fakes.twilio_api import ACCOUNT, NUMBER, TOKEN, FakeTwilio

ROOT = Path(__file__).resolve().parents[2]
USER = "+14155550123"


def sms_env(hermes_env: dict[str, str], api: str) -> dict[str, str]:
    return {
        **hermes_env,
        "HERMES_PLATFORMS__SMS__TOKEN": TOKEN,
        "HERMES_PLATFORMS__SMS__ACCOUNT_SID": ACCOUNT,
        "HERMES_PLATFORMS__SMS__FROM_NUMBER": NUMBER,
        "HERMES_PLATFORMS__SMS__API_BASE": api,
    }


def test_up_picks_the_sms_receiver_only_when_configured(hermes_env: dict[str, str]) -> None:
    assert receivers(load_settings(hermes_env)) == ([], {})
    configured = load_settings(sms_env(hermes_env, "http://127.0.0.1:9"))
    assert receivers(configured) == (["sms"], {})
    disabled = {**sms_env(hermes_env, "http://127.0.0.1:9"), "HERMES_PLATFORMS__SMS__ENABLED": "0"}
    assert receivers(load_settings(disabled)) == ([], {})


@pytest.mark.timeout(180)
def test_up_serves_sms_and_replies_through_twilio(hermes_env: dict[str, str]) -> None:
    port = free_port()
    with FakeTwilio() as twilio:
        env = {**sms_env(hermes_env, twilio.api_base), "HERMES_GATEWAY__PORT": str(port)}
        up = subprocess.Popen(
            [sys.executable, "-m", "producers.cli.main", "up", "-w", "1", "-c", "2", "--no-beat"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        url = f"http://127.0.0.1:{port}/sms/twilio"
        try:

            def receiving() -> bool:
                assert up.poll() is None, "hermes up exited"
                try:
                    health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                except httpx.HTTPError:
                    return False
                return health.status_code == 200 and health.json()["receivers"] == ["sms"]

            wait_for(receiving, timeout=90, every=0.25)
            payload, _ = load("sms", "dm")
            fields = {**payload, "Body": "hello via hermes up"}
            answer = httpx.post(
                url,
                content=urlencode(fields),
                headers={
                    "Content-Type": "application/x-www-form-urlencoded",
                    "X-Twilio-Signature": twilio.sign(url, fields),
                },
                timeout=10,
            )
            assert answer.status_code == 200 and answer.text.endswith("<Response />")
            wait_for(lambda: twilio.sent(USER), timeout=90)
            sent = twilio.sent(USER)
        finally:
            up.send_signal(signal.SIGINT)
            output, _ = up.communicate(timeout=60)
    assert up.returncode == 0, output
    assert len(sent) == 1 and sent[0]["Body"].endswith("echo: hello via hermes up")
    assert sent[0]["From"] == NUMBER
    assert "sms" in output and TOKEN not in output
