"""The multi-host test's checks can fail (tests/fleet_checks.py; no namespaces needed)."""

from __future__ import annotations

import hashlib

from tests.fakes.telegram_api import Call, FakeTelegram
from tests.fleet_checks import (
    chat_id,
    check_read_back,
    check_sends,
    check_transcripts,
    key_of,
    label,
    photo,
    photo_blobs,
    repeated_after_sigkill,
)

TOKEN = "424242424:AAFakeTokenForTheNetnsFleet"


def test_fleet_netns_checks_catch_a_duplicate_a_reorder_and_a_double_send() -> None:
    """The checks above can fail: fed a transcript with a turn twice, one out of order and a
    reply sent twice, each says so (no namespaces needed)."""
    want = {key_of(0): [label(0, 0), label(0, 1)], key_of(1): [label(1, 0), label(1, 1)]}

    def pair(chat: int, n: int) -> list[tuple[str, str]]:
        return [("user", label(chat, n)), ("assistant", f"echo: {label(chat, n)} [m1]")]

    good = {key_of(0): pair(0, 0) + pair(0, 1), key_of(1): pair(1, 0) + pair(1, 1)}
    assert check_transcripts(good, want) == []
    twice = {**good, key_of(0): pair(0, 0) + pair(0, 0) + pair(0, 1)}
    reordered = {**good, key_of(1): pair(1, 1) + pair(1, 0)}
    unanswered = {**good, key_of(1): [*pair(1, 0), ("user", label(1, 1))]}
    for bad in (twice, reordered, unanswered):
        assert len(check_transcripts(bad, want)) == 1

    telegram = FakeTelegram(TOKEN)  # not served: only its record of sends is read
    sends = [(0, 0, "w3", 5.0), (0, 1, "w3", 6.0), (1, 0, "w3", 5.0), (1, 1, "w1", 9.0)]
    for chat, n, host, at in [*sends, (1, 1, "w2", 70.0)]:
        params = {"chat_id": chat_id(chat), "text": f"echo: {label(chat, n)} [m9]", "_ok": True}
        telegram.calls.append(Call("sendMessage", {**params, "_from": host, "_at": at}, at))
    sent_twice = [label(1, 0), label(1, 1), label(1, 1)]
    problem = f"{key_of(1)}: replies sent {sent_twice} != {want[key_of(1)]}"
    assert check_sends(telegram, want) == [problem]
    # The first copy came from w1 before it was killed at 10.0: the SIGKILL window.
    excused = repeated_after_sigkill(telegram, "w1", killed_at=10.0)
    assert excused == {(key_of(1), label(1, 1))}
    assert check_sends(telegram, want, excused) == []
    assert repeated_after_sigkill(telegram, "w1", killed_at=8.0) == frozenset()


def test_fleet_netns_attachment_checks_catch_a_missing_wrong_or_unreadable_blob() -> None:
    """The attachment checks can fail: a photo turn naming no blob, one naming other bytes, and
    a host that cannot read a blob or reads other bytes are each reported (no namespaces)."""
    good = hashlib.sha256(photo(0, 0)).hexdigest()
    other = hashlib.sha256(b"other").hexdigest()

    def said(ref: str) -> dict[str, list[tuple[str, str]]]:
        note = f"{label(0, 0)}\n\n[image: photo.jpg] ({ref}, image/jpeg)"
        return {key_of(0): [("user", note), ("assistant", "echo")]}

    wanted, problems = photo_blobs(said(f"blob:{good}"), [(0, 0)])
    assert (wanted, problems) == ({(0, 0): good}, [])
    assert len(photo_blobs(said("no reference"), [(0, 0)])[1]) == 1
    assert len(photo_blobs(said(f"blob:{other}"), [(0, 0)])[1]) == 1
    size = len(photo(0, 0))
    assert check_read_back("w1", wanted, {good: [good, size]}) == []
    for bad in ({good: None}, {}, {good: [other, size]}, {good: [good, size - 1]}, None):
        assert len(check_read_back("w1", wanted, bad)) == 1
