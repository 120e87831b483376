"""SQLite DDL of the search indexes that revision 0003 adds: the substring (trigram) index.

`messages_fts` (revision 0001) indexes words with unicode61. unicode61 keeps a run of Han, kana,
Thai... characters as one token, so "中文" is not found inside "我喜欢中文". Messages holding any
character of an unsegmented script are therefore also indexed in `messages_cjk`, an FTS5
trigram table, external content over a view, kept by plain SQL triggers (no app-defined
function, so any connection, the sqlite3 shell included, keeps it right).

The index keeps no positions (`detail=none`): at 1.5M messages (~100k with CJK) it is 76 MB
instead of 150 MB with positions (124 MB with `detail=column`). A search therefore asks it for
the rows holding all of a term's trigrams and checks the text itself (`instr`) before a row
counts; see `shared.search.sqlite.backend`.

The indexed text is padded with two spaces: every occurrence of a 1- or 2-character string
then begins some trigram, so a short query can be answered from the index's vocabulary.
"""

from __future__ import annotations

from sqlalchemy import Connection

from shared.db.sqlite import FTS_TOOL_OUTPUT_CAP

# Appended to the indexed text so that every 1-2 character substring starts a trigram.
PAD = "  "

# Which messages go into the trigram index, decided by plain SQL in the triggers. A GLOB with
# the characters' ranges costs ~0.5 µs per character (1.8 ms for a 4 KB tool output), so the
# test works on bytes instead: text that is pure ASCII is out at once (its character count
# equals its byte count), other text is matched on its UTF-8 in hex against the lead and first
# continuation bytes of the ranges in `shared.unsegmented`, a superset of them: E0, E3-ED, EF
# (Thai, Lao, kana, Hangul, CJK...), E1 80-9F (Myanmar, Khmer...), E2 BA-BF (CJK radicals),
# F0 A0-BF (CJK extensions B-G). General punctuation (E2 80), Latin, emoji (F0 9F) stay out.
# The hex is not aligned to bytes, so a rare non-CJK text also matches; that only indexes it.
# tests/unit/test_search_unsegmented.py checks every code point of the ranges.
UTF8_PATTERNS = (
    "E[03-9A-DF][89AB]?[89AB]",
    "E1[89]?[89AB]",
    "E2B[A-F][89AB]",
    "F0[AB]?[89AB]",
)

_TEXT = (
    f"(CASE WHEN {{row}}.role = 'tool' THEN substr({{row}}.content, 1, {FTS_TOOL_OUTPUT_CAP}) "
    "ELSE {row}.content END)"
)
_INDEXED = _TEXT + f" || '{PAD}'"


def has_unsegmented_sql(row: str) -> str:
    """The SQL condition: `row` (a messages row alias: new, old, m) goes into the trigram index."""
    text = _TEXT.format(row=row)
    hexed = " OR ".join(f"hex({text}) GLOB '*{pattern}*'" for pattern in UTF8_PATTERNS)
    return f"(length({text}) < length(CAST({text} AS BLOB)) AND ({hexed}))"


CJK_SOURCE_VIEW = f"""
CREATE VIEW messages_cjk_source AS
SELECT m.id AS id, {_INDEXED.format(row="m")} AS content
FROM messages AS m
WHERE {has_unsegmented_sql("m")}
"""

CJK_TABLE = """
CREATE VIRTUAL TABLE messages_cjk USING fts5(
    content,
    content = 'messages_cjk_source',
    content_rowid = 'id',
    tokenize = 'trigram',
    detail = none
)
"""

# The vocabulary of the trigram index: a short query is expanded to the trigrams it begins.
CJK_VOCAB = "CREATE VIRTUAL TABLE messages_cjk_vocab USING fts5vocab(messages_cjk, 'row')"

CJK_TRIGGERS = [
    f"""
CREATE TRIGGER messages_cjk_ai AFTER INSERT ON messages
WHEN {has_unsegmented_sql("new")} BEGIN
  INSERT INTO messages_cjk(rowid, content) VALUES (new.id, {_INDEXED.format(row="new")});
END""",
    f"""
CREATE TRIGGER messages_cjk_ad AFTER DELETE ON messages
WHEN {has_unsegmented_sql("old")} BEGIN
  INSERT INTO messages_cjk(messages_cjk, rowid, content)
  VALUES ('delete', old.id, {_INDEXED.format(row="old")});
END""",
    f"""
CREATE TRIGGER messages_cjk_au AFTER UPDATE OF content, role ON messages BEGIN
  INSERT INTO messages_cjk(messages_cjk, rowid, content)
  SELECT 'delete', old.id, {_INDEXED.format(row="old")} WHERE {has_unsegmented_sql("old")};
  INSERT INTO messages_cjk(rowid, content)
  SELECT new.id, {_INDEXED.format(row="new")} WHERE {has_unsegmented_sql("new")};
END""",
]

# Same reasoning as `sqlite.FTS_TUNING`: small merges inside appends, the rest from maintenance.
CJK_TUNING = [
    "INSERT INTO messages_cjk(messages_cjk, rank) VALUES ('automerge', 4)",
    "INSERT INTO messages_cjk(messages_cjk, rank) VALUES ('crisismerge', 64)",
]

# Fill the index from messages already in the file (the view selects only the rows it wants).
CJK_BACKFILL = "INSERT INTO messages_cjk(messages_cjk) VALUES ('rebuild')"

CREATE_ALL = [CJK_SOURCE_VIEW, CJK_TABLE, CJK_VOCAB, *CJK_TRIGGERS, *CJK_TUNING]


def cjk_merge_step(conn: Connection, pages: int = 200) -> None:
    """One bounded step of segment merging of the trigram index, for maintenance."""
    conn.exec_driver_sql(
        "INSERT INTO messages_cjk(messages_cjk, rank) VALUES ('merge', ?)", (pages,)
    )
