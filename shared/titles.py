"""Session titles: cleaning, length, provenance ranks, lineage numbering ("x", "x #2", "x #3"),
and the distinct form of a title another, unrelated session holds ("x (2)", "x (3)")."""

from __future__ import annotations

import re
import unicodedata
from enum import IntEnum

MAX_TITLE_CHARS = 100

# Invisible or direction-changing characters that make two titles look alike or reorder text:
# zero-width and marks (U+200B–200F), bidi embeddings/overrides (U+202A–202E), isolates
# (U+2066–2069), the Arabic letter mark, word joiner and the other invisible format characters
# of U+2060–206F, the soft hyphen, the combining grapheme joiner, the Mongolian vowel
# separator, interlinear annotation marks, the BOM — and lone surrogates, which are not text
# at all (undecodable bytes in argv arrive as U+DC80–DCFF and cannot be stored as UTF-8).
_INVISIBLE = (
    "\u00ad\u034f\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\ufeff\ufff9-\ufffb\ud800-\udfff"
)
_INVISIBLE_RE = re.compile(f"[{_INVISIBLE}]")
# Control characters that separate words (tab, line and page breaks, NEL) become spaces;
# every other C0/C1 control goes.
_BREAK_RE = re.compile("[\t\n\x0b\x0c\r\x1c-\x1f\x85]")
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f]")
_SPACE_RE = re.compile(r"\s+")
_LINEAGE_RE = re.compile(r"^(?P<base>.*?) #(?P<n>[1-9]\d{0,6})$")


class TitleError(ValueError):
    """A title that cannot be used: empty after cleaning, or too long."""


class TitleSource(IntEnum):
    """Who named a session. A lower rank never overwrites a higher one."""

    DERIVED = 1  # inherited through compression ("x" -> "x #2")
    AUTO = 2  # the auxiliary model or the offline heuristic
    USER = 3  # /title, `hermes sessions rename`, /new NAME

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def from_label(cls, label: str | None) -> TitleSource | None:
        return cls[label.upper()] if label else None


def clean_title(raw: str) -> str:
    """Strip controls and invisible characters, collapse whitespace; keep all other Unicode."""
    text = _INVISIBLE_RE.sub("", raw)
    text = _BREAK_RE.sub(" ", text)  # collapsed below
    text = _CONTROL_RE.sub("", text)
    # NFC last, so a removed character cannot keep a letter and its accent apart.
    return _SPACE_RE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def validate_title(raw: str) -> str:
    """The cleaned title, or TitleError saying what is wrong with it."""
    title = clean_title(raw)
    if not title:
        raise TitleError("A title needs at least one visible character.")
    if len(title) > MAX_TITLE_CHARS:
        raise TitleError(
            f"Title is {len(title)} characters; the limit is {MAX_TITLE_CHARS} after cleaning."
        )
    return title


def lineage_base(title: str) -> str:
    """ "my project #3" → "my project"; a title without a number is its own base."""
    match = _LINEAGE_RE.match(title)
    return match.group("base") if match else title


def lineage_number(title: str) -> int:
    match = _LINEAGE_RE.match(title)
    return int(match.group("n")) if match else 1


# The longest suffix numbering makes (" #" and up to 7 digits, as _LINEAGE_RE allows).
_MAX_SUFFIX = len(" #") + 7


def numbered(base: str, n: int) -> str:
    """The n-th title of a lineage, shortening the base so the result stays within the limit."""
    if n <= 1:
        return base
    suffix = f" #{n}"
    return base[: MAX_TITLE_CHARS - len(suffix)].rstrip() + suffix


def in_lineage(title: str, base: str) -> bool:
    """True when `title` is `base` or its n-th title, including one whose base was shortened
    to fit the limit (a 100-character "x" continues as "x"[:97] + " #2")."""
    if title == base:
        return True
    n = lineage_number(title)
    return n > 1 and numbered(base, n) == title


def lineage_prefix(base: str) -> str:
    """A prefix every numbered title of `base`'s lineage starts with (for a LIKE pre-filter)."""
    if len(base) + _MAX_SUFFIX <= MAX_TITLE_CHARS:
        return base + " #"
    return base[: MAX_TITLE_CHARS - _MAX_SUFFIX].rstrip()


def next_in_lineage(title: str, taken: set[str]) -> str:
    """The first free numbered title after `title`'s lineage members in `taken`."""
    base = lineage_base(title)
    highest = max((lineage_number(t) for t in taken if in_lineage(t, base)), default=1)
    n = max(highest, lineage_number(title)) + 1
    while numbered(base, n) in taken:
        n += 1
    return numbered(base, n)


# An unrelated session's automatic title that another session holds becomes "x (2)": a form
# that is not the continuation form "x #2", so it never looks like a member of x's lineage.
_MAX_DISTINCT_SUFFIX = len(" ()") + 7


def distinct(base: str, n: int) -> str:
    """The n-th distinct form of `base`, shortened to stay within the limit ("x (2)")."""
    suffix = f" ({n})"
    return base[: MAX_TITLE_CHARS - len(suffix)].rstrip() + suffix


def distinct_prefix(base: str) -> str:
    """A prefix every distinct form of `base` starts with (for a LIKE pre-filter)."""
    if len(base) + _MAX_DISTINCT_SUFFIX <= MAX_TITLE_CHARS:
        return base + " ("
    return base[: MAX_TITLE_CHARS - _MAX_DISTINCT_SUFFIX].rstrip()


def next_distinct(title: str, taken: set[str]) -> str:
    """The first distinct form of `title` ("x (2)", then "x (3)" …) not in `taken`."""
    n = 2
    while distinct(title, n) in taken:
        n += 1
    return distinct(title, n)
