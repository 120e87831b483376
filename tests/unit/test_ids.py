"""Session ids: `YYYYMMDD_HHMMSS_<hex>`, 6 hex digits for CLI, 8 for gateway, stamped in UTC."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from shared.ids import looks_like_session_id, new_session_id

WHEN = datetime(2024, 3, 9, 7, 5, 2, tzinfo=UTC)


def test_cli_id_has_six_hex_digits() -> None:
    sid = new_session_id(WHEN)
    assert re.fullmatch(r"20240309_070502_[0-9a-f]{6}", sid), sid


def test_gateway_id_has_eight_hex_digits() -> None:
    sid = new_session_id(WHEN, gateway=True)
    assert re.fullmatch(r"20240309_070502_[0-9a-f]{8}", sid), sid


@pytest.mark.parametrize(
    ("offset_hours", "expected_stamp"),
    [(9, "20240308_220502"), (-5, "20240309_120502"), (0, "20240309_070502")],
)
def test_timestamp_is_utc_whatever_the_zone_of_now(offset_hours: int, expected_stamp: str) -> None:
    # 07:05:02 on the wall clock of a zone `offset_hours` east of UTC.
    wall = WHEN.replace(tzinfo=timezone(timedelta(hours=offset_hours)))
    assert new_session_id(wall).startswith(expected_stamp + "_")


def test_the_same_instant_gives_the_same_stamp_in_every_zone() -> None:
    stamps = {
        new_session_id(WHEN.astimezone(timezone(timedelta(hours=h))))[:15] for h in range(-12, 15)
    }
    assert stamps == {"20240309_070502"}


def test_midnight_in_tokyo_is_the_previous_day_in_utc() -> None:
    tokyo = datetime(2024, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=9)))
    assert new_session_id(tokyo).startswith("20231231_153000_")


def test_ids_are_random_within_one_second() -> None:
    ids = {new_session_id(WHEN, gateway=True) for _ in range(200)}
    assert len(ids) == 200


def test_new_ids_look_like_ids() -> None:
    assert looks_like_session_id(new_session_id(WHEN))
    assert looks_like_session_id(new_session_id(WHEN, gateway=True))


@pytest.mark.parametrize(
    "text",
    [
        "20240309_070502_abcdef0",  # 7 hex digits: neither a CLI nor a gateway id
        "20240309_070502_abcde",
        "20240309_070502_abcdef012",
        "20240309_070502_ABCDEF",
        "20240309_070502_abcdeg",
        "20240309070502_abcdef",
        "20240309_070502_abcdef\n",  # `$` would accept a trailing newline
        " 20240309_070502_abcdef",
        "my project",
        "",
    ],
)
def test_not_ids(text: str) -> None:
    assert not looks_like_session_id(text)
