"""Every beat entry names a task the workers really register, on a queue they consume."""

from __future__ import annotations

import beat_schedule
from shared.settings import load_settings
from shared.tasknames import ALL_QUEUES
from workers.app import create_app
from workers.cli import beat_config


def test_every_entry_is_a_registered_task_on_a_known_queue(hermes_env: dict[str, str]) -> None:
    app = create_app(load_settings(hermes_env))
    for name, entry in beat_schedule.SCHEDULE.items():
        assert entry["task"] in app.tasks, f"beat entry {name}: no task {entry['task']}"
        options = entry["options"]
        assert isinstance(options, dict) and options["queue"] in ALL_QUEUES


def test_settings_override_the_periods(hermes_env: dict[str, str]) -> None:
    settings = load_settings(
        {
            **hermes_env,
            "HERMES_MAINTENANCE__CRON_SECONDS": "2",
            "HERMES_PIPELINE__REDRIVE_SECONDS": "3",
        }
    )
    config = beat_config(settings)
    assert config["cron"]["schedule"] == 2 and config["redrive"]["schedule"] == 3
    assert beat_schedule.SCHEDULE["cron"]["schedule"] == 15.0  # the data itself is untouched


def test_the_index_pending_sweep_is_scheduled_on_postgresql_alone(
    hermes_env: dict[str, str],
) -> None:
    assert "index_pending" not in beat_config(load_settings(hermes_env))  # SQLite
    on = load_settings({**hermes_env, "HERMES_DATABASE_URL": "postgresql://db.example/hermes"})
    assert beat_config(on)["index_pending"]["schedule"] == 2.0
