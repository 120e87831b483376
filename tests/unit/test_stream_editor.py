"""The stream editor's decisions (workers/stream_edits.py), against a recording sender twin:
what it posts and edits, what a rate limit, a claim or a failure does."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.pipeline.inbox import TurnRow
from shared.pipeline.outbox import OutboxRow
from shared.settings import SettingsError, load_settings
from workers.delivery.base import LiveEditor, RetryLater
from workers.delivery.live_message import LocalLiveMessages, MessageGone, Placement
from workers.stream_edits import StreamEditor


class Recording:
    """A LiveEditor twin: keeps what it was asked; `refuse` raises the next call's error."""

    def __init__(self) -> None:
        self.live = LocalLiveMessages()
        self.stream_interval = 0.01
        self.calls: list[tuple[str, str, str]] = []
        self.refuse: list[Exception] = []

    def post_live(self, row: OutboxRow, text: str) -> str:
        if self.refuse:
            raise self.refuse.pop(0)
        self.calls.append(("post", "m1", text))
        return "m1"

    def edit_live(self, row: OutboxRow, message_id: str, text: str) -> None:
        if self.refuse:
            raise self.refuse.pop(0)
        self.calls.append(("edit", message_id, text))


def _turn(platform: str = "telegram") -> TurnRow:
    return TurnRow(
        id=7, platform=platform, event_id="e", session_key="k", seq=1, kind="message",
        chat_id="42", chat_type="dm", text="hi", status="running", attempts=1,
        received_at=0.0, message_id="9",
    )  # fmt: skip


def test_the_sender_twin_is_a_live_editor() -> None:
    assert isinstance(Recording(), LiveEditor)


def test_posts_once_then_edits_only_when_the_text_changed() -> None:
    sender = Recording()
    editor = StreamEditor(sender, sender.live, _turn())
    assert editor.step()  # nothing written yet: nothing sent
    editor.text("Hello")
    assert editor.step()
    assert editor.step()  # unchanged
    editor.text("Hello there")
    assert editor.step()
    assert sender.calls == [("post", "m1", "Hello"), ("edit", "m1", "Hello there")]
    assert sender.live.placed(7) == Placement("42", None, "m1")


def test_a_rate_limit_skips_the_edit_and_the_next_one_carries_newer_text() -> None:
    sender = Recording()
    editor = StreamEditor(sender, sender.live, _turn())
    editor.text("one")
    editor.step()
    sender.refuse.append(RetryLater(0.5, "bucket empty"))
    editor.text("one two")
    assert editor.step()
    editor.text("one two three")
    assert editor.step()
    assert [c[2] for c in sender.calls] == ["one", "one two three"]


def test_a_previous_attempts_message_is_edited_not_posted_again() -> None:
    sender = Recording()
    sender.live.place(7, Placement("42", None, "m0"))
    editor = StreamEditor(sender, sender.live, _turn())
    editor.text("again")
    editor.step()
    assert sender.calls == [("edit", "m0", "again")]


def test_edits_stop_once_the_outbox_claimed_the_message_or_on_a_failure() -> None:
    sender = Recording()
    editor = StreamEditor(sender, sender.live, _turn())
    editor.text("a")
    editor.step()
    sender.live.claim(7, 100)
    editor.text("a stale b")
    assert not editor.step()
    assert sender.calls == [("post", "m1", "a")]

    other = Recording()
    failing = StreamEditor(other, other.live, _turn())
    failing.text("a")
    failing.step()
    other.refuse.append(MessageGone("deleted"))
    failing.text("a b")
    assert not failing.step()


def test_the_preview_is_the_first_part_at_the_platforms_limit() -> None:
    sender = Recording()
    editor = StreamEditor(sender, sender.live, _turn("discord"))
    editor.text("word " * 1000)
    editor.step()
    (call,) = sender.calls
    assert 0 < len(call[2]) <= 2000


def test_stream_edit_settings_default_off_and_a_too_fast_interval_is_refused(
    tmp_path: Path,
) -> None:
    env = {"HERMES_HOME": str(tmp_path)}
    conf = load_settings(env).platforms.telegram
    assert conf.stream_edits is False and conf.stream_edit_interval == 1.0
    with pytest.raises(SettingsError, match="stream_edit_interval"):
        load_settings({**env, "HERMES_PLATFORMS__SLACK__STREAM_EDIT_INTERVAL": "0.01"})
