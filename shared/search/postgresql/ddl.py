"""PostgreSQL DDL of the search indexes that revision 0013 adds (SQLite keeps FTS5, 0001/0003).

Words: `messages.search_words`, a stored generated tsvector with a GIN index. The text is
folded like FTS5's `unicode61 remove_diacritics 2` (lower case, accents dropped, every run of
characters other than letters and digits a separator) before the 'simple' configuration reads
it, so `chat-send` is the words chat and send, `foo.py` is foo and py, `Café` is cafe, and
nothing is stemmed or dropped as a stopword: a word is found exactly when SQLite finds it.
Queries are folded the same way in Python (`compiler.words_of`). Tool output is indexed up to
`FTS_TOOL_OUTPUT_CAP` characters as on SQLite; other text up to `TEXT_CAP` (a tsvector holds
at most 1 MB; past the cap a word of a giant message is not found on PostgreSQL).

Substrings (Chinese, Japanese, Thai...): messages holding any such character get a GIN
expression index over the set of their 1- and 2-character substrings (`hermes_search_grams`).
A term of 1-2 characters is one key of it; a longer one the AND of its 2-character pieces,
and the text is then checked (`strpos`) before a row counts. pg_trgm is not used: it only
indexes runs of what the locale calls alphanumeric and needs three characters, while this
index answers one character as well as ten. `ix_messages_unsegmented` lists those messages by
id, for the direct check of the newest ones (a very common character).

Phrases: GIN keeps no positions, so `'the' <-> 'config'` alone makes PostgreSQL re-read every
row holding both words to check that they stand side by side (42,000 rows for two common
words at 1.5M messages, half a second). `ix_messages_search_pairs` (revision 0020) indexes
each message's pairs of adjacent words, taken from `search_words`' own positions, so a phrase
first narrows to the rows holding each of its pairs, which is exactly the rows matching it for
two words. A message whose pairs would not fit a tsvector (a pair over a lexeme's 2,047 bytes,
or over PAIRS_BYTES together) holds the one lexeme UNPAIRED instead, which every phrase's
narrowing admits: such a message is still checked, never missed.
"""

from __future__ import annotations

from shared.db.sqlite import FTS_TOOL_OUTPUT_CAP
from shared.unsegmented import char_class

TEXT_CAP = 262_144  # characters of a non-tool message that are word-indexed (tsvector <= 1 MB)

# The indexed text of a messages row (alias `m` in queries; bare columns in the DDL).
INDEXED = (
    f"(CASE WHEN {{row}}role = 'tool' THEN left({{row}}content, {FTS_TOOL_OUTPUT_CAP})"
    f" ELSE left({{row}}content, {TEXT_CAP}) END)"
)
# The combining diacritical marks FTS5's remove_diacritics drops after decomposition.
MARKS = "[\\u0300-\\u036f]"


def indexed(row: str = "m.") -> str:
    return INDEXED.format(row=row)


def unsegmented(row: str = "m.") -> str:
    """The condition: the row is in the substring index (written exactly so in queries, for
    the partial indexes to apply)."""
    return f"({indexed(row)} ~ '{char_class()}')"


def grams(row: str = "m.") -> str:
    """The substring index's expression."""
    return f"hermes_search_grams(lower({indexed(row)}))"


WORD_TEXT_FUNCTION = f"""
CREATE FUNCTION hermes_search_words(t text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT AS $$
  SELECT regexp_replace(
    regexp_replace(normalize(lower(t), NFD), '{MARKS}', '', 'g'),
    '[^[:alnum:]]+', ' ', 'g')
$$
"""

# Every character, and every pair as the non-overlapping pairs from the first and from the
# second character; duplicates are left in (the GIN index keeps each key once). Built from
# C-level regexp functions: 0.55 ms for a 350-character message where substr() over
# generate_series took 1.5 ms and grew with the square of the length.
GRAMS_FUNCTION = """
CREATE FUNCTION hermes_search_grams(t text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT AS $$
  SELECT regexp_split_to_array(t, '')
    || ARRAY(SELECT (regexp_matches(t, '..', 'g'))[1])
    || ARRAY(SELECT (regexp_matches(substr(t, 2), '..', 'g'))[1])
$$
"""

WORDS_COLUMN = (
    "ALTER TABLE messages ADD COLUMN search_words tsvector GENERATED ALWAYS AS"
    f" (to_tsvector('simple'::regconfig, hermes_search_words({indexed('')}))) STORED"
)

UNPAIRED = "unpaired"  # pairs always hold a space; no pair is this lexeme
PAIR_BYTES = 2047  # a tsvector lexeme's limit
PAIRS_BYTES = 512 * 1024  # a tsvector's lexemes hold at most 1 MB


def pairs(row: str = "m.") -> str:
    """The pairs index's expression."""
    return f"hermes_search_pairs({row}search_words)"


# Every two lexemes at adjacent positions, as the lexeme 'first second'; positions are the
# tsvector's own (at most 256 a lexeme, clamped at 16,383), those the phrase operator reads.
PAIRS_FUNCTION = f"""
CREATE FUNCTION hermes_search_pairs(v tsvector) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT AS $$
  SELECT CASE
    WHEN coalesce(max(octet_length(pair)), 0) > {PAIR_BYTES}
      OR coalesce(sum(octet_length(pair)), 0) > {PAIRS_BYTES}
    THEN array_to_tsvector(ARRAY['{UNPAIRED}'])
    ELSE array_to_tsvector(coalesce(array_agg(pair), ARRAY[]::text[]))
  END
  FROM (SELECT DISTINCT a.lexeme || ' ' || b.lexeme AS pair
        FROM (SELECT lexeme, unnest(positions) AS p FROM unnest(v)) AS a
        JOIN (SELECT lexeme, unnest(positions) AS p FROM unnest(v)) AS b ON b.p = a.p + 1
       ) AS adjacent
$$
"""

PAIRS_INDEX = f"CREATE INDEX ix_messages_search_pairs ON messages USING gin ({pairs('')})"

# Revision 0020.
CREATE_PAIRS = [PAIRS_FUNCTION, PAIRS_INDEX]
DROP_PAIRS = [
    "DROP INDEX IF EXISTS ix_messages_search_pairs",
    "DROP FUNCTION IF EXISTS hermes_search_pairs(tsvector)",
]

WORDS_INDEX = "CREATE INDEX ix_messages_search_words ON messages USING gin (search_words)"

GRAMS_INDEX = (
    f"CREATE INDEX ix_messages_search_grams ON messages USING gin ({grams('')})"
    f" WHERE {unsegmented('')}"
)

UNSEGMENTED_INDEX = f"CREATE INDEX ix_messages_unsegmented ON messages (id) WHERE {unsegmented('')}"

CREATE_ALL = [
    WORD_TEXT_FUNCTION,
    GRAMS_FUNCTION,
    WORDS_COLUMN,
    WORDS_INDEX,
    GRAMS_INDEX,
    UNSEGMENTED_INDEX,
]

# Revision 0013's downgrade: the indexes go with the column, then the functions.
DROP_ALL = [
    "DROP INDEX IF EXISTS ix_messages_unsegmented",
    "DROP INDEX IF EXISTS ix_messages_search_grams",
    "ALTER TABLE messages DROP COLUMN IF EXISTS search_words",
    "DROP FUNCTION IF EXISTS hermes_search_grams(text)",
    "DROP FUNCTION IF EXISTS hermes_search_words(text)",
]
