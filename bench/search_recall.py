"""Recall of planted facts, and the store after a prune, for `bench.search`.

Recall: facts are written into messages of the oldest sessions (an UPDATE in place, so they
keep their old ids: the newest-first windows of ours see them last), each with a rare term and
common words around it. Each is looked for with a question that mixes the rare term with those
common words (`about the <rare> in the config`, `我 说过 配置 <稀有>`). recall@3 = the share of
facts whose session is among the first 3 results: ours through the agent tool, the plain
ranking as bm25 over every match (`ORDER BY rank`, no bound) on the same index. The planted
texts are put back afterwards, so a reused store stays as built.

After prune: a copy of the store loses 25% of its messages (the oldest ended sessions) through
the product's prune sweep (`bench.maintenance.run_ours`: batched deletes, index merge,
reclaim), and is then measured like a fresh one.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.db import Store
from shared.search.tool import run

ENGLISH = "what did I say about the {rare} in the config before, it was {value}"
ENGLISH_QUERY = "about the {rare} in the config"
CHINESE = "我之前说过配置里的{rare}应该是{value}，记得改"
CHINESE_QUERY = "我 说过 配置 {rare}"
# Han characters seldom seen together; four of them make a term no message holds by chance.
HAN = "甑鬻黼黻饕餮魑魅魍魉彧犇骉羴麤靐龘翀麟螭蟠鹓鶵鸑鷟鹔鹴鹖鹍鹏鹗鹞鹡鹣鹦鹧鹨鹩"
TOP = 3


@dataclass(frozen=True, slots=True)
class Fact:
    message_id: int
    session_id: str
    query: str
    language: str
    original: str | None
    tier: str


def _rare_words(
    db: sqlite3.Connection, n: int, rnd: random.Random, low: int, high: int
) -> list[str]:
    """Words already in `low`-`high` messages: other messages hold them too, so ranking
    decides (past RANK_WINDOW of them, with the common words, beyond ours' first window)."""
    db.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.recall_vocab"
        " USING fts5vocab(main, messages_fts, 'row')"
    )
    rows = db.execute(
        "SELECT term FROM temp.recall_vocab WHERE doc BETWEEN ? AND ?"
        " AND term GLOB '[a-z][a-z][a-z][a-z]*' AND term NOT GLOB '*[0-9]*'",
        (low, high),
    ).fetchall()
    words = sorted(str(r[0]) for r in rows)
    rnd.shuffle(words)
    return words[:n]


