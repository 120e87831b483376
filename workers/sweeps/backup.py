"""The backup sweep: a copy of state.db every `maintenance.backup_hours`, keeping the newest N.

Beat fires it on that period (the entry is left out when the setting is 0). A fire that finds
a backup younger than half the period (a double fire, a restart) does nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from shared.db.sqlite_care import backup_store, backups_dir, default_target, newest_backup_age
from workers.runtime import Runtime

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BackupReport:
    reason: str  # made | off | recent | not-sqlite
    path: str | None = None
    removed: int = 0


def sweep(rt: Runtime) -> BackupReport:
    hours = rt.settings.maintenance.backup_hours
    path = rt.store.path
    if path is None:
        return BackupReport("not-sqlite")
    if not hours:
        return BackupReport("off")
    age = newest_backup_age(backups_dir(path), rt.clock())
    if age is not None and age < hours * 3600 / 2:
        return BackupReport("recent")
    made = backup_store(
        rt.store, default_target(path, rt.clock()), keep=rt.settings.maintenance.backup_keep
    )
    log.info("backed up state.db to %s (%d bytes, %.2f s)", made.path, made.bytes, made.seconds)
    return BackupReport("made", str(made.path), len(made.removed))
