"""The fleet registry's pure parts: the refusal line masks both URLs' passwords and names both
fleets; a process hash round-trips, and a partial one (expired mid-read) is skipped."""

from __future__ import annotations

from shared.fleet_registry import Process, refusal

DB_PASSWORD = "pg-Secret-pass"
BROKER_PASSWORD = "redis-Secret-pass"


def test_the_refusal_names_both_fleets_and_never_a_password() -> None:
    line = refusal(
        f"postgresql://hermes:{DB_PASSWORD}@db.internal:5432/hermes",
        "aaaa",
        f"redis://:{BROKER_PASSWORD}@10.0.0.5:6379/0",
        "bbbb",
    )
    assert "\n" not in line
    assert DB_PASSWORD not in line and BROKER_PASSWORD not in line
    assert "database postgresql://hermes:***(sha256:" in line
    assert "@db.internal:5432/hermes belongs to fleet aaaa" in line
    assert "@10.0.0.5:6379/0 belongs to fleet bbbb" in line


def test_a_process_hash_round_trips_and_a_partial_one_is_skipped() -> None:
    process = Process(
        role="gateway telegram",
        host="host-a",
        pid=42,
        version="0.1.0",
        fleet="aaaa",
        started_at=1000.5,
        last_seen=1010.25,
        name="",
    )
    raw = {k.encode(): v.encode() for k, v in process.fields().items()}
    assert Process.parse(raw) == process
    assert process.key == "hermes:fleet:process:host-a:42"
    del raw[b"last_seen"]
    assert Process.parse(raw) is None
