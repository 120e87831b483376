"""How much work a PostgreSQL search does at a time: window, batch, probe and scan sizes, and the
thresholds that choose between its ways of reading (`words`, `substrings`, `windows`).

Read as `limits.NAME` when a search runs, so a test tunes one here (`monkeypatch.setattr`).
"""

from __future__ import annotations

RANK_WINDOW = 256  # matches ranked by ts_rank at a time
MAX_WINDOWS = 40  # relevance looks at most at this many windows (~10,000 matches)
BATCH = 64  # hits fetched at a time in id order
SCAN_ROWS = 2000  # newest substring-indexed messages checked directly for a short term
# (a longer one whose pieces are in more than FEW messages: one SCAN_CHUNK)
SCAN_CHUNK = 500
RANK_NORMALIZATION = 1  # ts_rank divided by 1 + log(length): shorter messages first, like bm25
FEW = 1000  # a word query with at most this many matches reads them all from the word index
PROBE_SQL = f"SELECT m.id FROM messages AS m WHERE {{matching}} LIMIT {FEW + 1}"
# Above this many matches by the planner's estimate the probe is skipped: such a word is in the
# column's most-common-elements statistics, so the estimate is measured, not guessed, and the
# id-order walk finds a batch at once, while the probe would build the word's whole bitmap.
COMMON = 20 * FEW
# A word search with more than FEW matches asks the newest ids first (`windows.walk`): the newest
# 1/64 of the id range, 1/16, 1/4, then the rest, when the range spans at least this many ids.
WINDOW_MIN_SPAN = 50_000
# A pair outside the most common elements of the pairs index's statistics is estimated at
# about half the rarest of them (6,162 rows at 1.5M messages): a few thousand rows at most.
FEW_PAIRS = 8000
PAIRS_BIAS = 4  # how much more rows a phrase's pairs may be estimated at and still drive it
# A phrase whose pairs are estimated at most FEW_PAIRS rows (outside the statistics: the estimate
# is the same for every such key) has its pairs' rows counted (`words._counted`, the bitmap of
# the pairs index alone) and is driven by them unless they are more than COUNTED_BIAS times the
# rows its words are estimated at (the planner counts words as if they met by chance: 2.5 to 7
# times too few for the bench's phrases at 1.5M messages).
COUNTED_BIAS = 2
WINDOW_SHARES = (64, 16, 4)
# A prefix query the planner expects in more than WALK_OVER messages first reads the newest
# (oldest) DIRECT_IDS ids by walking the primary key (`words.direct_edge`): a dense prefix fills
# a batch there without its index entry, which GIN builds whole (every word it expands to) for
# each query that reads it. The walk goes on while the ids it expects to walk for the rest, times
# WALK_COST, are fewer than the matches the prefix has at the density found (GIN lists each of
# them: ~2 us a match, a walk ~3 us a row, at 1.5M messages on a busy 2-core machine).
WALK_OVER = FEW
DIRECT_IDS = 2048
WALK_COST = 1.5
# Past the probe, a prefix with at most this many matches (by `words._spread`) is read at once, in
# one bitmap over every id: each of its rows is then fetched to find the newest, which for
# 8,000-17,000 matches cost more (145-260 ms at 1.5M messages) than reading windows.
AT_ONCE = 4 * FEW
# A prefix read through the prefix index (`prefixes`) asks the rest of the newest id bucket, then
# windows of whole buckets, each sized for the matches still wanted at the density found so far
# (PREFIX_AHEAD times: one more window usually serves) and at most PREFIX_GROWTH times the ids
# read before it: fixed windows of 1, 4, 16, 64 buckets read ~800 rows for the last 6 matches.
PREFIX_GROWTH = 4
PREFIX_AHEAD = 1.5
