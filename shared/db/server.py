"""What a store runs on, in words: the dialect, its version, and where (`hermes db status`)."""

from __future__ import annotations

import sqlite3

from sqlalchemy import text

from shared.db.engine import Store


def where(store: Store) -> str:
    """The file, or the server's URL with the password hidden."""
    if store.path is not None:
        return str(store.path)
    return store.engine.url.render_as_string(hide_password=True)


def describe(store: Store) -> str:
    """`SQLite 3.45.1, file /x/state.db` or `PostgreSQL 16.4 at host:5432, database d`."""
    if store.path is not None:
        return f"SQLite {sqlite3.sqlite_version}, file {store.path}"
    url = store.engine.url
    with store.read() as conn:
        version = str(conn.execute(text("SHOW server_version")).scalar()).split()[0]
        schema = conn.execute(text("SELECT current_schema()")).scalar()
    place = f"{url.host or 'localhost'}:{url.port or 5432}"
    inside = f", schema {schema}" if schema not in (None, "public") else ""
    return f"PostgreSQL {version} at {place}, database {url.database}{inside}"
