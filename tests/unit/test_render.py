"""How `hermes sessions` renders: relative times, sizes, cropping and the listing table."""

from __future__ import annotations

from datetime import datetime

import pytest
from rich.cells import cell_len

from producers.cli.render import (
    crop,
    human_bytes,
    listing_table,
    plain_lines,
    relative_time,
)
from shared.model import SessionRecord
from shared.store.session_listing import SessionListing

NOW = 1_750_000_000.0
MIN, HOUR, DAY = 60, 3600, 86_400


@pytest.mark.parametrize(
    ("ago", "shown"),
    [
        (0, "just now"),
        (59.9, "just now"),
        (-30, "just now"),  # a clock slightly behind the writer's
        (60, "1m ago"),
        (5 * MIN + 59, "5m ago"),
        (59 * MIN + 59, "59m ago"),
        (HOUR, "1h ago"),
        (3 * HOUR + 5 * MIN, "3h ago"),
        (DAY - 1, "23h ago"),
        (DAY, "yesterday"),
        (2 * DAY - 1, "yesterday"),
        (2 * DAY, "2d ago"),
        (3 * DAY + HOUR, "3d ago"),
        (7 * DAY - 1, "6d ago"),
    ],
)
def test_relative_time(ago: float, shown: str) -> None:
    assert relative_time(NOW - ago, NOW) == shown


@pytest.mark.parametrize("ago", [7 * DAY, 30 * DAY, 400 * DAY])
def test_relative_time_falls_back_to_the_date(ago: float) -> None:
    expected = datetime.fromtimestamp(NOW - ago).strftime("%Y-%m-%d")
    assert relative_time(NOW - ago, NOW) == expected


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KB"),
        (1536, "1.5 KB"),
        (5 * 1024**2, "5.0 MB"),
        (3 * 1024**3, "3.0 GB"),
        (2048 * 1024**3, "2048.0 GB"),
    ],
)
def test_human_bytes(size: int, shown: str) -> None:
    assert human_bytes(size) == shown


def test_crop_counts_terminal_cells() -> None:
    assert crop("short", 10) == "short"
    assert crop("abcdefghijkl", 6) == "abcde…"
    cropped = crop("東京の天気を調べる", 9)
    assert cropped.endswith("…") and cell_len(cropped) <= 9


def listing(
    session_id: str, *, title: str | None, preview: str, ago: float, source: str = "cli"
) -> SessionListing:
    record = SessionRecord(
        id=session_id, source=source, started_at=NOW - ago, last_active_at=NOW - ago, title=title
    )
    return SessionListing(record, preview)


def test_listing_table_without_titles_has_a_source_column() -> None:
    headers, rows = listing_table(
        [
            listing("s1", title=None, preview="hi", ago=30, source="slack"),
            listing("s2", title=None, preview="", ago=3 * HOUR),
        ],
        NOW,
    )
    assert headers == ["Preview", "Last Active", "Src", "ID"]
    assert rows == [["hi", "just now", "slack", "s1"], ["—", "3h ago", "cli", "s2"]]


def test_listing_table_with_a_title_has_a_title_column() -> None:
    headers, rows = listing_table(
        [
            listing("s1", title=None, preview="hi", ago=300),
            listing("s2", title="我的项目", preview="你好", ago=DAY + 5),
        ],
        NOW,
    )
    assert headers == ["Title", "Preview", "Last Active", "ID"]
    assert rows == [["—", "hi", "5m ago", "s1"], ["我的项目", "你好", "yesterday", "s2"]]


def test_plain_lines_align_by_cells_and_keep_headers() -> None:
    lines = plain_lines(
        ["Title", "Preview", "ID"],
        [["我的项目", "你好", "a1"], ["plain", "x", "b2"], ["z" * 80, "long", "c3"]],
    )
    assert lines[0].split() == ["Title", "Preview", "ID"]
    # Every id starts in the same terminal column once CJK double width is counted.
    ids = ["a1", "b2", "c3"]
    columns = {cell_len(line[: line.index(i)]) for line, i in zip(lines[1:], ids, strict=True)}
    assert len(columns) == 1
    assert "…" in lines[3] and cell_len(lines[3].split("  ")[0]) <= 40
    assert all(line == line.rstrip() for line in lines)
