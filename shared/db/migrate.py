"""Schema versions: new files start at head, older ones are upgraded, foreign or newer refused."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, text

from shared.db import sqlite
from shared.db.errors import StoreError

if TYPE_CHECKING:
    from alembic.config import Config

    from shared.db.engine import Store

# Alembic is imported where a migration runs (about 0.13 s of CPU): every `hermes` command and
# service opens the store, and one already at head never needs it.

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# The newest revision this code knows; a test keeps it equal to Alembic's head.
HEAD = "0023"
# PostgreSQL advisory lock held by the transaction that migrates a database: processes that
# open an empty database at once (every service of a fleet starting) make one schema.
MIGRATION_LOCK = 0x4845524D4553  # "HERMES"


def alembic_config(conn: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if conn is not None:
        cfg.attributes["connection"] = conn
    return cfg


def known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config())
    return {rev.revision for rev in scripts.walk_revisions()}


def current_revision(conn: Connection) -> tuple[str | None, list[str]]:
    """The stamped revision (None if unstamped) and the names of the tables present."""
    tables = [name for name in inspect(conn).get_table_names() if not name.startswith("sqlite_")]
    if "alembic_version" not in tables:
        return None, tables
    rev = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    return (str(rev) if rev is not None else None), tables


def _judge(rev: str | None, tables: list[str], where: str) -> bool:
    """True when an upgrade is needed; raise when the file must not be touched."""
    if rev == HEAD:
        return False
    if rev is None:
        if tables:
            raise StoreError(
                f"{where} holds tables ({', '.join(sorted(tables)[:5])}) but no hermes schema "
                "version; it was not made by hermes-fleet — refusing to touch it"
            )
        return True
    if rev not in known_revisions():
        raise StoreError(
            f"{where} is at schema {rev}, newer than this hermes-fleet knows ({HEAD}); "
            "upgrade hermes-fleet"
        )
    return True


def schema_status(conn: Connection, where: str) -> tuple[str | None, bool]:
    """(stamped revision, upgrade needed); StoreError for a file hermes must not touch."""
    rev, tables = current_revision(conn)
    return rev, _judge(rev, tables, where)


def preflight(path: Path) -> None:
    """Refuse a foreign or too-new SQLite file before anything changes it.

    The engine's connect hook switches a file to WAL (a permanent change to its header) and
    state.db is chmod'ed 0600; neither may happen to a file we then refuse. This look is
    read-only; a file SQLite cannot read at all is left to the usual checks to report.
    """
    found = sqlite.peek_schema(path)
    if found is None:
        return
    rev, tables = found
    _judge(rev, tables, str(path))


def ensure_head(store: Store, *, upgrade: bool = True) -> None:
    where = str(store.path or "the database")
    with store.read() as conn:
        rev, tables = current_revision(conn)
    if not _judge(rev, tables, where):
        return
    if not upgrade:
        raise StoreError(f"{where} is at schema {rev}; run `hermes db upgrade` to reach {HEAD}")
    upgrade_to_head(store)


def upgrade_to_head(store: Store) -> tuple[str | None, str]:
    """Upgrade under the write lock (two processes opening a new file make one schema): SQLite's
    BEGIN IMMEDIATE, PostgreSQL's advisory lock (its transactions would otherwise both find no
    schema and both create it, and all but one fail). The version is read again under it."""
    where = str(store.path or "the database")
    with store.write() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        rev, tables = current_revision(conn)
        if _judge(rev, tables, where):
            from alembic import command

            command.upgrade(alembic_config(conn), "head")
    return rev, HEAD
