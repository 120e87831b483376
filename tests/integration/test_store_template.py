"""A store the `store` fixture primes from the session's template is the store a migration makes.

tests/store_template.py copies a migrated state.db, and replays a migrated PostgreSQL schema's
pg_dump, instead of migrating each test's new store; whatever a test then finds must be what
`open_store` would have made of an empty one.
"""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from pathlib import Path

import pytest

from shared.db import migrate, open_store
from tests import store_template
from tests.conftest import _connect, _contract_database

PRAGMAS = ("user_version", "application_id", "journal_mode", "page_size", "auto_vacuum")
PRAGMAS += ("page_count", "freelist_count", "encoding")


def _sqlite_look(path: Path) -> tuple[list[str], dict[str, object], int]:
    db = sqlite3.connect(path)
    try:
        pragmas = {name: db.execute(f"PRAGMA {name}").fetchone()[0] for name in PRAGMAS}
        return list(db.iterdump()), pragmas, path.stat().st_mode & 0o777
    finally:
        db.close()


def test_a_primed_state_db_is_a_migrated_one(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated" / "state.db"
    migrated.parent.mkdir()
    open_store(f"sqlite:///{migrated}").close()

    primed = tmp_path / "primed" / "state.db"
    primed.parent.mkdir()
    template_dir = tmp_path / "template"
    template_dir.mkdir()
    assert store_template.prime_sqlite(primed, template_dir)
    open_store(f"sqlite:///{primed}").close()

    dump, pragmas, mode = _sqlite_look(migrated)
    assert any("alembic_version" in line for line in dump)
    assert _sqlite_look(primed) == (dump, pragmas, mode)


def test_an_existing_state_db_is_never_replaced(tmp_path: Path) -> None:
    existing = tmp_path / "state.db"
    existing.write_bytes(b"not a database")
    assert not store_template.prime_sqlite(existing, tmp_path)
    assert existing.read_bytes() == b"not a database"


def _pg_look(admin: str, schema: str) -> tuple[list[str], list[tuple[object, ...]]]:
    pg_dump = shutil.which("pg_dump")
    assert pg_dump is not None, "pg_dump is needed to compare schemas (tests/store_template.py)"
    dumped = store_template.dump_schema(admin, schema, pg_dump)
    assert dumped is not None
    lines = [
        line.replace(schema, "SCHEMA")
        for line in dumped.splitlines()
        if not line.startswith("\\")  # \restrict carries a random key per dump
    ]
    with _connect(admin) as db:
        # What pg_dump leaves out and the planner reads: each relation's size estimates.
        sizes = db.execute(
            "SELECT c.relname, c.relkind, c.reltuples, c.relpages, c.relallvisible"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s ORDER BY c.relname",
            (schema,),
        ).fetchall()
    return lines, sizes


def test_a_primed_postgresql_schema_is_a_migrated_one() -> None:
    admin = _contract_database()
    migrated, primed = (f"t_{uuid.uuid4().hex[:16]}" for _ in range(2))
    with _connect(admin) as db:
        db.execute(f'CREATE SCHEMA "{migrated}"')
        db.execute(f'CREATE SCHEMA "{primed}"')
    try:
        open_store(f"{admin}?options=-csearch_path%3D{migrated},public").close()
        assert store_template.prime_postgresql(admin, primed)
        primed_url = f"{admin}?options=-csearch_path%3D{primed},public"
        assert store_template.schema_of(primed_url) == primed
        open_store(primed_url).close()

        lines, sizes = _pg_look(admin, migrated)
        assert f"alembic_version VALUES ('{migrate.HEAD}');" in "\n".join(lines)
        assert len(sizes) > 50
        assert _pg_look(admin, primed) == (lines, sizes)
        assert not store_template.prime_postgresql(admin, primed)  # not empty: left alone
    finally:
        with _connect(admin) as db:
            db.execute(f'DROP SCHEMA "{migrated}" CASCADE')
            db.execute(f'DROP SCHEMA "{primed}" CASCADE')


@pytest.mark.both_databases
def test_the_store_fixture_opens_a_store_at_head(store) -> None:  # type: ignore[no-untyped-def]
    with store.read() as conn:
        assert migrate.current_revision(conn)[0] == migrate.HEAD
