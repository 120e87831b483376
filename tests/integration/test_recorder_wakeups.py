"""The receivers' Recorder publishes wake-ups at most once per WAKE_EVERY under load: turns
committed meanwhile are acked at once, their wake-ups wait and go out together, and none is
dropped when the receiver stops (gateway/recorder.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest
from sqlalchemy import select

from producers.gateway import recorder
from producers.gateway.recorder import Recorder
from shared.db import Store
from shared.db.schema import routes as routes_table
from shared.ports import RecordingWaker
from shared.settings import Settings
from tests.pipeline_helpers import turn

pytestmark = pytest.mark.both_databases


class BatchRecording(RecordingWaker):
    """The cheap twin of a batching waker: remembers each publish's keys."""

    def __init__(self) -> None:
        super().__init__()
        self.published: list[list[str]] = []

    def drain_many(self, session_keys: Sequence[str]) -> set[str]:
        self.published.append(list(session_keys))
        return set(session_keys)


def _key(chat: str) -> str:
    return f"agent:main:cli:dm:{chat}"


def test_wake_ups_of_turns_committed_meanwhile_wait_and_go_together(
    settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recorder, "WAKE_EVERY", 1.0)  # wide enough for any machine
    waker = BatchRecording()
    seen_at_ack: list[list[list[str]]] = []

    async def main() -> None:
        rec = Recorder(store, waker, settings, time.time)
        first = await rec.record(turn(1, "a"))
        assert first.woken
        for chat in ("b", "c", "d"):
            accepted = await rec.record(turn(1, chat))  # acked once committed
            assert not accepted.duplicate
            seen_at_ack.append([list(keys) for keys in waker.published])
        await rec.settled()  # what a stopping receiver awaits

    asyncio.run(main())
    # the first after a quiet spell went at once; the others were acked before their publish
    assert seen_at_ack == [[[_key("a")]]] * 3
    assert waker.published == [[_key("a")], [_key("b"), _key("c"), _key("d")]]
    with store.read() as conn:
        rows = conn.execute(select(routes_table.c.session_key, routes_table.c.wake_sent_at))
        marks = dict(rows.all())
    assert all(mark is not None for mark in marks.values())  # every claim was sent, none let go
    assert set(marks) == {_key(chat) for chat in "abcd"}


def test_a_turn_after_a_quiet_spell_is_published_at_once(
    settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recorder, "WAKE_EVERY", 0.05)
    waker = BatchRecording()

    async def main() -> None:
        rec = Recorder(store, waker, settings, time.time)
        await rec.record(turn(1, "a"))
        await rec.settled()
        await asyncio.sleep(0.1)  # longer than WAKE_EVERY since the last publish
        await rec.record(turn(1, "b"))
        await rec.settled()

    asyncio.run(main())
    assert waker.published == [[_key("a")], [_key("b")]]
