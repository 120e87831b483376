"""A receiver's batch of turns is recorded in a few statements (intake.record_batch,
inbox.record_turns) with the same outcome as recording them one by one: arrival order per key,
redeliveries (earlier or within the batch) as no-ops, wake-up claims, /stop; and a turn that
cannot be recorded fails alone."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from producers import intake
from producers.intake import Checked, checked, record_all
from shared.db import Store
from shared.db.schema import inbox, routes
from shared.pipeline import inbox as inbox_mod
from shared.pipeline import routes as routes_mod
from shared.settings import Settings
from shared.turns import InboundTurn

pytestmark = pytest.mark.both_databases


def _item(settings: Settings, chat: str, event: str, text: str = "hello") -> Checked:
    return checked(InboundTurn("telegram", chat, "dm", event, text, user_id=chat), settings)


def _clock() -> float:
    return 1000.0


def _rows(store: Store) -> dict[str, Any]:
    with store.read() as conn:
        found = conn.execute(
            select(inbox.c.event_id, inbox.c.session_key, inbox.c.seq, inbox.c.kind)
        ).all()
    return {row.event_id: (row.session_key, row.seq, row.kind) for row in found}


def test_a_batch_records_as_one_by_one_would(store: Store, settings: Settings) -> None:
    earlier = _item(settings, "7", "e0")
    (before,) = record_all(store, [earlier], clock=_clock)  # one turn: the per-turn path
    batch = [
        _item(settings, "1", "e1"),
        _item(settings, "1", "e2"),
        _item(settings, "2", "e3"),
        earlier,  # redelivered from an earlier batch
        _item(settings, "1", "e1"),  # redelivered within this batch
        _item(settings, "2", "e4", "/stop"),
        _item(settings, "7", "e5"),
    ]
    outcomes = record_all(store, batch, clock=_clock)
    assert not any(isinstance(o, Exception) for o in outcomes), outcomes
    done = [o for o in outcomes if isinstance(o, inbox_mod.Recorded)]
    key1, key2, key7 = (item.key.key for item in (batch[0], batch[2], earlier))
    assert [(r.session_key, r.seq, r.duplicate) for r in done] == [
        (key1, 1, False),
        (key1, 2, False),
        (key2, 1, False),
        (key7, 1, True),
        (key1, 1, True),
        (key2, 2, False),
        (key7, 2, False),
    ]
    assert done[4].turn_id == done[0].turn_id  # the redelivery names the recorded turn
    assert isinstance(before, inbox_mod.Recorded) and done[3].turn_id == before.turn_id
    # the first turn of a key claims its wake-up; the next ones find it on its way
    assert [intake.wake_up_for(r) is not None for r in done] == [
        True, False, True, True, True, False, False
    ]  # fmt: skip
    assert _rows(store) == {
        "e0": (key7, 1, "message"),
        "e1": (key1, 1, "message"),
        "e2": (key1, 2, "message"),
        "e3": (key2, 1, "message"),
        "e4": (key2, 2, "command"),
        "e5": (key7, 2, "message"),
    }
    with store.read() as conn:
        stops = dict(conn.execute(select(routes.c.session_key, routes.c.stop_requested_at)).all())
    assert stops[key2] == 1000.0 and stops[key1] is None


def test_a_turn_that_cannot_be_recorded_fails_alone(
    store: Store, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = [_item(settings, "1", "f1"), _item(settings, "2", "f2"), _item(settings, "3", "f3")]
    real = intake.in_shared_room

    def failing(conn: Any, item: Checked) -> Any:
        if item.turn.event_id == "f2":
            raise RuntimeError("this turn cannot be recorded")
        return real(conn, item)

    monkeypatch.setattr(intake, "in_shared_room", failing)
    outcomes = record_all(store, batch, clock=_clock)
    assert isinstance(outcomes[1], RuntimeError)
    assert [isinstance(o, inbox_mod.Recorded) for o in (outcomes[0], outcomes[2])] == [True, True]
    assert set(_rows(store)) == {"f1", "f3"}


def test_a_route_made_midway_by_another_writer_sends_the_batch_one_by_one(
    store: Store, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL a batch's bumps go in one pipeline: a key whose route was missing at its
    first bump and there at a later one was made by another transaction in between, so the
    batch's order for it is not certain: that batch raises (and is recorded turn by turn)."""
    if store.dialect != "postgresql":
        pytest.skip("the bumps are pipelined on PostgreSQL only")
    place = routes_mod.Place("telegram", "9", "dm", None, "9")
    made_by_another = {
        "next_seq": 2,
        "lease_holder": None,
        "lease_expires_at": None,
        "wake_sent_at": None,
        "wake_seq": None,
    }
    monkeypatch.setattr(
        routes_mod._BUMP_SEQ_AND_CLAIM_WAKE,
        "first_each",
        lambda conn, params: [None, made_by_another],
    )
    with pytest.raises(routes_mod.ArrivalRace), store.write() as conn:
        routes_mod.bump_arrivals(conn, [("k9", place, 1.0), ("k9", place, 1.0)], claim_wake=True)
    batch = [_item(settings, "9", "g1"), _item(settings, "9", "g2")]
    outcomes = record_all(store, batch, clock=_clock)  # the pipeline race: one by one
    assert [(o.seq, o.duplicate) for o in outcomes if isinstance(o, inbox_mod.Recorded)] == [
        (1, False),
        (2, False),
    ]


