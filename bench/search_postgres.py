"""bench/search.py on PostgreSQL: the SQLite corpus copied into a PostgreSQL database (ids
kept, so the queries drawn from the SQLite file name the same messages), the plain alternative
(an `ILIKE` scan) and the index sizes.

The copy goes through the real schema (`open_store` migrates the empty database to head); the
search indexes are dropped for the load and built again after it, as a restore would.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from shared.db import open_store
from shared.search.postgresql import ddl
from shared.search.query import parse

SESSION_COLUMNS = (
    "id", "source", "started_at", "last_active_at", "user_id", "session_key", "chat_id",
    "chat_type", "thread_id", "title", "title_source", "model", "model_config",
    "system_prompt", "parent_session_id", "ended_at", "end_reason", "message_count",
    "input_tokens", "output_tokens",
)  # fmt: skip
MESSAGE_COLUMNS = (
    "id", "session_id", "role", "content", "tool_calls", "tool_call_id", "tool_name",
    "token_count", "timestamp", "platform_message_id",
)  # fmt: skip
SEARCH_INDEXES = {
    "ix_messages_search_words": ddl.WORDS_INDEX,
    "ix_messages_search_grams": ddl.GRAMS_INDEX,
    "ix_messages_unsegmented": ddl.UNSEGMENTED_INDEX,
    "ix_messages_search_pairs": ddl.PAIRS_INDEX,
    "ix_messages_search_prefixes": ddl.PREFIXES_INDEX,
}


def _driver_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme="postgresql"))


def ensure_database(url: str) -> None:
    """Create the database of `url` when it is missing (on the same server)."""
    parts = urlsplit(_driver_url(url))
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as db:
        if db.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            db.execute(f'CREATE DATABASE "{name}"')


def loaded(url: str, source: sqlite3.Connection) -> bool:
    """Whether the database already holds the corpus of `source` (same message count)."""
    want = source.execute("SELECT count(*), coalesce(max(id), 0) FROM messages").fetchone()
    try:
        with psycopg.connect(_driver_url(url)) as db:
            got = db.execute("SELECT count(*), coalesce(max(id), 0) FROM messages").fetchone()
    except psycopg.Error:
        return False
    return got is not None and tuple(got) == tuple(want)


def copy_corpus(url: str, source: sqlite3.Connection, log: Callable[[str], None]) -> float:
    """Load `source`'s sessions and messages into the (emptied) database; seconds taken."""
    began = time.perf_counter()
    ensure_database(url)
    with psycopg.connect(_driver_url(url), autocommit=True) as db:
        db.execute("DROP SCHEMA public CASCADE")
        db.execute("CREATE SCHEMA public")
    open_store(url).close()  # the schema at head
    with psycopg.connect(_driver_url(url)) as db:
        for name in SEARCH_INDEXES:
            db.execute(f"DROP INDEX {name}")
        _copy(db, source, "sessions", SESSION_COLUMNS, log)
        _copy(db, source, "messages", MESSAGE_COLUMNS, log)
        db.execute("SELECT setval('messages_id_seq', (SELECT max(id) FROM messages))")
        db.commit()
        db.execute("SET maintenance_work_mem = '512MB'")
        for name, statement in SEARCH_INDEXES.items():
            log(f"building {name} ...")
            db.execute(statement)
            db.commit()
    with psycopg.connect(_driver_url(url), autocommit=True) as db:
        db.execute("VACUUM ANALYZE")
    return time.perf_counter() - began


def _copy(
    db: psycopg.Connection[Any],
    source: sqlite3.Connection,
    table: str,
    columns: tuple[str, ...],
    log: Callable[[str], None],
) -> None:
    names = ", ".join(columns)
    rows = source.execute(f"SELECT {names} FROM {table} ORDER BY rowid")
    done = 0
    with db.cursor().copy(f"COPY {table} ({names}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
            done += 1
            if done % 250_000 == 0:
                log(f"  {table}: {done:,} rows")
    log(f"  {table}: {done:,} rows")


def plain_call(db: psycopg.Connection[Any], name: str, args: dict[str, Any]) -> Callable[[], Any]:
    """The plain alternative: every term an `ILIKE '%term%'` over all messages (a scan), the
    newest 50 matches; a deep page with OFFSET."""
    if name == "deep_page":
        sql = "SELECT * FROM sessions ORDER BY last_active_at DESC LIMIT 20 OFFSET %s"
        return lambda: db.execute(sql, (args["offset"],)).fetchall()
    terms = [t.text for t in parse(args["query"]).terms()]
    where = " AND ".join("content ILIKE %s" for _ in terms)
    params = [f"%{t}%" for t in terms]
    sql = (
        "SELECT id, session_id, substr(content, 1, 200) FROM messages"
        f" WHERE {where} ORDER BY timestamp DESC LIMIT 50"
    )
    return lambda: db.execute(sql, params).fetchall()


def sizes(url: str) -> dict[str, Any]:
    mb = 1024 * 1024
    with psycopg.connect(_driver_url(url)) as db:

        def size(sql: str) -> float:
            row = db.execute(sql).fetchone()
            return round(float(row[0] or 0) / mb, 1) if row else 0.0

        raw = size("SELECT sum(octet_length(content)) FROM messages")
        words_column = size("SELECT sum(pg_column_size(search_words)) FROM messages")
        words_index = size("SELECT pg_relation_size('ix_messages_search_words')")
        grams_index = size("SELECT pg_relation_size('ix_messages_search_grams')")
        pairs_index = size("SELECT pg_relation_size('ix_messages_search_pairs')")
        prefix_index = size("SELECT pg_relation_size(to_regclass('ix_messages_search_prefixes'))")
        cjk = db.execute(f"SELECT count(*) FROM messages AS m WHERE {ddl.unsegmented()}").fetchone()
        return {
            "db_mb": size("SELECT pg_database_size(current_database())"),
            "raw_text_mb": raw,
            "word_index_mb": words_index,
            "word_column_mb": words_column,
            "substring_index_mb": grams_index,
            "pair_index_mb": pairs_index,
            "prefix_index_mb": prefix_index,
            "index_overhead": round(
                (words_index + words_column + grams_index + pairs_index + prefix_index) / raw, 3
            )
            if raw
            else None,
            "cjk_messages": int(cjk[0]) if cjk else 0,
            "server": db.execute("SHOW server_version").fetchone()[0],  # type: ignore[index]
        }
