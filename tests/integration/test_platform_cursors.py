"""shared/store/cursors.py on both databases: a cursor is stored, replaced and read back per
(platform, account), and writers racing to store a new one all succeed (the last one wins)
instead of one failing on the primary key."""

from __future__ import annotations

import threading

import pytest

from shared.db import Store
from shared.store import cursors

pytestmark = pytest.mark.both_databases


def test_a_cursor_is_stored_replaced_and_kept_per_platform_and_account(store: Store) -> None:
    with store.read() as conn:
        assert cursors.load(conn, "matrix", "@bot:example.org") is None
    with store.write() as conn:
        cursors.save(conn, "matrix", "@bot:example.org", "s1_1")
        cursors.save(conn, "teams", "service_url:a:1", "https://smba.trafficmanager.net/amer/")
    with store.write() as conn:
        cursors.save(conn, "matrix", "@bot:example.org", "s2_9")
    with store.read() as conn:
        assert cursors.load(conn, "matrix", "@bot:example.org") == "s2_9"
        assert cursors.load(conn, "teams", "service_url:a:1") == (
            "https://smba.trafficmanager.net/amer/"
        )
        assert cursors.load(conn, "teams", "@bot:example.org") is None


@pytest.mark.timeout(60)
def test_writers_racing_to_store_a_new_cursor_all_succeed(store: Store) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def save(value: str) -> None:
        try:
            start.wait()
            for round_ in range(20):
                with store.write() as conn:
                    cursors.save(conn, "teams", f"service_url:race:{round_}", value)
        except BaseException as exc:  # any failure is the finding
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(f"https://h{n}/",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with store.read() as conn:
        found = {cursors.load(conn, "teams", f"service_url:race:{n}") for n in range(20)}
    assert found <= {f"https://h{n}/" for n in range(4)} and None not in found
