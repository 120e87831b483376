"""The database underneath every store: engine, group commit, schema, migrations, dialects."""

from shared.db.engine import Store, open_store
from shared.db.errors import (
    AmbiguousSession,
    SessionNotFound,
    StoreError,
    TitleInUse,
)

__all__ = ["AmbiguousSession", "SessionNotFound", "Store", "StoreError", "TitleInUse", "open_store"]
