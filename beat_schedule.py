"""Celery beat's schedule as data: entry name → task name, period and queue. No logic here."""

SCHEDULE: dict[str, dict[str, object]] = {}