def plant(db: sqlite3.Connection, n: int, seed: int) -> list[Fact]:
    """`n` facts (half English, half Chinese), one per session, in the oldest third of sessions."""
    rnd = random.Random(seed)
    sessions = [
        str(r[0]) for r in db.execute("SELECT id FROM sessions ORDER BY started_at, id").fetchall()
    ]
    old = sessions[: max(n, len(sessions) // 3)]
    chosen = rnd.sample(old, min(n, len(old)))
    uncommon = set(_rare_words(db, n // 4, rnd, 300, 3000))
    words = _rare_words(db, n // 4, rnd, 2, 50) + sorted(uncommon)
    rnd.shuffle(words)
    facts: list[Fact] = []
    for i, session_id in enumerate(chosen):
        row = db.execute(
            "SELECT id, content FROM messages WHERE session_id = ? AND role = 'user'"
            " ORDER BY id LIMIT 1",
            (session_id,),
        ).fetchone()
        if row is None:
            continue
        value = rnd.randrange(10, 10_000)
        if i % 2 == 0 and words:
            rare = words.pop()
            text, query, language = ENGLISH, ENGLISH_QUERY, "en"
            tier = "en_uncommon" if rare in uncommon else "en_rare"
        else:
            rare = "".join(rnd.sample(HAN, 4))
            text, query, language, tier = CHINESE, CHINESE_QUERY, "zh", "zh_rare"
        db.execute(
            "UPDATE messages SET content = ? WHERE id = ?",
            (text.format(rare=rare, value=value), int(row[0])),
        )
        found = Fact(int(row[0]), session_id, query.format(rare=rare), language, row[1], tier)
        facts.append(found)
    db.commit()
    return facts


def restore(db: sqlite3.Connection, facts: list[Fact]) -> None:
    db.executemany(
        "UPDATE messages SET content = ? WHERE id = ?",
        [(fact.original, fact.message_id) for fact in facts],
    )
    db.commit()


def _ours(store: Store, fact: Fact) -> list[str]:
    result = run(store, {"query": fact.query, "limit": TOP}, None)
    return [r.get("lineage_root_id", r["session_id"]) for r in result.get("results", [])] + [
        r["session_id"] for r in result.get("results", [])
    ]


PLAIN_WORDS = (
    "SELECT m.session_id FROM messages_fts JOIN messages AS m ON m.id = messages_fts.rowid"
    " WHERE messages_fts MATCH ? AND m.role IN ('user', 'assistant') ORDER BY rank LIMIT 200"
)
PLAIN_SUBSTRINGS = (
    "SELECT m.session_id, m.content FROM messages_cjk JOIN messages AS m"
    " ON m.id = messages_cjk.rowid WHERE messages_cjk MATCH ?"
    " AND m.role IN ('user', 'assistant') ORDER BY rank"
)


def _plain(db: sqlite3.Connection, fact: Fact) -> list[str]:
    """bm25 over every match: words on the word index; Chinese on the trigram index by its
    terms of 3+ characters, each match checked for every term (the index over-matches)."""
    terms = fact.query.split()
    if fact.language == "en":
        expr = " AND ".join(f'"{t}"' for t in terms)
        rows = [str(r[0]) for r in db.execute(PLAIN_WORDS, (expr,))]
    else:
        grams = [f'"{t[i : i + 3]}"' for t in terms if len(t) >= 3 for i in range(len(t) - 2)]
        rows = [
            str(sid)
            for sid, content in db.execute(PLAIN_SUBSTRINGS, (" AND ".join(grams),))
            if all(t in (content or "") for t in terms)
        ]
    return list(dict.fromkeys(rows))[:TOP]


def recall(store: Store, db: sqlite3.Connection, facts: list[Fact]) -> dict[str, Any]:
    """recall@3 of ours and of the plain ranking, overall and per language."""
    out: dict[str, Any] = {"facts": len(facts)}
    for group in ("all", "en", "zh", "en_rare", "en_uncommon", "zh_rare"):
        chosen = [f for f in facts if group in {"all", f.language, f.tier}]
        if not chosen:
            continue
        ours = sum(f.session_id in _ours(store, f) for f in chosen)
        plain = sum(f.session_id in _plain(db, f) for f in chosen)
        out[group] = {
            "n": len(chosen),
            "ours_recall_at_3": round(ours / len(chosen), 3),
            "plain_recall_at_3": round(plain / len(chosen), 3),
        }
    return out


def pruned_copy(path: Path, share: float = 0.25) -> tuple[Path, dict[str, Any]]:
    """A copy of the store at `path` with `share` of its messages pruned by the product."""
    from bench.maintenance import copy_settled, cutoff_for_share, run_ours

    target = Path(f"{path}.pruned")
    for leftover in (target, Path(f"{target}-wal"), Path(f"{target}-shm")):
        leftover.unlink(missing_ok=True)
    copy_settled(path, target)
    cutoff, _sessions, _messages, total = cutoff_for_share(target, share)
    flags = argparse.Namespace(step_pages=None, merge_pages=None, pause_ms=None)
    with tempfile.TemporaryDirectory() as home:
        report = run_ours(target, Path(home), cutoff, flags)
    return target, {
        "share": share,
        "sessions_pruned": report["sessions"],
        "messages_pruned": report["messages"],
        "messages_before": total,
        "prune_merge_reclaim_s": [round(s, 2) for _, s in report["phases"]],
    }
