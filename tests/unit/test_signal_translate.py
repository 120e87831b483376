"""signal-cli-rest-api envelopes → turns: ids, chats, groups, attachments, and what is refused."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from producers.signal.translate import BadEnvelope, Ignored, translate
from shared.platforms.signal import chat_type_of
from shared.turns import InboundTurn, TurnRejected, validate_turn
from tests.fakes.signal_api import ACCOUNT, envelope
from tests.fuzzing import VALUES, examples, mutated

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


# One item of `GET /v1/receive/{number}` as signal-cli-rest-api returns it in normal and native
# mode: the daemon joins signal-cli's `--output json receive` lines into a list unchanged
# (src/client/client.go, Receive), so the shape is signal-cli's own JSON (JsonMessageEnvelope,
# JsonDataMessage with JsonGroupInfo and JsonAttachment), every field it writes included.
GROUP_ID = base64.b64encode(bytes(range(32))).decode()  # signal-cli's base64 of a v2 group id
DOCUMENTED: dict[str, Any] = {
    "envelope": {
        "source": "+15557770001",
        "sourceNumber": "+15557770001",
        "sourceUuid": "7ccae375-cd51-4c82-8b1e-7be3280aa485",
        "sourceName": "Ada",
        "sourceDevice": 1,
        "timestamp": 1745372297238,
        "serverReceivedTimestamp": 1745372294830,
        "serverDeliveredTimestamp": 1745372294831,
        "dataMessage": {
            "timestamp": 1745372297238,
            "message": "see the photo",
            "expiresInSeconds": 0,
            "viewOnce": False,
            "groupInfo": {
                "groupId": GROUP_ID,
                "groupName": "Ops",
                "revision": 3,
                "type": "DELIVER",
            },
            "attachments": [
                {
                    "contentType": "image/jpeg",
                    "filename": "photo.jpg",
                    "id": "Qm3x0fJ9cErqvmCpJyP4.jpg",
                    "size": 31037,
                    "width": 394,
                    "height": 398,
                    "caption": None,
                    "uploadTimestamp": 1745372296000,
                }
            ],
        },
    },
    "account": ACCOUNT,
}


def test_the_documented_shape_is_a_group_turn_the_daemon_can_answer() -> None:
    turn = run(DOCUMENTED)
    assert turn.event_id == "+15557770001:1745372297238" and turn.user_id == "+15557770001"
    assert turn.text == "see the photo" and turn.chat_type == "group"
    # the chat id is the daemon's send id for the group: `group.` + base64(signal-cli's id),
    # which its getRecipientType decodes twice to the 32 bytes of a Signal group
    assert turn.chat_id.startswith("group.")
    inner = base64.b64decode(base64.b64decode(turn.chat_id.removeprefix("group.")))
    assert inner == bytes(range(32))
    (photo,) = turn.attachments
    assert (photo.kind, photo.name, photo.mime_type, photo.size) == (
        "image",
        "photo.jpg",
        "image/jpeg",
        31037,
    )
    assert photo.url == f"{API}/v1/attachments/Qm3x0fJ9cErqvmCpJyP4.jpg"


def test_a_sender_who_hides_their_number_is_keyed_by_their_aci() -> None:
    item = copy.deepcopy(DOCUMENTED)
    uuid = item["envelope"]["sourceUuid"]
    item["envelope"].update({"source": uuid, "sourceNumber": None})
    del item["envelope"]["dataMessage"]["groupInfo"]
    turn = run(item)
    assert (turn.chat_id, turn.chat_type, turn.user_id) == (uuid, "dm", uuid)


@pytest.mark.parametrize(
    "change",
    [
        # a message our own linked phone sent: a sync message, not a data message
        lambda e: e.update(
            {"syncMessage": {"sentMessage": e.pop("dataMessage")}},
        ),
        # an edit of an earlier message (signal-cli's editMessage): not a new turn
        lambda e: e.update(
            {
                "editMessage": {
                    "targetSentTimestamp": 1745372290000,
                    "dataMessage": e.pop("dataMessage"),
                }
            }
        ),
        # a group change
        lambda e: e["dataMessage"]["groupInfo"].update({"type": "UPDATE"}),
        # a reaction
        lambda e: e["dataMessage"].update(
            {"reaction": {"emoji": "👍", "targetAuthor": "+15557770002", "isRemove": False}}
        ),
    ],
)
def test_documented_non_turns_are_ignored(change: Any) -> None:
    item = copy.deepcopy(DOCUMENTED)
    change(item["envelope"])
    assert isinstance(run(item), Ignored)


SEEDS = [
    DOCUMENTED,
    envelope("hi", timestamp=1_700_000_000_001),
    envelope("hi all", timestamp=5, group="Z3JvdXA="),
    envelope(None, timestamp=5, attachments=[{"id": "abc.png", "contentType": "image/png"}]),
]


def _only_clear_outcomes(item: Any) -> None:
    try:
        result = run(item)
    except BadEnvelope:
        return
    if isinstance(result, Ignored):
        assert result.reason
        return
    assert isinstance(result, InboundTurn)
    try:
        validate_turn(result)
    except TurnRejected:  # the receiver logs it and records nothing
        return
    assert result.event_id == result.message_id and result.chat_id


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(item=st.sampled_from(SEEDS).flatmap(mutated))
def test_mutated_envelopes_never_raise_anything_but_bad_envelope(item: Any) -> None:
    _only_clear_outcomes(item)


@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])
@given(item=VALUES)
def test_any_json_value_never_raises_anything_but_bad_envelope(item: Any) -> None:
    _only_clear_outcomes(item)
