"""`hermes up` starts the Teams receiver when it is configured (derived from the registry), and
says why not when the app id is missing; the receiver it starts takes a signed activity end to
end (embedded Redis, a worker, the fake Bot Framework) and keeps the app password out of its
output."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from producers.cli.up import receivers
from shared.settings import load_settings
from tests.fakes.bot_connector import FakeBotConnector
from tests.fakes.golden import load
from tests.fakes.server import free_port
from tests.fakes.stack import wait_for

ROOT = Path(__file__).resolve().parents[2]
APP_ID = "3f1c6c1e-7c2a-4f0b-9d47-2b5f0a6c8e11"
PASSWORD = "teams-up-app-password"
DM = "a:1Dy3ffTjWsJnAbfmsSsKyrQqmx0fJ9cErqvmCpJyP43Gwkq_E-yzDhZ2mD6yBrqK4kq0ELiHw6nCrSKt4bGjA4m"


def test_up_picks_the_teams_receiver_only_when_it_can_start(
    hermes_env: dict[str, str],
) -> None:
    env = {
        **hermes_env,
        "HERMES_PLATFORMS__TEAMS__TOKEN": PASSWORD,
        "HERMES_PLATFORMS__TEAMS__APP_ID": APP_ID,
    }
    assert receivers(load_settings(env)) == (["teams"], {})
    off = {**env, "HERMES_PLATFORMS__TEAMS__ENABLED": "false"}
    assert receivers(load_settings(off)) == ([], {})
    with pytest.raises(ValueError, match="app_id"):
        load_settings({**env, "HERMES_PLATFORMS__TEAMS__APP_ID": ""})


@pytest.mark.timeout(180)
def test_up_serves_the_teams_messaging_endpoint_end_to_end(
    hermes_env: dict[str, str], hermes_home: Path
) -> None:
    port = free_port()
    with FakeBotConnector(APP_ID, PASSWORD) as bot:
        env = {**hermes_env, **bot.settings(), "HERMES_GATEWAY__PORT": str(port)}
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
                return bool(found["receivers"] == ["teams"])

            wait_for(healthy, timeout=60)
            payload, _ = load("teams", "personal_text")
            payload = {**payload, "serviceUrl": bot.service_url}
            headers = {
                "Content-Type": "application/json",
                "Authorization": f"Bearer {bot.token()}",
            }
            body = json.dumps(payload).encode()
            posted = httpx.post(f"{base}/teams/messages", content=body, headers=headers)
            assert posted.status_code == 200, posted.text
            wait_for(lambda: bot.sent(), timeout=90)
        finally:
            up.send_signal(signal.SIGINT)
            output, _ = up.communicate(timeout=60)
    assert up.returncode == 0, output
    assert any(line.startswith("│ teams") for line in output.splitlines()), output
    (reply,) = bot.sent()
    assert reply.conversation.startswith(DM)
    assert reply.body["text"].endswith("echo: Can you summarise yesterday's incident review?")
    assert PASSWORD not in output and bot.bot_token not in output


def test_hermes_gateway_teams_refuses_an_incomplete_configuration(
    hermes_env: dict[str, str],
) -> None:
    def gateway(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "producers.cli.main", "gateway", "teams"],
            env=env, capture_output=True, text=True, timeout=60, cwd=ROOT,
        )  # fmt: skip

    no_token = gateway(hermes_env)
    assert no_token.returncode == 1
    assert no_token.stderr.strip() == "Error: platforms.teams.token is not set"
    no_app = gateway({**hermes_env, "HERMES_PLATFORMS__TEAMS__TOKEN": PASSWORD})
    assert no_app.returncode == 2
    assert "platforms.teams needs app_id (the Microsoft App ID) with its token" in no_app.stderr
    assert PASSWORD not in no_app.stderr + no_app.stdout
