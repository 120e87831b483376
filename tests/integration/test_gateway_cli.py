"""`hermes gateway <platform>` as a process: clear refusals, a shared port, polling by default
without a webhook secret, a clean stop, and `hermes up` choosing the platforms with credentials."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from producers.cli.up import receivers
from producers.slack.signature import sign
from shared.db import open_store
from shared.settings import load_settings
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.golden import load
from tests.fakes.server import free_port
from tests.fakes.stack import ROOT, redis_db_url, start_gateway, wait_for
from tests.fakes.telegram_api import FakeTelegram

TG_TOKEN = "123456789:AAFakeTokenForTestsCliSecret"
TG_SECRET = "cli-webhook-secret"
SLACK_SECRET = "cli-slack-signing-secret"


def _hermes(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "producers.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def _two_receivers_env(
    hermes_env: dict[str, str], redis_url: str, port: int, **extra: str
) -> dict[str, str]:
    """Telegram (webhook) and Slack receivers of one stack, sharing `port`."""
    return {
        **hermes_env,
        "HERMES_BROKER_URL": redis_db_url(redis_url),
        "HERMES_GATEWAY__PORT": str(port),
        "HERMES_PLATFORMS__TELEGRAM__TOKEN": TG_TOKEN,
        "HERMES_PLATFORMS__TELEGRAM__WEBHOOK_SECRET": TG_SECRET,
        "HERMES_PLATFORMS__TELEGRAM__API_BASE": "http://127.0.0.1:9/bot",  # never called
        "HERMES_PLATFORMS__SLACK__TOKEN": "xoxb-cli",
        "HERMES_PLATFORMS__SLACK__SIGNING_SECRET": SLACK_SECRET,
        **extra,
    }


def _post_update(port: int, payload: dict[str, Any], update_id: int) -> httpx.Response:
    """A copy of `payload` as update `update_id`, posted on a fresh connection."""
    update = json.loads(json.dumps(payload))
    update["update_id"] = update_id
    return httpx.post(
        f"http://127.0.0.1:{port}/telegram/webhook",
        json=update,
        headers={"X-Telegram-Bot-Api-Secret-Token": TG_SECRET},
        timeout=10,
    )


def test_help_and_one_line_refusals(hermes_env: dict[str, str]) -> None:
    shown = _hermes(hermes_env, "gateway", "--help")
    assert shown.returncode == 0 and "--polling" in shown.stdout and "--socket-mode" in shown.stdout
    for platform, reason in (
        ("slack", "platforms.slack.token is not set"),
        ("discord", "platforms.discord.token is not set"),
    ):
        result = _hermes(hermes_env, "gateway", platform)
        assert result.returncode == 1
        assert result.stderr.strip() == f"Error: {reason}"
    no_secret = _hermes(
        {**hermes_env, "HERMES_PLATFORMS__SLACK__TOKEN": "xoxb-1"}, "gateway", "slack"
    )
    assert no_secret.returncode == 1 and "signing_secret" in no_secret.stderr
    unknown = _hermes(hermes_env, "gateway", "myspace")
    assert unknown.returncode == 2


def test_up_runs_a_receiver_for_each_platform_with_credentials(hermes_env: dict[str, str]) -> None:
    settings = load_settings(
        {
            **hermes_env,
            "HERMES_PLATFORMS__TELEGRAM__TOKEN": TG_TOKEN,
            "HERMES_PLATFORMS__DISCORD__TOKEN": "d",
            "HERMES_PLATFORMS__DISCORD__ENABLED": "false",
        }
    )
    assert receivers(settings) == (["telegram"], {})


def test_up_leaves_out_a_platform_its_receiver_would_refuse(hermes_env: dict[str, str]) -> None:
    events_api = load_settings({**hermes_env, "HERMES_PLATFORMS__SLACK__TOKEN": "xoxb-1"})
    started, skipped = receivers(events_api)
    assert started == [] and "platforms.slack.signing_secret" in skipped["slack"]
    socket_mode = load_settings(
        {
            **hermes_env,
            "HERMES_PLATFORMS__SLACK__TOKEN": "xoxb-1",
            "HERMES_PLATFORMS__SLACK__SOCKET_MODE": "true",
        }
    )
    assert "platforms.slack.app_token" in receivers(socket_mode)[1]["slack"]
    complete = load_settings(
        {
            **hermes_env,
            "HERMES_PLATFORMS__SLACK__TOKEN": "xoxb-1",
            "HERMES_PLATFORMS__SLACK__SIGNING_SECRET": SLACK_SECRET,
        }
    )
    assert receivers(complete) == (["slack"], {})


@pytest.mark.timeout(120)
def test_two_receivers_share_the_port_and_either_records_any_request(
    hermes_env: dict[str, str], hermes_home: Path, redis_url: str
) -> None:
    port = free_port()
    env = _two_receivers_env(hermes_env, redis_url, port)
    procs = [
        start_gateway(env, hermes_home, "telegram", port),
        start_gateway(env, hermes_home, "slack", port),
    ]
    try:
        payload, _ = load("telegram", "private")
        event, _ = load("slack", "dm")
        for n in range(20):  # fresh connections: the kernel spreads them over both processes
            response = _post_update(port, payload, 900 + n)
            assert response.status_code == 200
            body = json.loads(json.dumps(event))
            body["event"]["ts"] = body["event"]["event_ts"] = f"1767225600.{n:06d}"
            raw = json.dumps(body).encode()
            stamp = str(int(time.time()))
            response = httpx.post(
                f"http://127.0.0.1:{port}/slack/events",
                content=raw,
                headers={
                    "Content-Type": "application/json",
                    "X-Slack-Request-Timestamp": stamp,
                    "X-Slack-Signature": sign(SLACK_SECRET, stamp, raw),
                },
                timeout=10,
            )
            assert response.status_code == 200
    finally:
        codes = [proc.stop() for proc in procs]
    assert codes == [0, 0], [p.output() for p in procs]
    store = open_store(load_settings(env).resolved_database_url)
    try:
        with store.read() as conn:
            counts = dict(
                conn.execute(text("SELECT platform, count(*) FROM inbox GROUP BY 1")).all()
            )
    finally:
        store.close()
    assert counts == {"telegram": 20, "slack": 20}


@pytest.mark.timeout(120)
def test_without_a_webhook_secret_telegram_is_polled(
    hermes_env: dict[str, str], hermes_home: Path, redis_url: str
) -> None:
    with FakeTelegram(TG_TOKEN) as fake:
        payload, _ = load("telegram", "private")
        fake.add_update(json.loads(json.dumps(payload)))
        port = free_port()
        env = {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url),
            "HERMES_GATEWAY__PORT": str(port),
            "HERMES_PLATFORMS__TELEGRAM__TOKEN": TG_TOKEN,
            "HERMES_PLATFORMS__TELEGRAM__API_BASE": fake.api_base,
        }
        proc = start_gateway(env, hermes_home, "telegram", port)
        store = open_store(load_settings(env).resolved_database_url)
        try:

            def recorded() -> int:
                with store.read() as conn:
                    return int(conn.execute(text("SELECT count(*) FROM inbox")).scalar_one())

            wait_for(recorded, timeout=30)
        finally:
            code = proc.stop()
            store.close()
        assert code == 0, proc.output()
        assert "deleteWebhook" in fake.methods() and "getUpdates" in fake.methods()
        assert TG_TOKEN.split(":")[1] not in proc.output()


@pytest.mark.timeout(60)
def test_a_rejected_discord_token_stops_the_receiver_with_one_line(
    hermes_env: dict[str, str], redis_url: str
) -> None:
    with FakeDiscord("the-right-token") as fake:
        env = {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url),
            "HERMES_GATEWAY__PORT": str(free_port()),
            "HERMES_PLATFORMS__DISCORD__TOKEN": "a-wrong-token-value",
            "HERMES_PLATFORMS__DISCORD__API_BASE": fake.api_base,
        }
        result = _hermes(env, "gateway", "discord")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: the discord connection stopped: LoginFailure: Improper token has been passed."
    )
    assert "a-wrong-token-value" not in result.stderr + result.stdout


def test_a_stranger_is_refused_once_by_the_whole_fleet(
    hermes_env: dict[str, str], hermes_home: Path, redis_url: str
) -> None:
    """Two receivers on one port: the kernel spreads the stranger's requests over both, and
    the once-an-hour refusal is one for the fleet (the broker's Redis), not one per process."""
    port = free_port()
    env = _two_receivers_env(
        hermes_env, redis_url, port, HERMES_PLATFORMS__TELEGRAM__ALLOWED_USERS="424242"
    )
    procs = [
        start_gateway(env, hermes_home, "telegram", port),
        start_gateway(env, hermes_home, "slack", port),
    ]
    refusals = 0
    try:
        for proc in procs:  # both listening before the first request
            wait_for(lambda p=proc: "hermes gateway" in p.output(), timeout=30)  # type: ignore[misc]
        payload, _ = load("telegram", "private")  # from user 111111111, not allowed
        for n in range(30):  # fresh connections: both processes answer some
            response = _post_update(port, payload, 950 + n)
            assert response.status_code == 200
            refusals += response.content.count(b"this assistant is private")
    finally:
        codes = [proc.stop() for proc in procs]
    outputs = [p.output() for p in procs]
    assert codes == [0, 0], outputs
    assert all("refused telegram user 111111111" in out for out in outputs)  # both were asked
    assert refusals == 1
