"""Session titles: cleaning, length, provenance ranks, lineage numbering ("x", "x #2", "x #3")."""

from __future__ import annotations

import re
import unicodedata
from enum import IntEnum

MAX_TITLE_CHARS = 100

# Invisible or direction-changing characters that make two titles look alike or reorder text:
# zero-width and marks (U+200B–200F), bidi embeddings/overrides (U+202A–202E), isolates
# (U+2066–2069), the Arabic letter mark, word joiner and friends, and the BOM.
_INVISIBLE = "\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\u061c\u180e\ufeff"
_INVISIBLE_RE = re.compile(f"[{_INVISIBLE}]")
_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
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
    text = unicodedata.normalize("NFC", raw)
    text = _INVISIBLE_RE.sub("", text)
    # Tabs and newlines become spaces (collapsed below); other controls go.
    text = text.replace("\t", " ").replace("\n", " ").replace("\r", " ")
    text = _CONTROL_RE.sub("", text)
    return _SPACE_RE.sub(" ", text).strip()


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


def numbered(base: str, n: int) -> str:
    """The n-th title of a lineage, shortening the base so the result stays within the limit."""
    if n <= 1:
        return base
    suffix = f" #{n}"
    return base[: MAX_TITLE_CHARS - len(suffix)].rstrip() + suffix


def next_in_lineage(title: str, taken: set[str]) -> str:
    """The first free numbered title after `title`'s lineage members in `taken`."""
    base = lineage_base(title)
    highest = max((lineage_number(t) for t in taken if lineage_base(t) == base), default=1)
    n = max(highest, lineage_number(title)) + 1
    while numbered(base, n) in taken:
        n += 1
    return numbered(base, n)
