"""Which characters belong to scripts written without spaces between words (Han, kana, Thai...).

Word tokenizers keep a run of such characters as one token, so text in them is searched by
substring instead. The query router uses these ranges; the store's trigram index takes a
superset of them (see `shared.search.sqlite.ddl`, checked against every code point).
"""

from __future__ import annotations

import re

# Code point ranges: Thai/Lao, Myanmar, Khmer, CJK radicals, kana, Bopomofo, Hangul, CJK
# ideographs (base, extension A, compatibility, extensions B-G) and half-width katakana.
# Hangul is spaced by words, but its particles glue onto them, so substrings matter there too.
UNSEGMENTED_RANGES: tuple[tuple[int, int], ...] = (
    (0x0E00, 0x0EFF),
    (0x1000, 0x109F),
    (0x1780, 0x17FF),
    (0x2E80, 0x2FDF),
    (0x3040, 0x30FF),
    (0x3100, 0x312F),
    (0x3130, 0x318F),
    (0x31F0, 0x31FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xAC00, 0xD7AF),
    (0xF900, 0xFAFF),
    (0xFF66, 0xFF9F),
    (0x20000, 0x3134F),
)

_CLASS = "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in UNSEGMENTED_RANGES)
_PATTERN = re.compile(f"[{_CLASS}]")


def has_unsegmented(text: str) -> bool:
    """True when `text` holds at least one character of an unsegmented script."""
    return _PATTERN.search(text) is not None


def char_class() -> str:
    """The ranges as one character class, `[...]`: the same text in a regex and a SQLite GLOB."""
    return f"[{_CLASS}]"
