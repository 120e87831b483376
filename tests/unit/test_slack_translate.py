"""Slack events → turns, pinned by golden files of real Events API payloads."""

from __future__ import annotations

import pytest

from producers.slack.translate import BadEvent, Ignored, translate, translate_command
from shared.turns import InboundTurn
from tests.fakes.golden import cases, check, load


@pytest.mark.parametrize("name", cases("slack"))
def test_golden(name: str) -> None:
    payload, expected = load("slack", name)
    check(translate(payload), expected)
    if "same_event_as" in expected:
        first, _ = load("slack", expected["same_event_as"])
        assert translate(first) == translate(payload)


def test_the_golden_set_covers_the_issue() -> None:
    wanted = {"dm", "channel_app_mention", "channel_message_mention", "thread"}
    assert wanted <= set(cases("slack"))


def test_a_mention_then_a_command_is_the_command() -> None:
    payload, _ = load("slack", "channel_app_mention")
    payload["event"]["text"] = "<@U0BOT0001> /new my project"
    result = translate(payload)
    assert isinstance(result, InboundTurn) and result.text == "/new my project"


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"type": "event_callback"},
        {"type": "event_callback", "event": {"type": "message", "channel": "D1", "ts": "1"}},
        {"type": "event_callback", "event": {"type": "message", "user": "U1", "ts": "1"}},
    ],
)
def test_malformed_events_are_refused(bad: object) -> None:
    with pytest.raises(BadEvent):
        translate(bad)


def test_other_callbacks_are_ignored() -> None:
    assert isinstance(translate({"type": "app_rate_limited", "minute_rate_limited": 1}), Ignored)


FORM = {
    "token": "gIkuvaNzQIHg97ATvDxqgjtO",
    "team_id": "T0001ABCD",
    "team_domain": "example",
    "channel_id": "C0GENERAL",
    "channel_name": "general",
    "user_id": "U0ANN0001",
    "user_name": "ann",
    "api_app_id": "A0APP0001",
    "is_enterprise_install": "false",
    "response_url": "https://hooks.slack.com/commands/1234/5678",
    "trigger_id": "13345224609.738474920.8088930838d88f008e0",
}


@pytest.mark.parametrize(
    ("command", "text", "want"),
    [
        ("/new", "my project", "/new my project"),
        ("/hermes", "title reading list", "/title reading list"),
        ("/hermes", "what is the time?", "what is the time?"),
        ("/sethome", "", "/sethome"),
    ],
)
def test_slash_commands(command: str, text: str, want: str) -> None:
    result = translate_command({**FORM, "command": command, "text": text})
    assert isinstance(result, InboundTurn)
    assert result.text == want
    assert result.event_id == "T0001ABCD:cmd:13345224609.738474920.8088930838d88f008e0"
    assert (result.chat_id, result.chat_type, result.user_id) == (
        "C0GENERAL",
        "channel",
        "U0ANN0001",
    )
