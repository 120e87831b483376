"""The triggers' byte-level test for unsegmented text covers every code point of the ranges."""

from __future__ import annotations

import sqlite3

from shared.search.sqlite.ddl import has_unsegmented_sql
from shared.unsegmented import UNSEGMENTED_RANGES, has_unsegmented


def _misses(texts: list[str]) -> list[str]:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t(role TEXT, content TEXT)")
    db.executemany("INSERT INTO t VALUES ('user', ?)", [(text,) for text in texts])
    rows = db.execute(f"SELECT content FROM t WHERE NOT {has_unsegmented_sql('t')}").fetchall()
    return [row[0] for row in rows]


def test_every_code_point_of_the_ranges_is_indexed() -> None:
    chars = [
        chr(cp)
        for lo, hi in UNSEGMENTED_RANGES
        for cp in range(lo, hi + 1)
        if not 0xD800 <= cp <= 0xDFFF
    ]
    assert all(has_unsegmented(ch) for ch in chars)
    assert _misses(chars) == []
    assert _misses([f"a long English line, then {ch}" for ch in chars[::97]]) == []


def test_common_non_cjk_text_stays_out() -> None:
    samples = [
        "plain ascii text with unix and nix and nik",
        "it’s “quoted” — with… dashes • and bullets",
        "café naïve façade Straße",
        "Tiếng Việt có dấu",  # Latin Extended Additional (E1 B8-BB)
        "Привет, как дела?",
        "Γειά σου κόσμε",
        "مرحبا بالعالم",
        "party 🎉🔥👍",
        "→ ← ↑ ↓ ─ │ ┌ ┐ ✓ ✗ ★",
    ]
    assert sorted(_misses(samples)) == sorted(samples)
    assert not any(has_unsegmented(text) for text in samples)


def test_tool_output_is_judged_on_what_gets_indexed() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t(role TEXT, content TEXT)")
    db.execute("INSERT INTO t VALUES ('tool', ?)", ("x" * 5000 + "中文",))
    db.execute("INSERT INTO t VALUES ('user', ?)", ("x" * 5000 + "中文",))
    rows = db.execute(f"SELECT role FROM t WHERE {has_unsegmented_sql('t')}").fetchall()
    assert rows == [("user",)]
