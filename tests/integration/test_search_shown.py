"""What a discover shows of each result's session (`Reads.shown`: the window around the anchor
and the bookends, for every anchor in one statement) is exactly what `around` and `ends` read
for each anchor on its own, whatever the roles, sizes and overlaps, on both databases."""

from __future__ import annotations

import random

import pytest

from shared.db import Store
from shared.search.calls import reads_for
from tests.integration.search_kit import Log, backend_of

pytestmark = pytest.mark.both_databases

ROLES = ("user", "assistant", "tool", "system")
CONVERSATION = ("user", "assistant")


def _write(log: Log, rnd: random.Random) -> dict[str, list[int]]:
    """Sessions of 1 to 30 messages in random roles (short ones: the bookends overlap the
    window, or all of it is bookends)."""
    for s in range(8):
        size = (1, 2, 4, 7, 12, 30, 30, 30)[s]
        log.session(f"s{s}", [(rnd.choice(ROLES), f"message {s}.{i}") for i in range(size)])
    return log.ids


@pytest.mark.parametrize(
    ("size", "roles", "count"),
    [
        (5, CONVERSATION, 3),
        (0, CONVERSATION, 3),
        (1, ("tool",), 3),
        (20, ROLES, 3),
        (2, ("user", "tool"), 1),
        (3, CONVERSATION, 0),
    ],
)
def test_shown_is_around_and_ends_for_each_anchor(
    store: Store, log: Log, size: int, roles: tuple[str, ...], count: int
) -> None:
    rnd = random.Random(size * 7 + count)
    ids = _write(log, rnd)
    anchors = [(rnd.choice(mids), sid) for sid, mids in ids.items()]
    anchors += [(ids["s7"][3], "s7"), (ids["s7"][20], "s7")]  # two anchors in one session
    anchors.append((max(max(m) for m in ids.values()) + 100, "s0"))  # not there: left out
    backend = backend_of(store)
    with store.read() as conn:
        shown = reads_for(store.dialect).shown(conn, anchors, size, roles, CONVERSATION, count)
        assert set(shown) == {mid for mid, _sid in anchors[:-1]}
        for mid, sid in anchors[:-1]:
            anchor = backend.message(conn, mid)
            assert anchor is not None
            first, last = backend.ends(conn, sid, CONVERSATION, count)
            assert shown[mid].anchor == anchor
            assert shown[mid].window == backend.around(conn, anchor, size, roles)
            assert (shown[mid].first, shown[mid].last) == (first, last)
