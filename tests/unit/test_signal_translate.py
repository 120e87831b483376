"""signal-cli-rest-api envelopes → turns: ids, chats, groups, attachments, and what is refused."""

from __future__ import annotations

from typing import Any

import pytest

from producers.signal.translate import BadEnvelope, Ignored, translate
from shared.platforms.signal import chat_type_of
from tests.fakes.signal_api import ACCOUNT, envelope

API = "http://127.0.0.1:8080"


def run(item: Any) -> Any:
    return translate(item, account=ACCOUNT, api_base=API)


def test_a_dm_is_keyed_by_sender_and_timestamp() -> None:
    turn = run(envelope("hi", timestamp=1_700_000_000_001))
    assert (turn.chat_id, turn.chat_type, turn.user_id) == ("+15557770001", "dm", "+15557770001")
    assert turn.event_id == turn.message_id == "+15557770001:1700000000001"
    assert turn.user_name == "Ada" and turn.text == "hi"


def test_a_group_message_is_keyed_by_the_groups_send_id() -> None:
    turn = run(envelope("hi all", timestamp=5, group="Z3JvdXA="))
    assert turn.chat_id == "group.WjNKdmRYQT0=" and turn.chat_type == "group"
    assert chat_type_of(turn.chat_id) == "group" and chat_type_of("+15557770001") == "dm"


def test_attachments_point_at_the_daemon() -> None:
    item = envelope(None, timestamp=5, attachments=[{"id": "abc.png", "contentType": "image/png"}])
    turn = run(item)
    assert [(a.kind, a.url) for a in turn.attachments] == [
        ("image", f"{API}/v1/attachments/abc.png")
    ]


@pytest.mark.parametrize(
    "item",
    [
        None,
        [],
        {"envelope": "x"},
        {"envelope": {"timestamp": 5, "dataMessage": {"message": "no sender"}}},
        {"envelope": {"source": "+15557770001", "timestamp": "5", "dataMessage": {"message": "x"}}},
        {"envelope": {"source": "+15557770001", "timestamp": 5, "dataMessage": "x"}},
        envelope("x", timestamp=5, attachments=[{"id": "../../etc/passwd"}]),
        envelope("x", timestamp=5, group=""),
    ],
)
def test_malformed_items_are_refused(item: Any) -> None:
    with pytest.raises(BadEnvelope):
        run(item)


@pytest.mark.parametrize(
    "item",
    [
        {"envelope": {"source": "+15557770001", "timestamp": 5, "receiptMessage": {}}},
        {"envelope": {"source": "+15557770001", "timestamp": 5, "typingMessage": {}}},
        envelope("", timestamp=5),
        envelope("x", timestamp=5, account="+15550002222"),
    ],
)
def test_what_is_not_a_turn_is_ignored(item: Any) -> None:
    assert isinstance(run(item), Ignored)
