"""Sweep rules with an injected clock: reset boundaries, overrides, cron slots, prune interval."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from shared.maintenance import (
    ResetOverride,
    ResetPolicy,
    ScheduleError,
    due_cron_slot,
    effective_policy,
    next_slot,
    previous_slot,
    prune_due,
    reset_reason,
    validate_cron,
)

BERLIN = ZoneInfo("Europe/Berlin")


def ts(text: str, tz: ZoneInfo = BERLIN) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=tz).timestamp()


def test_idle_resets_only_after_the_idle_time() -> None:
    policy = ResetPolicy(mode="idle", idle_minutes=30)
    last = ts("2026-06-01 23:50")
    assert reset_reason(policy, last, last + 29 * 60) is None
    assert reset_reason(policy, last, last + 30 * 60) == "idle"  # across midnight


def test_daily_resets_once_the_hour_passes_since_last_activity() -> None:
    policy = ResetPolicy(mode="daily", at_hour=4, timezone="Europe/Berlin")
    last = ts("2026-06-01 23:00")
    assert reset_reason(policy, last, ts("2026-06-02 03:59")) is None
    assert reset_reason(policy, last, ts("2026-06-02 04:00")) == "daily"
    # active after the boundary: not due until the next one
    assert reset_reason(policy, ts("2026-06-02 04:01"), ts("2026-06-02 23:00")) is None
    assert reset_reason(policy, ts("2026-06-02 04:01"), ts("2026-06-03 04:00")) == "daily"


def test_daily_follows_the_zone_across_a_dst_change() -> None:
    policy = ResetPolicy(mode="daily", at_hour=4, timezone="Europe/Berlin")
    # 2026-03-29: clocks jump 02:00 → 03:00 in Berlin; 04:00 local is 02:00 UTC that day.
    last = ts("2026-03-29 01:30")
    assert reset_reason(policy, last, ts("2026-03-29 03:59")) is None
    assert reset_reason(policy, last, ts("2026-03-29 04:00")) == "daily"
    assert previous_slot("0 4 * * *", "Europe/Berlin", ts("2026-03-29 04:30")) == ts(
        "2026-03-29 02:00", ZoneInfo("UTC")
    )


def test_same_instant_different_zone_different_answer() -> None:
    last = ts("2026-06-01 12:00", ZoneInfo("UTC"))
    now = ts("2026-06-02 03:30", ZoneInfo("UTC"))  # 05:30 in Berlin, 23:30 in New York
    berlin = ResetPolicy(mode="daily", at_hour=4, timezone="Europe/Berlin")
    new_york = ResetPolicy(mode="daily", at_hour=4, timezone="America/New_York")
    assert reset_reason(berlin, last, now) == "daily"
    assert reset_reason(new_york, last, now) is None


def test_both_takes_whichever_comes_first_and_none_never_resets() -> None:
    both = ResetPolicy(mode="both", idle_minutes=60, at_hour=4, timezone="UTC")
    last = ts("2026-06-01 03:30", ZoneInfo("UTC"))
    assert reset_reason(both, last, last + 31 * 60) == "daily"
    assert reset_reason(both, last - 7200, last) == "idle"
    assert reset_reason(ResetPolicy(mode="none"), 0, 10**10) is None


def test_platform_override_wins_over_chat_type() -> None:
    base = ResetPolicy(mode="idle", idle_minutes=60)
    by_chat = {"group": ResetOverride(mode="none")}
    by_platform = {"telegram": ResetOverride(idle_minutes=5)}
    kw = {"by_platform": by_platform, "by_chat_type": by_chat}
    assert effective_policy(base, platform="slack", chat_type="group", **kw).mode == "none"
    tg_group = effective_policy(base, platform="telegram", chat_type="group", **kw)
    assert (tg_group.mode, tg_group.idle_minutes) == ("none", 5)
    tg_platform_mode = effective_policy(
        base,
        platform="telegram",
        chat_type="group",
        by_platform={"telegram": ResetOverride(mode="idle")},
        by_chat_type=by_chat,
    )
    assert tg_platform_mode.mode == "idle"
    assert effective_policy(base, platform="cli", chat_type="dm", **kw) == base


def test_cron_slot_runs_once_and_missed_slots_collapse() -> None:
    created = ts("2026-06-01 00:00", ZoneInfo("UTC"))
    expr = "0 9 * * *"
    nine = ts("2026-06-01 09:00", ZoneInfo("UTC"))
    assert due_cron_slot(expr, "UTC", created_at=created, last_slot=None, now=nine - 1) is None
    assert due_cron_slot(expr, "UTC", created_at=created, last_slot=None, now=nine) == nine
    # a double fire (or a second beat) after the slot was recorded: nothing
    assert due_cron_slot(expr, "UTC", created_at=created, last_slot=nine, now=nine + 5) is None
    # three days of downtime: one run, for the latest slot
    later = ts("2026-06-04 10:00", ZoneInfo("UTC"))
    assert due_cron_slot(expr, "UTC", created_at=created, last_slot=nine, now=later) == ts(
        "2026-06-04 09:00", ZoneInfo("UTC")
    )


def test_a_job_created_after_todays_slot_waits_for_the_next() -> None:
    created = ts("2026-06-01 09:30", ZoneInfo("UTC"))
    now = ts("2026-06-01 10:00", ZoneInfo("UTC"))
    assert due_cron_slot("0 9 * * *", "UTC", created_at=created, last_slot=None, now=now) is None
    assert next_slot("0 9 * * *", "UTC", now) == ts("2026-06-02 09:00", ZoneInfo("UTC"))


@pytest.mark.parametrize(
    ("expr", "tz"), [("61 * * * *", "UTC"), ("0 9 * *", "UTC"), ("0 9 * * *", "Mars/Olympus")]
)
def test_bad_schedules_are_clear_errors(expr: str, tz: str) -> None:
    with pytest.raises(ScheduleError):
        validate_cron(expr, tz)


def test_prune_interval_bookkeeping() -> None:
    assert prune_due(None, 1000, 24)
    assert not prune_due(1000, 1000 + 23 * 3600, 24)
    assert prune_due(1000, 1000 + 24 * 3600, 24)
