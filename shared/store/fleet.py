"""The fleet's identity: a random id the database holds, made by the first process that asks.

Every host of a fleet reaches the same database (whatever address it uses for it), so the id
names the fleet itself: the beat lock is scoped by it, and two fleets sharing one Redis never
take each other's lock.
"""

from __future__ import annotations

import uuid

from shared.db import Store
from shared.db.meta import get_meta, meta_once

FLEET_KEY = "fleet_id"


def fleet_id(store: Store) -> str:
    with store.write() as conn:
        return meta_once(conn, FLEET_KEY, uuid.uuid4().hex)


def stored_fleet_id(store: Store) -> str | None:
    """The fleet id if a process made one already (a read: `hermes status` writes nothing)."""
    with store.read() as conn:
        return get_meta(conn, FLEET_KEY)
