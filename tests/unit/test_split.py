"""Splitting long replies: within each platform's limit, at natural breaks, nothing lost."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.platforms import registry
from shared.platforms.descriptor import Platform
from shared.platforms.telegram import PLATFORM as TELEGRAM
from workers.delivery.split import chars, split_for, split_text, utf16_units

TELEGRAM_LIMIT = TELEGRAM.message_limit


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_short_text_is_one_part() -> None:
    assert split_text("  hello  ", 10) == ["hello"]
    assert split_text("   \n ", 10) == []


def test_paragraphs_then_lines_then_words() -> None:
    text = "a" * 30 + "\n\n" + "b" * 30 + "\n" + "c" * 10 + " " + "d" * 10
    assert split_text(text, 56) == ["a" * 30, "b" * 30 + "\n" + "c" * 10 + " " + "d" * 10]
    # a paragraph break in the first half of the window loses to a later line break
    assert split_text(text, 64)[0] == "a" * 30 + "\n\n" + "b" * 30
    assert split_text("x" * 10 + "\n" + "y" * 10 + " " + "z" * 10, 25) == [
        "x" * 10 + "\n" + "y" * 10,
        "z" * 10,
    ]


def test_a_word_longer_than_the_limit_is_cut() -> None:
    assert split_text("w" * 25, 10) == ["w" * 10, "w" * 10, "w" * 5]


def test_telegram_counts_utf16_and_never_cuts_a_surrogate_pair() -> None:
    text = "😀" * 3000  # each is two UTF-16 units: 6000 units, 3000 characters
    parts = split_text(text, TELEGRAM_LIMIT, utf16_units)
    assert [utf16_units(p) for p in parts] == [4096, 1904]
    assert "".join(parts) == text
    odd = "a" + "😀" * 10
    parts = split_text(odd, 4, utf16_units)
    assert parts == ["a😀", "😀😀", "😀😀", "😀😀", "😀😀", "😀"]
    for part in parts:  # every part is valid text by itself
        part.encode("utf-16-le").decode("utf-16-le")


def test_utf16_units() -> None:
    assert utf16_units("abc") == 3
    assert utf16_units("é") == 1
    assert utf16_units("𝄞") == 2


@pytest.mark.parametrize("platform", list(registry.platforms().values()), ids=registry.names())
def test_platform_limits_hold_on_a_long_reply(platform: Platform) -> None:
    paragraph = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. 🚀 " * 20
    text = "\n\n".join([paragraph] * 30)
    parts = split_for(platform, text)
    measure = utf16_units if platform.utf16 else chars
    assert len(parts) > 1
    assert all(measure(p) <= platform.message_limit for p in parts)
    assert _squash("".join(parts)) == _squash(text)
    assert all(p == p.strip() for p in parts)


@given(
    st.text(alphabet=st.sampled_from(list("ab \n😀é")), max_size=400),
    st.integers(min_value=2, max_value=50),
)
def test_any_text_splits_within_the_limit_losing_nothing_but_break_whitespace(
    text: str, limit: int
) -> None:
    for measure in (chars, utf16_units):
        parts = split_text(text, limit, measure)
        assert all(0 < measure(p) <= limit for p in parts)
        assert _squash("".join(parts)) == _squash(text)
