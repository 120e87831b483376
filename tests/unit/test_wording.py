"""Counts in what users read agree with their number: 1 message, 2 messages, 1 minute."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from producers.cli.recap_view import render_recap
from shared.maintenance import ResetPolicy
from shared.model import MessageRecord, SessionRecord
from shared.wording import plural
from workers.sweeps.reset import describe


def test_plural() -> None:
    assert (plural(1, "message"), plural(0, "message")) == ("1 message", "0 messages")
    assert plural(12_345, "session") == "12,345 sessions"
    assert plural(12_345, "session", grouped=False) == "12345 sessions"
    assert (plural(1.0, "minute"), plural(1.5, "minute")) == ("1 minute", "1.5 minutes")
    assert plural(2, "reply", "replies") == "2 replies"


def test_the_idle_reset_reason_counts_minutes() -> None:
    assert describe("idle", ResetPolicy("idle", idle_minutes=1)) == "no messages for 1 minute"
    assert describe("idle", ResetPolicy("idle", idle_minutes=90)) == "no messages for 90 minutes"
    assert describe("idle", ResetPolicy("idle", idle_minutes=1.5)) == (
        "no messages for 1.5 minutes"
    )


def _recap(count: int, stored: int | None = None) -> str:
    """The panel for the last `count` messages of a session that holds `stored` in all."""
    session = SessionRecord("s", "cli", 0.0, 0.0, message_count=stored or count)
    said = [
        MessageRecord(i, "s", ("user", "assistant")[i % 2], f"text {i}", float(i))
        for i in range(count)
    ]
    out = StringIO()
    render_recap(Console(file=out, width=100), session, said, "full")
    return out.getvalue()


def test_the_recap_panel_counts_in_words_that_agree() -> None:
    one = _recap(1)
    assert "1 message" in one and "1 messages" not in one
    longer = _recap(4, stored=5)  # the oldest message was not read back
    assert "... 1 earlier message ..." in longer and "5 messages" in longer
