"""A store at head made once per test session and copied into each test's empty store.

The `store` fixture opens a brand-new store for every test, and migrating one (20 Alembic
revisions, about a hundred DDL statements) costs 0.1-0.2 s on SQLite and 0.2-0.9 s on
PostgreSQL; some 1,100 tests pay it. Copying a store migrated once gives the same schema:

- SQLite: the migrated state.db, closed (so checkpointed, no -wal), copied to the test's path.
- PostgreSQL: the statements `open_store` sent while migrating an empty schema (recorded
  once, parameters rendered) are sent again to the test's empty schema, with its
  search_path, in one round trip: one implicit transaction, as the migration is one
  transaction, so a failure leaves the schema empty and the store migrates it as before.
  The same statements in the same order leave the same catalog, planner sizes included,
  where a pg_dump replayed would not (its indexes are built after the rows go in).

Only the `store` fixture primes a store, and only one that does not exist yet (SQLite) or
whose schema is empty (PostgreSQL): a test that looks at a fresh home or database, a
migration, or a refusal never uses it. `open_store` then finds the store at head and runs
everything else it does (its checks, secure_files). tests/integration/test_store_template.py
checks that a primed store is the same as a migrated one (pg_dump of both and pg_class's
size estimates; SQLite's dump and pragmas).
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from shared.db import open_store

# The template state.db (SQLite), and per contract database the statements that migrated the
# template schema; None: not available (the store migrates itself).
_SQLITE_TEMPLATE: list[Path] = []
_POSTGRES_REPLAY: dict[str, str | None] = {}


def prime_sqlite(path: Path, template_dir: Path) -> bool:
    """Copy a migrated state.db to `path` if nothing is there yet; True when copied."""
    if path.exists() or Path(f"{path}-wal").exists() or not path.parent.is_dir():
        return False
    if not _SQLITE_TEMPLATE:
        template = template_dir / "state.db"
        open_store(f"sqlite:///{template}").close()
        if Path(f"{template}-wal").exists():
            return False  # not checkpointed: a copy of the main file alone would be older
        _SQLITE_TEMPLATE.append(template)
    shutil.copyfile(_SQLITE_TEMPLATE[0], path)
    return True


def schema_of(url: str) -> str | None:
    """The schema first on the search_path of a database_url fixture's URL."""
    for option in unquote(urlsplit(url).query).split("&"):
        if option.startswith("options=-csearch_path="):
            return option.removeprefix("options=-csearch_path=").split(",")[0]
    return None


def prime_postgresql(admin: str, schema: str) -> bool:
    """Replay the template's migration into the empty `schema`; True when done."""
    replay = _POSTGRES_REPLAY.get(admin, "")
    if replay == "":
        replay = _POSTGRES_REPLAY[admin] = _recorded_migration(admin)
    if replay is None:
        return False
    import psycopg

    # The store's own URL, so its search_path: the statements name no schema, as when migrating.
    with psycopg.connect(f"{admin}?options=-csearch_path%3D{schema},public", autocommit=True) as db:
        # current_schema(): the first schema of the search_path that exists, where a migration
        # would create its tables; only the test's own, and only while it is empty.
        found = db.execute(
            "SELECT current_schema() = %s AND NOT EXISTS (SELECT 1 FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s)",
            (schema, schema),
        ).fetchone()
        if found is None or not found[0]:
            return False
        try:
            db.execute(replay.encode())
        except psycopg.Error:
            _POSTGRES_REPLAY[admin] = None
            return False
    return True


def _recorded_migration(admin: str) -> str | None:
    """Migrate a scratch schema, recording every statement its store sends, then drop it: the
    statements, with their parameters rendered, as one SQL text."""
    import psycopg
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    scratch = f"t_template_{uuid.uuid4().hex[:12]}"
    sent: list[tuple[str, Any]] = []

    def record(conn, _cursor, statement, parameters, _context, _many) -> None:  # type: ignore[no-untyped-def]
        if scratch in str(conn.engine.url):
            sent.append((statement, parameters))

    with psycopg.connect(admin, autocommit=True) as db:
        db.execute(f'CREATE SCHEMA "{scratch}"')
    event.listen(Engine, "before_cursor_execute", record)
    try:
        open_store(f"{admin}?options=-csearch_path%3D{scratch},public").close()
    finally:
        event.remove(Engine, "before_cursor_execute", record)
        with psycopg.connect(admin, autocommit=True) as db:
            db.execute(f'DROP SCHEMA "{scratch}" CASCADE')
            render = psycopg.ClientCursor(db)
            rendered = [render.mogrify(text, args) if args else text for text, args in sent]
    if any(scratch in text for text in rendered):
        return None  # a statement naming its schema could not be replayed elsewhere
    return ";\n".join(rendered) + ";"


def dump_schema(admin: str, schema: str, pg_dump: str) -> str | None:
    """pg_dump of one schema: its DDL and its rows (alembic_version's) as INSERTs."""
    parts = urlsplit(admin)
    command = [pg_dump, "--no-owner", "--no-privileges", "--inserts", f"--schema={schema}"]
    command += ["-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432)]
    command += ["-U", parts.username or "postgres", "-d", parts.path.lstrip("/")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    return done.stdout if done.returncode == 0 else None
