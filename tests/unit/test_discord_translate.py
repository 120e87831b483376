"""Discord MESSAGE_CREATE → turns, pinned by golden files of real gateway payloads."""

from __future__ import annotations

import pytest

from producers.discord.translate import BadMessage, Ignored, translate
from shared.turns import InboundTurn
from tests.fakes.golden import cases, check, load


@pytest.mark.parametrize("name", cases("discord"))
def test_golden(name: str) -> None:
    case, expected = load("discord", name)
    assert case["dispatch"]["t"] == "MESSAGE_CREATE"
    result = translate(
        case["dispatch"]["d"], channel=case["channel"], bot_user_id=case["bot_user_id"]
    )
    check(result, expected)


def test_the_golden_set_covers_the_issue() -> None:
    assert {"dm", "guild_channel", "thread"} <= set(cases("discord"))


def test_a_typed_command_in_a_channel_is_addressed() -> None:
    case, _ = load("discord", "guild_chatter")
    message = {**case["dispatch"]["d"], "content": "/sethome"}
    result = translate(message, channel=case["channel"], bot_user_id=case["bot_user_id"])
    assert isinstance(result, InboundTurn) and result.text == "/sethome"


def test_without_a_channel_object_a_guild_message_is_the_channel() -> None:
    case, _ = load("discord", "guild_channel")
    result = translate(case["dispatch"]["d"], channel=None, bot_user_id=case["bot_user_id"])
    assert isinstance(result, InboundTurn) and result.thread_id is None


@pytest.mark.parametrize(
    "bad",
    [[], {"id": "1", "channel_id": "2"}, {"id": "1", "author": {"id": "3"}}, {"author": {}}],
)
def test_malformed_messages_are_refused(bad: object) -> None:
    with pytest.raises(BadMessage):
        translate(bad, channel=None, bot_user_id="9")


def test_bot_authors_are_ignored_even_when_not_us() -> None:
    case, _ = load("discord", "dm")
    message = {**case["dispatch"]["d"], "author": {"id": "5", "username": "other", "bot": True}}
    assert isinstance(translate(message, channel=None, bot_user_id="9"), Ignored)
