"""Slack Socket Mode (development) against a fake: events recorded, then acked; a redelivered
envelope is one turn; slash commands work too."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from producers.gateway.deps import Gateway
from producers.slack.receiver import SlackReceiver, run_socket_mode
from shared.db import Store
from shared.ports import RecordingWaker
from shared.settings import load_settings
from tests.fakes.background import Background
from tests.fakes.golden import load
from tests.fakes.slack_socket import FakeSocketMode
from tests.fakes.stack import wait_for

APP_TOKEN = "xapp-1-A0APP0001-socket-secret"
BOT_TOKEN = "xoxb-socket-bot-token"


@pytest.mark.timeout(60)
def test_socket_mode_records_then_acks(hermes_env: dict[str, str], store: Store) -> None:
    with FakeSocketMode(APP_TOKEN) as fake:
        settings = load_settings(
            {
                **hermes_env,
                "HERMES_PLATFORMS__SLACK__TOKEN": BOT_TOKEN,
                "HERMES_PLATFORMS__SLACK__APP_TOKEN": APP_TOKEN,
                "HERMES_PLATFORMS__SLACK__SOCKET_MODE": "true",
                "HERMES_PLATFORMS__SLACK__API_BASE": fake.api_base,
            }
        )
        receiver = SlackReceiver(
            Gateway(settings, store, RecordingWaker(), time.time),
            signing_secret=None,
            token=BOT_TOKEN,
            api_base=fake.api_base,
        )

        def run() -> object:
            return run_socket_mode(
                receiver, app_token=APP_TOKEN, token=BOT_TOKEN, api_base=fake.api_base
            )

        with Background(run):
            assert fake.connected.wait(20)
            dm, _ = load("slack", "dm")
            first = fake.push(dm)
            again = fake.push(dm)
            command = fake.push(
                {
                    "command": "/title",
                    "text": "trip plans",
                    "team_id": "T0001ABCD",
                    "channel_id": "D0DMANN01",
                    "user_id": "U0ANN0001",
                    "trigger_id": "9.9.9",
                },
                kind="slash_commands",
            )
            wait_for(lambda: len(fake.acks) >= 3, timeout=20)
    assert sorted(fake.acks) == sorted([first, again, command])  # acked concurrently
    with store.read() as conn:
        rows = conn.execute(text("SELECT text FROM inbox ORDER BY id")).scalars().all()
    assert sorted(rows) == ["/title trip plans", "what's on my calendar & why?"]
