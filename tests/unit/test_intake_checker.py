"""A receiver's Checker (producers/intake.py) checks and keys turns as `checked` does, with the
settings it needs read once: a platform's shared rooms, the text limit, per-user groups."""

from __future__ import annotations

import pytest

from producers.intake import Checker, checked, key_for
from shared.settings import Settings
from shared.turns import InboundTurn, TurnRejected


def group_turn(chat_id: str, *, user_id: str = "u1", text: str = "hello") -> InboundTurn:
    return InboundTurn("telegram", chat_id, "group", f"e-{chat_id}", text, user_id=user_id)


def test_shared_rooms_and_per_user_groups_come_from_the_settings() -> None:
    settings = Settings(platforms={"telegram": {"shared_rooms": ["-100"]}})
    checker = Checker(settings)
    shared, own = group_turn("-100"), group_turn("-200")
    for turn in (shared, own, shared):  # the second ask of a platform uses what it read
        assert checker(turn).key == checked(turn, settings).key == key_for(turn, settings)
    assert checker(shared).key.shared and not checker(shared).key.key.endswith(":u1")
    assert not checker(own).key.shared and checker(own).key.key.endswith(":u1")
    per_room = Checker(Settings(group_sessions_per_user=False))
    assert per_room(own).key.shared and not per_room(own).key.key.endswith(":u1")


def test_a_checker_refuses_what_checked_refuses() -> None:
    settings = Settings(pipeline={"max_text_chars": 10})
    checker = Checker(settings)
    for bad in (
        group_turn("c\n1"),
        group_turn("c1", user_id="u\x001"),
        group_turn("c1", text="x" * 11),
    ):
        with pytest.raises(TurnRejected):
            checked(bad, settings)
        with pytest.raises(TurnRejected):
            checker(bad)
    assert checker(group_turn("c1", text="x" * 10)).turn.text == "x" * 10