def _key(side: str, name: str) -> str:
    return f"agent:main:telegram:dm:{side}{name}"


def _place(side: str, name: str) -> routes_mod.Place:
    return routes_mod.Place("telegram", f"{side}{name}", "dm", None, f"{side}{name}")


@pytest.mark.parametrize("claim_wake", [True, False])
def test_a_batch_of_different_keys_bumps_as_one_by_one_would(
    store: Store, claim_wake: bool
) -> None:
    """Keys all different (SQLite bumps them in one statement): the same arrivals and rows as
    bumping each alone, whatever state its route is in."""
    with store.write() as conn:
        for side in "ab":  # twin routes in the same states: a is bumped as a batch, b alone
            for name, at in (("held", 100.0), ("pending", 990.0), ("stale", 900.0)):
                routes_mod.bump_arrival(
                    conn, _key(side, name), _place(side, name), at, claim_wake=True
                )
            routes_mod.bump_arrival(
                conn, _key(side, "gone"), _place(side, "gone"), 100.0, claim_wake=True
            )
            assert routes_mod.acquire_route(conn, _key(side, "held"), "w1", 100.0, 3600.0)
            assert routes_mod.acquire_route(conn, _key(side, "gone"), "w2", 100.0, 10.0)
    names = ["held", "pending", "stale", "new", "gone"]
    nows = [1000.0 + n for n in range(len(names))]
    with store.write() as conn:
        batch = [(_key("a", n), _place("a", n), at) for n, at in zip(names, nows, strict=True)]
        together = routes_mod.bump_arrivals(conn, batch, claim_wake=claim_wake)
        alone = [
            routes_mod.bump_arrival(conn, _key("b", n), _place("b", n), at, claim_wake=claim_wake)
            for n, at in zip(names, nows, strict=True)
        ]
    assert together == alone
    assert [(a.seq, a.held, a.wake_pending) for a in together] == [
        (2, True, False),
        (2, False, claim_wake),  # an earlier wake-up is on its way (claimed 10 s before)
        (2, False, False),  # the earlier claim is stale: this arrival claims one
        (1, False, False),
        (2, False, False),  # the lease expired
    ]
    with store.read() as conn:
        rows = conn.execute(select(routes).order_by(routes.c.session_key)).mappings().all()
    sides = {
        side: [
            {
                **row,
                "session_key": row["session_key"][-len(name) :],
                "chat_id": name,
                "user_id": name,
            }
            for row in rows
            for name in names
            if row["session_key"] == _key(side, name)
        ]
        for side in "ab"
    }
    assert sides["a"] == sides["b"]
    assert len(sides["a"]) == len(names)
