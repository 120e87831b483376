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
each conversation message's pairs of adjacent words, taken from `search_words`' own
positions, each as a key of PAIR_KEY_CHARS hex characters of the SHA-256 of 'first second'
(UTF-8): a phrase first narrows to the rows holding the key of each of its pairs, a superset
of its matches (every pair hashed to the same key comes along: with 2^20 keys, a few dozen
rows more to check), and then checks its words on those rows. Keys keep the index small
whatever the words' lengths: with the pairs themselves as keys it was 2 GB at 1.5M messages,
seven times the word index. Tool output (long, and searched only when asked for) is left
out: the index is partial, `role <> 'tool'`, and a search that includes tool messages reads
its phrases through the word index.

Prefixes: GIN answers `'snoo':*` from the word index with the bitmap of every word the prefix
expands to, over every id, built again for each statement (2 us a match: 35-145 ms for a prefix
in 0.3-5% of 1.5M messages, of which the newest few hundred are wanted). `ix_messages_search_
prefixes` (revision 0022) keys each word of at least PREFIX_CHARS characters of a conversation
message by those first characters and the message's id bucket (`id >> BUCKET_BITS`, 8,192 ids):
`12:snoo`. A prefix query reads the keys of the buckets of one id window at a time, newest first
(`prefixes`), so a dense prefix reads a few hundred rows; a longer prefix is checked on the
words of the rows its first characters admit. Partial like the pairs index (tool output is left
out: a search that includes it reads prefixes through the word index).
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


def _function(signature: str, returns: str, query: str, language: str) -> str:
    """An index's function over one query. Revisions 0013-0022 made them LANGUAGE sql; 0023
    makes them plpgsql (`PLPGSQL`), same query, same results. A sql function whose body has a
    FROM or a subquery is not inlined, and PostgreSQL plans its body again in every statement
    that calls it: for an index expression that is every INSERT of a message (three plans, about
    240 us of the server's CPU per statement); plpgsql keeps its plan for the connection."""
    head = f"CREATE OR REPLACE FUNCTION {signature} RETURNS {returns}\nLANGUAGE {language}"
    head += " IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT AS $$\n"
    if language == "sql":
        return f"{head}  SELECT {query}\n$$\n"
    return f"{head}BEGIN\n  RETURN (SELECT {query});\nEND\n$$\n"


# Every character, and every pair as the non-overlapping pairs from the first and from the
# second character; duplicates are left in (the GIN index keeps each key once). Built from
# C-level regexp functions: 0.55 ms for a 350-character message where substr() over
# generate_series took 1.5 ms and grew with the square of the length.
GRAMS_SIGNATURE = ("hermes_search_grams(t text)", "text[]")
GRAMS_QUERY = """regexp_split_to_array(t, '')
    || ARRAY(SELECT (regexp_matches(t, '..', 'g'))[1])
    || ARRAY(SELECT (regexp_matches(substr(t, 2), '..', 'g'))[1])"""
GRAMS_FUNCTION = _function(*GRAMS_SIGNATURE, GRAMS_QUERY, "sql")

WORDS_COLUMN = (
    "ALTER TABLE messages ADD COLUMN search_words tsvector GENERATED ALWAYS AS"
    f" (to_tsvector('simple'::regconfig, hermes_search_words({indexed('')}))) STORED"
)

PAIR_KEY_CHARS = 5  # 2^20 keys


def pairs(row: str = "m.") -> str:
    """The pairs index's expression."""
    return f"hermes_search_pairs({row}search_words)"


PAIRED_OUT = "tool"  # the role the pairs index leaves out


def paired(row: str = "m.") -> str:
    """The condition: the row is in the pairs index (written exactly so in queries)."""
    return f"{row}role <> '{PAIRED_OUT}'"


# Every two lexemes at adjacent positions, as the key of 'first second'; positions are the
# tsvector's own (at most 256 a lexeme, clamped at 16,383), those the phrase operator reads.
PAIRS_SIGNATURE = ("hermes_search_pairs(v tsvector)", "tsvector")
PAIRS_QUERY = f"""array_to_tsvector(coalesce(array_agg(DISTINCT left(encode(sha256(convert_to(
      a.lexeme || ' ' || b.lexeme, 'UTF8')), 'hex'), {PAIR_KEY_CHARS})), ARRAY[]::text[]))
  FROM (SELECT lexeme, unnest(positions) AS p FROM unnest(v)) AS a
  JOIN (SELECT lexeme, unnest(positions) AS p FROM unnest(v)) AS b ON b.p = a.p + 1"""
PAIRS_FUNCTION = _function(*PAIRS_SIGNATURE, PAIRS_QUERY, "sql")

PAIRS_INDEX = (
    f"CREATE INDEX ix_messages_search_pairs ON messages USING gin ({pairs('')}) WHERE {paired('')}"
)

# Revision 0020.
CREATE_PAIRS = [PAIRS_FUNCTION, PAIRS_INDEX]
DROP_PAIRS = [
    "DROP INDEX IF EXISTS ix_messages_search_pairs",
    "DROP FUNCTION IF EXISTS hermes_search_pairs(tsvector)",
]

PREFIX_CHARS = 4  # a word is keyed by its first PREFIX_CHARS characters
BUCKET_BITS = 13  # ...and by the bucket of 2^13 = 8,192 ids its message is in


def prefixes(row: str = "m.") -> str:
    """The prefix index's expression."""
    return f"hermes_search_prefixes({row}search_words, {row}id)"


def prefix_key(bucket: int, start: str) -> str:
    """The prefix index's key of the words starting with `start` (PREFIX_CHARS characters)
    in the messages of id bucket `bucket` (`PREFIXES_FUNCTION` in Python)."""
    return f"{bucket}:{start}"


# Each lexeme of at least PREFIX_CHARS characters as the key of its first PREFIX_CHARS and its
# message's id bucket; duplicates are left in (the GIN index keeps each key of a row once).
PREFIXES_SIGNATURE = ("hermes_search_prefixes(v tsvector, id integer)", "text[]")
PREFIXES_QUERY = f"""coalesce(array_agg(
      (id >> {BUCKET_BITS})::text || ':' || left(lexeme, {PREFIX_CHARS})), ARRAY[]::text[])
  FROM unnest(tsvector_to_array(v)) AS lexeme
  WHERE char_length(lexeme) >= {PREFIX_CHARS}"""
PREFIXES_FUNCTION = _function(*PREFIXES_SIGNATURE, PREFIXES_QUERY, "sql")

PREFIXES_INDEX = (
    f"CREATE INDEX ix_messages_search_prefixes ON messages USING gin ({prefixes('')})"
    f" WHERE {paired('')}"
)

# Revision 0022.
CREATE_PREFIXES = [PREFIXES_FUNCTION, PREFIXES_INDEX]
DROP_PREFIXES = [
    "DROP INDEX IF EXISTS ix_messages_search_prefixes",
    "DROP FUNCTION IF EXISTS hermes_search_prefixes(tsvector, integer)",
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

# Revision 0023: the index functions that run a query, in plpgsql (see `_function`).
_QUERIES = [
    (GRAMS_SIGNATURE, GRAMS_QUERY),
    (PAIRS_SIGNATURE, PAIRS_QUERY),
    (PREFIXES_SIGNATURE, PREFIXES_QUERY),
]
PLPGSQL = [_function(*signature, query, "plpgsql") for signature, query in _QUERIES]
SQL = [GRAMS_FUNCTION, PAIRS_FUNCTION, PREFIXES_FUNCTION]  # what 0013-0022 made (downgrade)
