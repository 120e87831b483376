"""Rules of the scheduled sweeps, as pure functions of their inputs and an injected `now`.

Reset policy (idle / daily / both / none, per platform and per chat type, platform winning),
cron slots (one run per slot; after downtime the missed slots collapse into one run), and the
retention-prune interval. Times are POSIX seconds; zones are IANA names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, croniter

ResetMode = Literal["idle", "daily", "both", "none"]
IDLE = "idle"
DAILY = "daily"


class ScheduleError(ValueError):
    """A cron expression or time zone that cannot be used; the message says which."""


@dataclass(frozen=True, slots=True)
class ResetPolicy:
    mode: ResetMode = "none"
    idle_minutes: float = 1440
    at_hour: int = 4
    timezone: str = "UTC"


@dataclass(frozen=True, slots=True)
class ResetOverride:
    """Fields left None inherit from the level below."""

    mode: ResetMode | None = None
    idle_minutes: float | None = None
    at_hour: int | None = None
    timezone: str | None = None

    def apply(self, policy: ResetPolicy) -> ResetPolicy:
        changes = {
            name: value
            for name in ("mode", "idle_minutes", "at_hour", "timezone")
            if (value := getattr(self, name)) is not None
        }
        return replace(policy, **changes)


def effective_policy(
    base: ResetPolicy,
    *,
    platform: str,
    chat_type: str | None,
    by_platform: dict[str, ResetOverride],
    by_chat_type: dict[str, ResetOverride],
) -> ResetPolicy:
    """base, then the chat type's override, then the platform's (the platform wins)."""
    policy = base
    if chat_type and chat_type in by_chat_type:
        policy = by_chat_type[chat_type].apply(policy)
    if platform in by_platform:
        policy = by_platform[platform].apply(policy)
    return policy


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        hint = "use an IANA name like Europe/Berlin"
        raise ScheduleError(f"unknown time zone {name!r} ({hint})") from None


def _cron(expression: str, start: datetime) -> croniter:
    try:
        return croniter(expression, start)
    except (CroniterBadCronError, ValueError, KeyError) as exc:
        raise ScheduleError(f"bad cron expression {expression!r}: {exc}") from None


def previous_slot(expression: str, tz: str, now: float) -> float:
    """The latest time ≤ now that `expression` names in zone `tz`."""
    # get_prev is strictly before its start; start a second later so a slot at `now` counts.
    it = _cron(expression, datetime.fromtimestamp(int(now) + 1, zone(tz)))
    return float(it.get_prev(datetime).timestamp())


def next_slot(expression: str, tz: str, after: float) -> float:
    local = datetime.fromtimestamp(after, zone(tz))
    return float(_cron(expression, local).get_next(datetime).timestamp())


def validate_cron(expression: str, tz: str) -> None:
    """Raise ScheduleError for an expression or zone that cannot be scheduled."""
    next_slot(expression, tz, datetime.now(UTC).timestamp())


def reset_reason(policy: ResetPolicy, last_active: float, now: float) -> str | None:
    """Why a session last active at `last_active` should be reset at `now`, or None."""
    if policy.mode == "none":
        return None
    if policy.mode in ("idle", "both") and now - last_active >= policy.idle_minutes * 60:
        return IDLE
    if policy.mode in ("daily", "both"):
        boundary = previous_slot(f"0 {policy.at_hour} * * *", policy.timezone, now)
        if last_active < boundary <= now:
            return DAILY
    return None


def due_cron_slot(
    expression: str, tz: str, *, created_at: float, last_slot: float | None, now: float
) -> float | None:
    """The slot a job should run for now, or None. Missed slots collapse into the latest one.

    A slot is identified by its scheduled time; the caller records it (unique per job and slot)
    so a second beat, a double fire or a restart cannot run it again.
    """
    slot = previous_slot(expression, tz, now)
    if slot < created_at:
        return None
    if last_slot is not None and slot <= last_slot:
        return None
    return slot


# The state_meta key holding the last retention prune's time (POSIX seconds, as text): the one
# record of "at most once per interval for the fleet", read by whoever asks for a prune.
PRUNE_LAST_RUN = "prune.last_run"


def prune_due(last_run: float | None, now: float, min_interval_hours: float) -> bool:
    return last_run is None or now - last_run >= min_interval_hours * 3600
