"""WhatsApp's place in the pipeline: /sethome (the home is a wa_id), a hand-off to it, the
configured home channel, per-user and per-group keys, redaction of its secrets, and
`hermes gateway whatsapp` refusing an incomplete configuration in one line."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import select

from producers.intake import accept, key_for
from shared.db import Store
from shared.db.schema import outbox as table
from shared.redact import secrets_of
from shared.settings import Settings, load_settings
from shared.store import chats
from tests.pipeline_helpers import make_runtime, turn
from workers.delivery.base import MemorySender
from workers.drain import drain
from workers.handoff import run_handoff

ROOT = Path(__file__).resolve().parents[2]
USER = "16505551234"
GROUP = "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD"
WA = {"platform": "whatsapp", "chat_type": "dm", "user_id": USER}


def _replies(store: Store, lane: str) -> list[str]:
    with store.read() as conn:
        rows = conn.execute(select(table.c.text).where(table.c.lane == lane).order_by(table.c.id))
        return [str(t) for t in rows.scalars()]


def test_sethome_makes_the_wa_id_home_and_a_handoff_goes_there(
    settings: Settings, store: Store
) -> None:
    rt, waker = make_runtime(settings, store)
    rt.senders.add(MemorySender("whatsapp"))
    home = accept(
        store, rt.waker, turn(1, USER, text="/sethome", **WA), settings=settings, clock=time.time
    )
    drain(rt, home.session_key)
    assert _replies(store, f"whatsapp:{USER}") == [
        "This chat is now the whatsapp home channel: notices and hand-offs come here."
    ]
    with store.read() as conn:
        stored = chats.get_home_channel(conn, "whatsapp")
    assert stored == chats.HomeChannel(
        "whatsapp", USER, "dm", None, USER, f"agent:main:whatsapp:dm:{USER}"
    )
    tg = {"platform": "telegram", "chat_type": "dm", "user_id": "111"}
    talk = accept(
        store, rt.waker, turn(2, "111", text="/handoff whatsapp", **tg), settings=settings,
        clock=time.time,
    )  # fmt: skip
    drain(rt, talk.session_key)
    assert _replies(store, "telegram:111")[-1].startswith("Handing off to whatsapp")
    ((handoff_id, _),) = waker.handoffs
    assert run_handoff(rt, handoff_id).outcome == "completed"
    to_home = _replies(store, f"whatsapp:{USER}")
    assert to_home[1].startswith("↻ Continuing session ") and len(to_home) == 3  # + summary


def test_a_configured_home_channel_is_a_dm_with_that_wa_id(
    hermes_env: dict[str, str], store: Store
) -> None:
    load_settings({**hermes_env, "HERMES_PLATFORMS__WHATSAPP__HOME_CHANNEL": USER})
    with store.read() as conn:
        found = chats.get_home_channel(conn, "whatsapp", configured=USER)
    assert found == chats.HomeChannel("whatsapp", USER, "dm", source="settings")


def test_keys_per_user_and_per_group(hermes_env: dict[str, str]) -> None:
    default = load_settings(hermes_env)
    dm = turn(1, USER, **WA)
    group = turn(2, GROUP, platform="whatsapp", chat_type="group", user_id=USER)
    assert key_for(dm, default).key == f"agent:main:whatsapp:dm:{USER}"
    assert key_for(group, default).key == f"agent:main:whatsapp:group:{GROUP}:{USER}"
    shared = load_settings({**hermes_env, "HERMES_PLATFORMS__WHATSAPP__SHARED_ROOMS": GROUP})
    assert key_for(group, shared).key == f"agent:main:whatsapp:group:{GROUP}"


def test_its_secrets_are_redacted(hermes_env: dict[str, str]) -> None:
    settings = load_settings(
        {
            **hermes_env,
            "HERMES_PLATFORMS__WHATSAPP__TOKEN": "EAAGredact-token",
            "HERMES_PLATFORMS__WHATSAPP__APP_SECRET": "redact-app-secret",
            "HERMES_PLATFORMS__WHATSAPP__VERIFY_TOKEN": "redact-verify-token",
            "HERMES_PLATFORMS__WHATSAPP__PHONE_NUMBER_ID": "106540352242922",
        }
    )
    assert {"EAAGredact-token", "redact-app-secret", "redact-verify-token"} <= set(
        secrets_of(settings)
    )


def test_hermes_gateway_whatsapp_refuses_an_incomplete_configuration(
    hermes_env: dict[str, str],
) -> None:
    def gateway(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "producers.cli.main", "gateway", "whatsapp"],
            env=env, capture_output=True, text=True, timeout=60, cwd=ROOT,
        )  # fmt: skip

    no_token = gateway(hermes_env)
    assert no_token.returncode == 1
    assert no_token.stderr.strip() == "Error: platforms.whatsapp.token is not set"
    half = gateway({**hermes_env, "HERMES_PLATFORMS__WHATSAPP__TOKEN": "EAAGhalf"})
    assert half.returncode == 1
    assert half.stderr.strip() == (
        "Error: the WhatsApp webhook needs platforms.whatsapp.phone_number_id, "
        "platforms.whatsapp.app_secret, platforms.whatsapp.verify_token"
    )
