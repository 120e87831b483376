"""`hermes up` starts the WhatsApp receiver when it is configured (derived from the registry),
and says why not when it is half configured; the receiver it starts answers Meta's handshake
and a signed message end to end (embedded Redis, a worker, the fake Graph API)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from producers.cli.up import receivers
from producers.whatsapp.receiver import sign
from shared.settings import load_settings
from tests.fakes.golden import load
from tests.fakes.graph_api import FakeGraph
from tests.fakes.server import free_port
from tests.fakes.stack import wait_for

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "EAAGwhatsappUpTokenSecret"
APP_SECRET = "whatsapp-up-app-secret"
VERIFY = "whatsapp-up-verify"
PHONE = "106540352242922"
USER = "16505551234"


def _env(hermes_env: dict[str, str], api_base: str = "http://127.0.0.1:9/v23.0") -> dict[str, str]:
    return {
        **hermes_env,
        "HERMES_PLATFORMS__WHATSAPP__TOKEN": TOKEN,
        "HERMES_PLATFORMS__WHATSAPP__APP_SECRET": APP_SECRET,
        "HERMES_PLATFORMS__WHATSAPP__VERIFY_TOKEN": VERIFY,
        "HERMES_PLATFORMS__WHATSAPP__PHONE_NUMBER_ID": PHONE,
        "HERMES_PLATFORMS__WHATSAPP__API_BASE": api_base,
    }


def test_up_picks_the_whatsapp_receiver_only_when_it_can_start(
    hermes_env: dict[str, str],
) -> None:
    assert receivers(load_settings(_env(hermes_env))) == (["whatsapp"], {})
    half = {**_env(hermes_env), "HERMES_PLATFORMS__WHATSAPP__APP_SECRET": ""}
    half["HERMES_PLATFORMS__WHATSAPP__VERIFY_TOKEN"] = ""
    started, skipped = receivers(load_settings(half))
    assert started == []
    assert skipped == {
        "whatsapp": "the WhatsApp webhook needs platforms.whatsapp.app_secret, "
        "platforms.whatsapp.verify_token"
    }
    off = {**_env(hermes_env), "HERMES_PLATFORMS__WHATSAPP__ENABLED": "false"}
    assert receivers(load_settings(off)) == ([], {})


@pytest.mark.timeout(180)
def test_up_serves_the_whatsapp_webhook_end_to_end(
    hermes_env: dict[str, str], hermes_home: Path
) -> None:
    port = free_port()
    with FakeGraph(TOKEN, PHONE) as graph:
        env = {**_env(hermes_env, graph.api_base), "HERMES_GATEWAY__PORT": str(port)}
        up = subprocess.Popen(
            [sys.executable, "-m", "producers.cli.main", "up", "-w", "1", "-c", "2", "--no-beat"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        base = f"http://127.0.0.1:{port}"
        try:

            def healthy() -> bool:
                assert up.poll() is None, "hermes up exited"
                try:
                    found = httpx.get(f"{base}/healthz", timeout=1).json()
                except httpx.HTTPError:
                    return False
                return bool(found["receivers"] == ["whatsapp"])

            wait_for(healthy, timeout=60)
            params = {"hub.mode": "subscribe", "hub.verify_token": VERIFY, "hub.challenge": "77"}
            answer = httpx.get(f"{base}/whatsapp/webhook", params=params, timeout=10)
            assert (answer.status_code, answer.text) == (200, "77")
            payload, _ = load("whatsapp", "text")
            body = json.dumps(payload).encode()
            headers = {
                "Content-Type": "application/json",
                "X-Hub-Signature-256": sign(APP_SECRET, body),
            }
            posted = httpx.post(f"{base}/whatsapp/webhook", content=body, headers=headers)
            assert posted.status_code == 200
            wait_for(lambda: graph.sent(USER), timeout=90)
        finally:
            up.send_signal(signal.SIGINT)
            output, _ = up.communicate(timeout=60)
    assert up.returncode == 0, output
    assert any(line.startswith("│ whatsapp") for line in output.splitlines()), output
    assert graph.texts(USER)[0].endswith("echo: Does it come in another color?")
    assert TOKEN not in output and APP_SECRET not in output
