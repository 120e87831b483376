"""The database underneath every store: engine, group commit, schema, migrations, dialects.

Code outside the store packages (shared.db, .store, .pipeline, .search) takes a `Connection`
and catches the driver errors from here, and calls the stores' functions: it never imports
the schema or SQLAlchemy (import-linter holds it to that).
"""

from sqlalchemy import Connection
from sqlalchemy.exc import DatabaseError, OperationalError

from shared.db.engine import Store, open_store
from shared.db.errors import (
    AmbiguousSession,
    SessionNotFound,
    StoreError,
    TitleInUse,
)

__all__ = [
    "AmbiguousSession",
    "Connection",
    "DatabaseError",
    "OperationalError",
    "SessionNotFound",
    "Store",
    "StoreError",
    "TitleInUse",
    "open_store",
]
