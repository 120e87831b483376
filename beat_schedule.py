"""Celery beat's schedule as data: entry name → task name, period (seconds), queue. No logic.

The periods here are defaults; `pipeline.redrive_seconds` and `maintenance.*_seconds` in the
settings override them (workers/cli.py applies the settings when beat starts).
"""

SCHEDULE: dict[str, dict[str, object]] = {
    # Wake sessions and chat lanes whose wake-up was lost; report dead turns.
    "redrive": {
        "task": "hermes.maintenance.redrive",
        "schedule": 10.0,
        "options": {"queue": "hermes.maintenance", "expires": 10.0},
    },
    # Start cron jobs whose slot came (each slot once, whatever fires twice).
    "cron": {
        "task": "hermes.maintenance.cron_tick",
        "schedule": 15.0,
        "options": {"queue": "hermes.maintenance", "expires": 15.0},
    },
    # End sessions whose reset policy says so, after their memory turn.
    "reset": {
        "task": "hermes.maintenance.reset_sweep",
        "schedule": 60.0,
        "options": {"queue": "hermes.maintenance", "expires": 60.0},
    },
    # Title sessions whose title task was lost.
    "titles": {
        "task": "hermes.maintenance.title_sweep",
        "schedule": 300.0,
        "options": {"queue": "hermes.maintenance", "expires": 300.0},
    },
    # Merge the search indexes' segments that appends pile up (SQLite; when there are many).
    "index_merge": {
        "task": "hermes.maintenance.index_merge",
        "schedule": 600.0,
        "options": {"queue": "hermes.maintenance", "expires": 600.0},
    },
    # Move the search indexes' pending lists in before a writer has to (PostgreSQL only).
    "index_pending": {
        "task": "hermes.maintenance.index_pending",
        "schedule": 2.0,
        "options": {"queue": "hermes.maintenance", "expires": 2.0},
    },
    # A copy of state.db in $HERMES_HOME/backups (maintenance.backup_hours; off when 0).
    "backup": {
        "task": "hermes.maintenance.backup",
        "schedule": 86400.0,
        "options": {"queue": "hermes.maintenance", "expires": 3600.0},
    },
    # Retention prune, index merge, reclaim (only with sessions.auto_prune; once per interval).
    "prune": {
        "task": "hermes.maintenance.prune",
        "schedule": 3600.0,
        "options": {"queue": "hermes.maintenance", "expires": 3600.0},
    },
}
