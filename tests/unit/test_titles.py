"""Titles (DESIGN.md §3): cleaning, the 100-character limit, provenance ranks, lineage numbering."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.titles import (
    MAX_TITLE_CHARS,
    TitleError,
    TitleSource,
    clean_title,
    in_lineage,
    lineage_base,
    lineage_number,
    next_in_lineage,
    numbered,
    validate_title,
)

# Every character the design names: zero-width and marks, bidi embeddings/overrides,
# isolates, the Arabic letter mark, the BOM; plus the word joiner and soft hyphen.
NAMED_INVISIBLE = [
    *map(chr, range(0x200B, 0x2010)),
    *map(chr, range(0x202A, 0x202F)),
    *map(chr, range(0x2066, 0x206A)),
    "\u061c",
    "\ufeff",
    "\u2060",
    "\u00ad",
]
C0_C1 = [chr(c) for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)]]


@pytest.mark.parametrize("char", NAMED_INVISIBLE, ids=lambda c: f"U+{ord(c):04X}")
def test_invisible_and_bidi_characters_are_removed(char: str) -> None:
    assert clean_title(f"my{char}project{char}") == "myproject"


@pytest.mark.parametrize("char", C0_C1, ids=lambda c: f"U+{ord(c):04X}")
def test_control_characters_never_survive(char: str) -> None:
    cleaned = clean_title(f"alpha{char}beta")
    assert char not in cleaned
    # A control either disappears or (line/page breaks, tabs) separates the words.
    assert cleaned in {"alphabeta", "alpha beta"}


@pytest.mark.parametrize("char", ["\t", "\n", "\r", "\x0b", "\x0c", "\x85", "\u2028"])
def test_line_breaks_and_tabs_separate_words(char: str) -> None:
    assert clean_title(f"line{char}break") == "line break"


def test_bidi_override_cannot_reorder_a_title() -> None:
    # "txt.exe" shown as "exe.txt" by a right-to-left override: the override goes.
    assert clean_title("report\u202eexe.txt\u202c") == "reportexe.txt"


def test_whitespace_is_collapsed_and_trimmed() -> None:
    assert clean_title("  many \t\n  spaces\u3000\u00a0here  ") == "many spaces here"


@pytest.mark.parametrize(
    "title",
    [
        "東京の会議メモ",
        "用户反馈 汇总",
        "한국어 제목",
        "🎉 launch day 🚀",
        "👍🏽 thumbs",
        "❤️ love",  # U+FE0F variation selector stays
        "flag 🇯🇵",
        "Crème brûlée à la carte",
        "Ελληνικά και ÅÄÖ",
        "مرحبا بالعالم",
        "שלום עולם",
        "Zürich — “quotes” • bullets…",
        "math ∑ ≤ ∞",
    ],
)
def test_other_unicode_stays(title: str) -> None:
    assert clean_title(title) == title
    assert validate_title(title) == title


def test_decomposed_accents_equal_composed_ones() -> None:
    assert clean_title("cafe\u0301") == clean_title("café") == "café"


def test_removed_character_does_not_keep_an_accent_apart() -> None:
    assert clean_title("e\u200b\u0301") == "\u00e9"


@given(st.text())
def test_cleaning_is_idempotent_and_leaves_nothing_forbidden(raw: str) -> None:
    cleaned = clean_title(raw)
    assert clean_title(cleaned) == cleaned
    assert cleaned == cleaned.strip()
    assert "  " not in cleaned
    for char in cleaned:
        assert char not in NAMED_INVISIBLE
        assert unicodedata.category(char) not in {"Cc", "Cs"}


@given(
    st.text(
        st.characters(categories=("L", "N", "S", "P"), exclude_characters="\u00ad"),
        min_size=1,
        max_size=50,
    )
)
def test_visible_text_is_only_normalised(raw: str) -> None:
    assert clean_title(raw) == unicodedata.normalize("NFC", raw)


def test_limit_is_counted_after_cleaning() -> None:
    exact = "x" * MAX_TITLE_CHARS
    assert validate_title(exact) == exact
    padded = "\u200b".join(exact) + "\u202e  \n"
    assert validate_title(padded) == exact
    with pytest.raises(TitleError, match="101 characters"):
        validate_title("x" * (MAX_TITLE_CHARS + 1))


def test_limit_counts_characters_not_bytes() -> None:
    title = "界" * MAX_TITLE_CHARS
    assert validate_title(title) == title


@pytest.mark.parametrize("raw", ["", "   ", "\u200b\u200d\ufeff", "\x00\x1b\x7f", "\u202e\u2066"])
def test_nothing_visible_is_an_error(raw: str) -> None:
    with pytest.raises(TitleError, match="visible"):
        validate_title(raw)


def test_provenance_ranks_derived_below_auto_below_user() -> None:
    assert TitleSource.DERIVED < TitleSource.AUTO < TitleSource.USER
    for source in TitleSource:
        assert TitleSource.from_label(source.label) is source
    assert TitleSource.from_label(None) is None


@pytest.mark.parametrize(
    ("title", "base", "number"),
    [
        ("my project", "my project", 1),
        ("my project #2", "my project", 2),
        ("my project #13", "my project", 13),
        ("a #2 #3", "a #2", 3),
        ("#3", "#3", 1),
        ("x #0", "x #0", 1),
        ("x #02", "x #02", 1),
        ("x#2", "x#2", 1),
    ],
)
def test_lineage_base_and_number(title: str, base: str, number: int) -> None:
    assert lineage_base(title) == base
    assert lineage_number(title) == number


def test_numbering_goes_two_then_three() -> None:
    assert next_in_lineage("my project", {"my project"}) == "my project #2"
    assert next_in_lineage("my project", {"my project", "my project #2"}) == "my project #3"
    assert next_in_lineage("my project #2", {"my project", "my project #2"}) == "my project #3"


def test_numbering_continues_after_the_highest_member() -> None:
    taken = {"x", "x #2", "x #5"}
    assert next_in_lineage("x #2", taken) == "x #6"


def test_other_lineages_do_not_count() -> None:
    taken = {"x", "xy #7", "x #2 notes", "y #4"}
    assert next_in_lineage("x", taken) == "x #2"


def test_numbering_a_base_at_the_limit_stays_within_it() -> None:
    base = "b" * MAX_TITLE_CHARS
    second = next_in_lineage(base, {base})
    assert len(second) <= MAX_TITLE_CHARS
    assert second.endswith(" #2")
    third = next_in_lineage(base, {base, second})
    assert len(third) <= MAX_TITLE_CHARS
    assert third.endswith(" #3")
    assert in_lineage(second, base)
    assert in_lineage(third, base)


def test_shortened_base_ends_without_a_space() -> None:
    base = "w" * 96 + "   tail"
    title = numbered(base, 2)
    assert title == "w" * 96 + " #2"
    assert validate_title(title) == title


@given(
    st.text(min_size=1, max_size=120).map(clean_title).filter(bool).map(lambda t: t[:100]),
    st.integers(min_value=2, max_value=9_999_999),
)
def test_numbered_titles_fit_and_belong_to_their_lineage(base: str, n: int) -> None:
    base = base.strip()
    title = numbered(base, n)
    assert len(title) <= MAX_TITLE_CHARS
    assert title.endswith(f" #{n}")
    assert lineage_number(title) == n
    assert in_lineage(title, base)
    assert in_lineage(base, base)


def test_in_lineage_rejects_strangers() -> None:
    assert not in_lineage("x #2 notes", "x")
    assert not in_lineage("xy #2", "x")
    assert not in_lineage("x", "x #2")
