"""Telegram updates → turns, pinned by golden files of real Bot API payloads."""

from __future__ import annotations

import pytest

from producers.telegram.translate import (
    BadUpdate,
    Ignored,
    Migration,
    bot_id_of,
    migration,
    translate,
)
from tests.fakes.golden import cases, check, load

BOT = bot_id_of("123456789:AAFakeTokenForTests")
USERNAME = "hermes_bot"


@pytest.mark.parametrize("name", cases("telegram"))
def test_golden(name: str) -> None:
    payload, expected = load("telegram", name)
    check(translate(payload, bot_id=BOT, bot_username=USERNAME), expected)
    if "migration" in expected:
        assert migration(payload) == Migration(**expected["migration"])
    if "same_event_as" in expected:
        first, _ = load("telegram", expected["same_event_as"])
        assert translate(first, bot_id=BOT, bot_username=USERNAME) == translate(
            payload, bot_id=BOT, bot_username=USERNAME
        )


def test_the_golden_set_covers_the_issue() -> None:
    wanted = {
        "private",
        "group",
        "supergroup_reply",
        "forum_topic",
        "forum_general",
        "edited_message",
        "repeated_update_id",
        "group_not_addressed",
        "group_reply_to_bot",
        "group_command_for_another_bot",
        "group_bare_command",
        "group_mentions_someone_else",
        "forum_topic_opened_by_bot",
    }
    assert wanted <= set(cases("telegram"))


def test_event_ids_are_per_bot() -> None:
    payload, _ = load("telegram", "private")
    one = translate(payload, bot_id="111")
    two = translate(payload, bot_id="222")
    assert not isinstance(one, Ignored) and not isinstance(two, Ignored)
    assert one.event_id != two.event_id


def test_the_new_supergroup_side_of_a_migration_is_seen_too() -> None:
    update = {
        "update_id": 1,
        "message": {
            "message_id": 1,
            "date": 0,
            "chat": {"id": -1001112223334, "type": "supergroup", "title": "Book club"},
            "migrate_from_chat_id": -4012345678,
        },
    }
    assert migration(update) == Migration("-4012345678", "-1001112223334")
    assert isinstance(translate(update, bot_id=BOT), Ignored)


@pytest.mark.parametrize(
    "fields",
    [
        {"migrate_to_chat_id": {"id": -1001112223334}},
        {"migrate_to_chat_id": "-1001112223334"},
        {"migrate_to_chat_id": "supergroup"},
        {"migrate_to_chat_id": True},
        {"migrate_to_chat_id": 1.5},
        {"migrate_from_chat_id": "-4012345678"},
        {"migrate_from_chat_id": [-4012345678]},
        {"migrate_to_chat_id": -1001112223334, "chat": {"id": "g", "type": "group"}},
    ],
)
def test_a_migration_with_an_id_that_is_not_an_integer_is_a_bad_update(
    fields: dict[str, object],
) -> None:
    payload, _ = load("telegram", "migrate_to_chat_id")
    message = {k: v for k, v in payload["message"].items() if k != "migrate_to_chat_id"}
    update = {"update_id": 1, "message": {**message, **fields}}
    with pytest.raises(BadUpdate, match="must be an integer"):
        migration(update)
    with pytest.raises(BadUpdate):
        translate(update, bot_id=BOT)


@pytest.mark.parametrize(
    "bad",
    [
        [],
        "update",
        {},
        {"update_id": "7"},
        {"update_id": -1},
        {"update_id": True},
        {"update_id": 1, "message": "hi"},
        {"update_id": 1, "message": {"message_id": 1, "chat": "x"}},
        {"update_id": 1, "message": {"message_id": 1, "chat": {"type": "private"}}},
    ],
)
def test_malformed_updates_are_refused(bad: object) -> None:
    with pytest.raises(BadUpdate):
        translate(bad, bot_id=BOT)


def test_unknown_update_kinds_are_ignored() -> None:
    result = translate({"update_id": 9, "business_hologram": {"x": 1}}, bot_id=BOT)
    assert isinstance(result, Ignored) and "business_hologram" in result.reason


def _group_update(text: str, **extra: object) -> dict[str, object]:
    payload, _ = load("telegram", "group")
    message = {k: v for k, v in payload["message"].items() if k != "entities"}
    return {"update_id": 5, "message": {**message, "text": text, **extra}}


def test_a_leading_mention_is_removed_so_a_command_after_it_is_the_command() -> None:
    update = _group_update(
        "@hermes_bot /new", entities=[{"offset": 0, "length": 11, "type": "mention"}]
    )
    turn = translate(update, bot_id=BOT, bot_username=USERNAME)
    assert not isinstance(turn, Ignored) and turn.text == "/new"


def test_without_the_username_a_mention_is_not_recognised_but_a_reply_to_the_bot_is() -> None:
    mention = _group_update(
        "@hermes_bot hi", entities=[{"offset": 0, "length": 11, "type": "mention"}]
    )
    assert translate(mention, bot_id=BOT) == Ignored("not addressed to the bot")
    reply = _group_update("hi", reply_to_message={"message_id": 1, "from": {"id": int(BOT)}})
    assert not isinstance(translate(reply, bot_id=BOT), Ignored)


def test_a_mention_in_a_photo_caption_counts() -> None:
    payload, _ = load("telegram", "group")
    message = {k: v for k, v in payload["message"].items() if k not in ("entities", "text")}
    update = {
        "update_id": 6,
        "message": {
            **message,
            "caption": "@hermes_bot what is this?",
            "caption_entities": [{"offset": 0, "length": 11, "type": "mention"}],
            "photo": [{"file_id": "p1", "file_unique_id": "u", "width": 9, "height": 9}],
        },
    }
    turn = translate(update, bot_id=BOT, bot_username=USERNAME)
    assert not isinstance(turn, Ignored) and turn.text == "what is this?"


def test_private_chats_need_no_mention() -> None:
    payload, _ = load("telegram", "private")
    assert not isinstance(translate(payload, bot_id=BOT, bot_username=USERNAME), Ignored)
