"""Matrix timeline events → turns, pinned by golden files shaped as the client-server spec's
own examples (tests/fixtures/matrix/: `m.room.message` with m.text, m.emote, m.image, m.file;
an `m.thread` reply; a rich reply; an `m.replace` edit; a redaction and a redacted event; an
encrypted event; a state event; our own event), and fuzzed from them: whatever a homeserver
sends, translate answers a turn that passes validation, an Ignored, or BadEvent — never
another exception."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from producers.matrix.translate import BadEvent, Ignored, translate
from shared.turns import InboundTurn, TurnRejected, validate_turn
from tests.fakes.golden import FIXTURES, cases, check, load
from tests.fuzzing import VALUES, examples, mutated

BOT = "@hermes:example.org"
ROOM = "!jEsUZKDJdhlrceRyVU:example.org"


def run(event: Any, members: int = 2, room_id: str = ROOM) -> InboundTurn | Ignored:
    return translate(event, room_id=room_id, members=members, bot_user_id=BOT)


@pytest.mark.parametrize("name", cases("matrix"))
def test_golden(name: str) -> None:
    event, expected = load("matrix", name)
    context = expected["context"]
    check(run(event, context["members"], context["room_id"]), expected)


def test_the_golden_set_covers_the_issue() -> None:
    wanted = {
        "dm_text",
        "dm_image",
        "dm_file",
        "group_thread_reply",
        "group_mention",
        "dm_edit",
        "own_event",
        "redaction",
        "redacted_message",
    }
    assert wanted <= set(cases("matrix"))


def test_a_redelivered_event_is_the_same_turn() -> None:
    event, _ = load("matrix", "dm_text")
    again = json.loads(json.dumps(event))
    again["unsigned"] = {"age": 98765}  # what a later /sync says about the same event
    assert run(event) == run(again)


def test_a_thread_in_a_group_needs_no_mention_and_shares_one_session() -> None:
    event, _ = load("matrix", "group_thread_reply")
    other = {**event, "sender": "@bob:example.org", "event_id": "$bob:example.org"}
    mine, theirs = run(event, members=5), run(other, members=5)
    assert isinstance(mine, InboundTurn) and isinstance(theirs, InboundTurn)
    assert mine.thread_id == theirs.thread_id == "$thread-root:example.org"


@pytest.mark.parametrize(
    "bad",
    [
        [],
        "event",
        {"type": "m.room.message", "sender": "@a:b", "content": {}},  # no event_id
        {"type": "m.room.message", "event_id": "$e", "content": {}},  # no sender
        {"type": "m.room.message", "event_id": "$e", "sender": "@a:b", "content": []},
        {"type": "m.room.message", "event_id": "$e", "sender": "@a:b", "content": {"body": 1}},
        {
            "type": "m.room.message",
            "event_id": "$e",
            "sender": "@a:b",
            "content": {"msgtype": "m.image", "body": "x.png", "url": "https://elsewhere/x"},
        },
    ],
)
def test_malformed_events_are_refused(bad: object) -> None:
    with pytest.raises(BadEvent):
        run(bad)


@pytest.mark.parametrize("user_ids", [5, None, "@hermes:example.org", {"x": 1}, [["@hermes"]]])
def test_a_mangled_mentions_list_is_no_mention(user_ids: object) -> None:
    event, _ = load("matrix", "group_chatter")  # found by the fuzz test below (a TypeError)
    event["content"]["m.mentions"] = {"user_ids": user_ids}
    assert run(event, members=5) == Ignored("not addressed to the bot")


GOLDEN = [
    (json.loads(path.read_text(encoding="utf-8")), path.stem)
    for path in sorted((FIXTURES / "matrix").glob("*.json"))
    if not path.name.endswith(".expected.json")
]
EVENTS = st.sampled_from([event for event, _ in GOLDEN]).flatmap(mutated)


def _only_clear_outcomes(event: Any, members: int) -> None:
    try:
        result = run(event, members)
    except BadEvent:
        return
    if isinstance(result, Ignored):
        assert isinstance(result.reason, str) and result.reason
        return
    assert isinstance(result, InboundTurn)
    try:
        validate_turn(result)
    except TurnRejected:  # the receiver records nothing for it (and says why)
        return
    assert result.event_id == event["event_id"] and result.chat_id == ROOM


@settings(max_examples=examples(400), suppress_health_check=[HealthCheck.too_slow])
@given(event=EVENTS, members=st.sampled_from([0, 1, 2, 3, 50]))
def test_mutated_spec_events_never_raise_anything_but_bad_event(event: Any, members: int) -> None:
    _only_clear_outcomes(event, members)


@settings(max_examples=examples(200), suppress_health_check=[HealthCheck.too_slow])
@given(event=VALUES)
def test_any_json_value_never_raises_anything_but_bad_event(event: Any) -> None:
    _only_clear_outcomes(event, 2)
