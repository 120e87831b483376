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
from producers.intake import Accepted
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


def test_turns_queued_in_one_loop_pass_while_the_thread_lingers_go_in_one_batch(
    settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lingering thread is told after the loop's pass, not by the first of its turns: it
    takes them all at once (one transaction), not the first alone and the rest after."""
    monkeypatch.setattr(recorder, "WAKE_EVERY", 1.0)  # it lingers for the whole test
    batches: list[int] = []
    record_all = recorder.record_all

    def counting(store: Store, items: Sequence[object], **kwargs: object) -> object:
        batches.append(len(items))
        time.sleep(0.01)  # a slow commit: the first one's thread could not race the others
        return record_all(store, items, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(recorder, "record_all", counting)

    async def main() -> None:
        rec = Recorder(store, BatchRecording(), settings, time.time)
        await rec.record(turn(1, "a"))  # starts the thread, which then lingers
        for _ in range(200):  # until it waits for more
            if rec._lingering:
                break
            await asyncio.sleep(0.005)
        assert rec._lingering

        async def one(chat: str) -> Accepted:
            time.sleep(0.005)  # this request's other work: the thread could run meanwhile
            return await rec.record(turn(1, chat))

        accepted = await asyncio.gather(*(one(chat) for chat in "bcdef"))
        assert [a.session_key for a in accepted] == [_key(chat) for chat in "bcdef"]
        await rec.settled()

    asyncio.run(main())
    assert batches == [1, 5]
