"""Secrets out of logs: the redactor both the gateway and the workers install (shared.redact)."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from shared import redact
from shared.settings import load_settings
from tests.fakes.golden import load
from tests.fakes.server import Served, free_port
from tests.fakes.stack import redis_db_url, start_gateway, wait_for

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "123456789:AAEhBOweik6ad9r_Qsecret"


@pytest.mark.parametrize("module", [redact], ids=["shared"])
def test_messages_arguments_and_tracebacks_are_masked(
    module: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    module.install_redaction([TOKEN, "short"])
    log = logging.getLogger("hermes.test.redact")
    log.info("POST https://api.telegram.org/bot%s/sendMessage", TOKEN)
    try:
        raise RuntimeError(f"The token `{TOKEN}` was rejected by the server.")
    except RuntimeError:
        log.exception("failed")
    logging.getLogger("httpx").warning("HTTP Request: POST .../bot%s/getMe", TOKEN)
    assert TOKEN not in caplog.text
    assert "bot***/sendMessage" in caplog.text and "rejected by the server" in caplog.text
    # a secret under six characters is masked where it stands alone, not inside other words
    log.info("a shortcut; password short; short.")
    assert "a shortcut; password ***; ***." in caplog.text
    assert logging.getLogger("httpx").level == logging.WARNING


# --- a running gateway: every line it prints, uvicorn's own included ---

GW_TOKEN = "123456789:AAGatewayTokenSecretPart"
GW_SECRETS = {
    "HERMES_PLATFORMS__TELEGRAM__TOKEN": GW_TOKEN,
    "HERMES_PLATFORMS__TELEGRAM__WEBHOOK_SECRET": "gateway-webhook-secret-value",
    "HERMES_MODEL__API_KEY": "sk-model-key-never-logged",
    "HERMES_AUXILIARY__API_KEY": "sk-auxiliary-key-never-logged",
    "HERMES_TRANSCRIPTION__API_KEY": "sk-transcription-key-never-logged",
}
BROKER_PASSWORD = "broker-password-never-logged"
SECRET_ENV = "HERMES_PLATFORMS__TELEGRAM__WEBHOOK_SECRET"
HERMES = [sys.executable, "-m", "producers.cli.main"]
WEBHOOK_URL = "https://hermes.example/telegram/webhook"


def _gateway_env(hermes_env: dict[str, str], redis_url: str, port: int) -> dict[str, str]:
    # a password the broker will refuse: waking a worker fails, and says so in the log
    host = redis_db_url(redis_url).split("://", 1)[1]
    return {
        **hermes_env,
        **GW_SECRETS,
        "HERMES_MODEL__BASE_URL": "http://127.0.0.1:9/v1",
        "HERMES_BROKER_URL": f"redis://hermes:{BROKER_PASSWORD}@{host}",
        "HERMES_GATEWAY__PORT": str(port),
        "HERMES_PLATFORMS__TELEGRAM__API_BASE": "http://127.0.0.1:9/bot",  # never called
    }


def test_secrets_of_covers_model_keys_and_url_passwords(hermes_env: dict[str, str]) -> None:
    settings = load_settings(
        {
            **hermes_env,
            **GW_SECRETS,
            "HERMES_BROKER_URL": "redis://u:p%40ss-word-broker@127.0.0.1:6379/0",
            "HERMES_DATABASE_URL": "postgresql://app:db-password-here@127.0.0.1/hermes",
            "HERMES_FLOWER__BASIC_AUTH": "admin:flower-password",
        }
    )
    found = set(redact.secrets_of(settings))
    assert set(GW_SECRETS.values()) <= found
    assert {"p%40ss-word-broker", "p@ss-word-broker", "db-password-here"} <= found
    assert {"admin:flower-password", "flower-password"} <= found


@pytest.mark.timeout(120)
def test_no_configured_secret_reaches_the_gateway_output(
    hermes_env: dict[str, str], hermes_home: Path, redis_url: str
) -> None:
    port = free_port()
    env = _gateway_env(hermes_env, redis_url, port)
    proc = start_gateway(env, hermes_home, "telegram", port)
    secrets = [*GW_SECRETS.values(), BROKER_PASSWORD]
    try:
        base = f"http://127.0.0.1:{port}"
        query = "&".join(f"s{n}={value}" for n, value in enumerate(secrets))
        assert httpx.get(f"{base}/healthz?{query}", timeout=10).status_code == 200
        wrong = httpx.post(
            f"{base}/telegram/webhook?{query}",
            json={},
            headers={"X-Telegram-Bot-Api-Secret-Token": GW_TOKEN},
            timeout=10,
        )
        assert wrong.status_code == 401
        payload, _ = load("telegram", "private")
        recorded = httpx.post(
            f"{base}/telegram/webhook",
            json=payload,
            headers={"X-Telegram-Bot-Api-Secret-Token": GW_SECRETS[SECRET_ENV]},
            timeout=30,
        )
        assert recorded.status_code == 200  # recorded; waking the worker fails (bad password)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.sendall(f"GET /{GW_TOKEN} HTTP/1.1\r\nHost: {GW_TOKEN}\r\n\r".encode() + b"\0\n\n")
            raw.recv(1024)
        wait_for(lambda: "Invalid HTTP request" in proc.output(), timeout=10)
    finally:
        code = proc.stop()
    output = proc.output()
    assert code == 0, output
    assert '"GET /healthz?s0=***&s1=***' in output  # uvicorn's access line, masked
    assert "uvicorn.error" in output and "Invalid HTTP request received." in output
    leaked = [value for value in secrets if value.lower() in output.lower()]
    assert not leaked, output


class _EchoingBotApi:
    """A Bot API that refuses setWebhook and quotes the request path (with the token) back."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = json.dumps(
            {"ok": False, "error_code": 400, "description": f"Bad Request: {scope['path']}"}
        ).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 400, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@pytest.mark.timeout(60)
def test_a_refusal_that_quotes_the_token_is_printed_without_it(
    hermes_env: dict[str, str], redis_url: str
) -> None:
    with Served(_EchoingBotApi()) as api:
        env = {
            **_gateway_env(hermes_env, redis_url, free_port()),
            "HERMES_PLATFORMS__TELEGRAM__API_BASE": f"{api}/bot",
        }
        result = subprocess.run(
            [*HERMES, "gateway", "telegram", "--webhook", "--webhook-url", WEBHOOK_URL],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
    assert result.returncode == 1, result.stderr
    assert "cannot register the Telegram webhook" in result.stderr
    assert "/bot***/setwebhook" in result.stderr  # the refusal is there (PTB lower-cases it) …
    assert GW_TOKEN.split(":")[1].lower() not in (result.stdout + result.stderr).lower()
