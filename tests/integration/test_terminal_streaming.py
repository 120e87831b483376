"""The terminal shows a reply as the model writes it: the real `hermes` in a pty (pexpect), its
embedded stack's real worker, the fake OpenAI server streaming slowly. The last chunk waits
until the test has seen the first words on screen, so "before the last ones are sent" is a
fact, not a timing."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import pytest

from shared.db import open_store
from shared.settings import load_settings
from shared.store import messages, session_listing
from tests.fakes.openai_server import FakeOpenAI, Step, running
from tests.integration.terminal_kit import PROMPT, Terminal, start, term_env, terminals

__all__ = ["term_env", "terminals"]  # fixtures

pytestmark = pytest.mark.both_databases

MAIN = "main-model"
REPLY = (
    "Once upon a time there was a gateway that showed every reply as it was written, "
    "word after word, and nobody stared at an empty prompt again."
)
FIRST_WORDS = "Once upon a time there was"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with running() as server:
        yield server


def test_the_reply_is_on_screen_while_it_is_written_and_in_the_transcript_once(
    terminals: list[Terminal], term_env: dict[str, str], fake: FakeOpenAI
) -> None:
    gate = threading.Event()
    fake.script(Step(content=REPLY, chunk_size=6, chunk_delay=0.03, gate=gate), model=MAIN)
    env = {
        **term_env,
        "HERMES_MODEL__BASE_URL": fake.url,
        "HERMES_MODEL__API_KEY": "sk-test-not-secret",
        "HERMES_MODEL__NAME": MAIN,
        "HERMES_AUXILIARY__NAME": "aux-model",
    }
    chat = start(terminals, env).ready()
    chat.child.sendline("tell me a story")
    try:
        chat.child.expect(re.escape(FIRST_WORDS), timeout=90)
        assert not gate.is_set() and fake.text_done_at == 0.0  # the end is still unsent
    finally:
        gate.set()
    chat.child.expect(re.escape(REPLY))  # the committed reply, whole
    chat.child.expect(PROMPT)
    out = chat.leave()
    assert "◆ " + REPLY in out

    store = open_store(load_settings(env).resolved_database_url)
    try:
        with store.read() as conn:
            (session,), _ = session_listing.list_sessions(conn, limit=10)
            said = [m.content for m in messages.transcript(conn, session.record.id)]
    finally:
        store.close()
    assert said.count(REPLY) == 1
    assert said[0] == "tell me a story"
