"""The session store: state.db behind SQLAlchemy Core, versioned by Alembic."""

from shared.store.engine import Store, open_store
from shared.store.errors import (
    AmbiguousSession,
    SessionNotFound,
    StoreError,
    TitleInUse,
)

__all__ = ["AmbiguousSession", "SessionNotFound", "Store", "StoreError", "TitleInUse", "open_store"]
