"""`/handoff telegram` in a real terminal (pexpect), with the chat's own Redis and Celery worker
and the fake Bot API: the completion lines, a clean exit, then `hermes -r` brings it back."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pexpect
import pytest

from shared.db import open_store
from shared.settings import load_settings
from shared.store import chats
from tests.fakes.telegram_api import FakeTelegram
from tests.integration.terminal_kit import Terminal, start, term_env, terminals

pytestmark = pytest.mark.both_databases

__all__ = ["term_env", "terminals"]  # fixtures

TOKEN = "123456789:AAFakeTokenForTestsSecretPart"
HOME = chats.HomeChannel(
    "telegram", "-100777", "group", None, "42", "agent:main:telegram:group:-100777:42"
)


@pytest.fixture
def fake() -> Iterator[FakeTelegram]:
    with FakeTelegram(TOKEN) as server:
        yield server


def test_handoff_telegram_completes_and_the_terminal_exits(
    term_env: dict[str, str], terminals: list[Terminal], fake: FakeTelegram
) -> None:
    env = {
        **term_env,
        "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN,
        "HERMES_PLATFORMS__TELEGRAM__API_BASE": fake.api_base,
    }
    store = open_store(load_settings(env).resolved_database_url)
    try:
        with store.write() as conn:
            chats.set_home_channel(conn, HOME)
    finally:
        store.close()

    chat = start(terminals, env).ready()
    chat.say("Let us plan a trip to Lisbon in May", expect="◆")
    chat.child.sendline("/handoff telegram")
    chat.child.expect(re.escape("↻ Handoff complete. The session is now active on telegram."))
    chat.child.expect(r"Resume it on this terminal later with: /resume ([^\r\n\x1b]+)")
    ref = chat.child.match.group(1).strip()
    chat.child.expect(pexpect.EOF)
    chat.child.close()
    assert chat.child.exitstatus == 0, chat.text()
    transcript = chat.text()
    assert "saved." not in transcript  # it left without ending the session
    print("$ hermes")
    print(transcript)

    texts = [m["text"] for m in fake.sent("-100777")]
    assert texts[0].startswith("↻ Continuing session ")
    assert "handed off from the terminal to telegram" in texts[1]

    back = start(terminals, env, "-r", ref).ready()
    recap = back.leave()
    print(f"$ hermes -r {ref!r}")
    print(recap)
    assert "Let us plan a trip to Lisbon in May" in recap
    assert "handed off from the terminal to telegram" in recap  # the platform's turn and reply
