"""The streamed-message record (workers/delivery/live_message.py): one contract, run against the
Redis implementation (real Redis) and its in-process twin."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from shared.pipeline.outbox import OutboxRow
from tests.fakes.stack import redis_db_url
from workers.delivery.live_message import (
    LiveMessages,
    LocalLiveMessages,
    MessageGone,
    Placement,
    RedisLiveMessages,
    claim_for,
    finish_live,
)


@pytest.fixture(params=["redis", "local"])
def live(request: pytest.FixtureRequest) -> Iterator[LiveMessages]:
    if request.param == "local":
        yield LocalLiveMessages()
        return
    client = redis.Redis.from_url(redis_db_url(request.getfixturevalue("redis_url")))
    yield RedisLiveMessages(client, "sqlite:///state.db", "telegram")
    client.close()


def _row(
    row_id: int, turn_id: int | None = 7, chat: str = "42", thread: str | None = None
) -> OutboxRow:
    return OutboxRow(
        id=row_id, lane=f"telegram:{chat}", platform="telegram", chat_id=chat, text="final",
        status="pending", attempts=0, created_at=0.0, turn_id=turn_id, thread_id=thread,
    )  # fmt: skip


def test_the_first_row_of_the_turn_claims_the_message_and_keeps_it_on_a_retry(
    live: LiveMessages,
) -> None:
    live.place(7, Placement("42", None, "1001"))
    assert not live.claimed(7)
    assert claim_for(live, _row(10)) == "1001"
    assert live.claimed(7)
    assert claim_for(live, _row(10)) == "1001"  # the same row, retried
    assert claim_for(live, _row(11)) is None  # a second reply of the turn is a new message


def test_a_message_in_another_chat_or_thread_is_not_claimed(live: LiveMessages) -> None:
    live.place(7, Placement("42", "5", "1001"))
    assert claim_for(live, _row(10, chat="43", thread="5")) is None
    live.place(8, Placement("42", "5", "1002"))
    assert claim_for(live, _row(12, turn_id=8, thread=None)) is None
    assert claim_for(live, _row(13, turn_id=None)) is None


def test_a_claim_without_a_message_still_stops_a_late_streamer(live: LiveMessages) -> None:
    assert claim_for(live, _row(10)) is None
    assert live.claimed(7)


def test_finish_live_edits_the_message_or_says_to_post(live: LiveMessages) -> None:
    edits: list[tuple[str, str]] = []
    live.place(7, Placement("42", None, "1001"))
    assert finish_live(live, _row(10), "part one", lambda m, t: edits.append((m, t))) == "1001"
    assert edits == [("1001", "part one")]

    def gone(message_id: str, text: str) -> None:
        raise MessageGone("deleted")

    live.place(8, Placement("42", None, "1002"))
    assert finish_live(live, _row(11, turn_id=8), "part one", gone) is None
    assert finish_live(None, _row(12, turn_id=9), "x", gone) is None
