"""Platform commands and keys on a real state.db: /sethome, /handoff, shared rooms, migration."""

from __future__ import annotations

import time

from sqlalchemy import select, text

from producers.intake import accept, key_for
from shared.db import Store
from shared.db.schema import outbox as table
from shared.db.schema import routes
from shared.pipeline import outbox
from shared.settings import Settings, load_settings
from shared.store import chats, handoffs
from tests.pipeline_helpers import make_runtime, turn
from workers.delivery.base import MemorySender
from workers.drain import drain
from workers.handoff import run_handoff


def _replies(store: Store, lane: str) -> list[str]:
    """Every reply written to `lane`, sent (inline, by the drain) or not, in write order."""
    with store.read() as conn:
        rows = conn.execute(select(table.c.text).where(table.c.lane == lane).order_by(table.c.id))
        return [str(text_) for text_ in rows.scalars()]


def test_sethome_stores_the_chat_and_handoff_continues_the_session_there(
    settings: Settings, store: Store
) -> None:
    rt, waker = make_runtime(settings, store)
    rt.senders.add(MemorySender("slack"))
    tg = {"platform": "telegram", "chat_type": "dm", "user_id": "111"}
    sl = {"platform": "slack", "chat_type": "dm", "user_id": "U1", "scope": "T1"}

    home = accept(
        store, rt.waker, turn(1, "D1", text="/sethome", **sl), settings=settings, clock=time.time
    )
    drain(rt, home.session_key)
    assert _replies(store, "slack:D1") == [
        "This chat is now the slack home channel: notices and hand-offs come here."
    ]
    with store.read() as conn:
        stored = chats.get_home_channel(conn, "slack")
    assert stored == chats.HomeChannel("slack", "D1", "dm", None, "U1", "agent:main:slack:dm:T1:D1")

    talk = accept(
        store,
        rt.waker,
        turn(2, "111", text="plan my trip", **tg),
        settings=settings,
        clock=time.time,
    )
    drain(rt, talk.session_key)
    hand = accept(
        store,
        rt.waker,
        turn(3, "111", text="/handoff slack", **tg),
        settings=settings,
        clock=time.time,
    )
    drain(rt, hand.session_key)
    assert _replies(store, "telegram:111")[-1] == (
        "Handing off to slack: waiting for its gateway to take the session…"
    )
    assert _replies(store, "slack:D1") == [  # nothing is said there before a worker runs it
        "This chat is now the slack home channel: notices and hand-offs come here."
    ]
    ((handoff_id, countdown),) = waker.handoffs
    assert countdown == 1.0
    with store.read() as conn:
        request = handoffs.get(conn, handoff_id)
    assert request is not None and request.status == handoffs.PENDING
    assert run_handoff(rt, handoff_id).outcome == "completed"
    assert run_handoff(rt, handoff_id).outcome == "skipped"  # one claim per request
    with store.read() as conn:
        request = handoffs.get(conn, handoff_id)
    assert request is not None and request.status == handoffs.COMPLETED
    assert request.target_key == "agent:main:slack:dm:T1:D1"
    assert _replies(store, "slack:D1")[1].startswith("↻ Continuing session ")
    assert len(_replies(store, "slack:D1")) == 3  # the agent's summary, answered before completing
    with store.read() as conn:
        asked = conn.execute(text("SELECT text FROM inbox WHERE event_id = 'handoff:1'")).scalar()
    assert asked is not None and "handed off from the terminal to slack" in asked

    with store.read() as conn:
        bound = {
            r.session_key: r.session_id
            for r in conn.execute(select(routes.c.session_key, routes.c.session_id))
        }
    assert bound["agent:main:slack:dm:T1:D1"] == bound["agent:main:telegram:dm:111"]
    # the next Slack message continues that session, with its history
    more = accept(
        store,
        rt.waker,
        turn(4, "D1", text="and the hotel?", **sl),
        settings=settings,
        clock=time.time,
    )
    drain(rt, more.session_key)
    with store.read() as conn:
        contents = (
            conn.execute(
                text("SELECT content FROM messages WHERE session_id = :s ORDER BY id"),
                {"s": bound["agent:main:telegram:dm:111"]},
            )
            .scalars()
            .all()
        )
    assert contents[0] == "plan my trip" and "and the hotel?" in contents


def test_handoff_explains_what_is_missing(settings: Settings, store: Store) -> None:
    rt, _ = make_runtime(settings, store)
    tg = {"platform": "telegram", "chat_type": "dm", "user_id": "111"}
    for n, (args, want) in enumerate(
        [
            ("", "Usage: /handoff"),
            ("myspace", "Unknown platform"),
            ("discord", "not configured"),
            ("telegram", "no home channel yet"),
            ("cli", "hermes -r "),
        ]
    ):
        accepted = accept(
            store,
            rt.waker,
            turn(n, "111", text=f"/handoff {args}", **tg),
            settings=settings,
            clock=time.time,
        )
        drain(rt, accepted.session_key)
        assert want in _replies(store, "telegram:111")[-1]


def test_handoff_to_a_disabled_platform_says_it_is_disabled(
    hermes_env: dict[str, str], store: Store
) -> None:
    settings = load_settings(
        {
            **hermes_env,
            "HERMES_PLATFORMS__DISCORD__TOKEN": "discord-token",
            "HERMES_PLATFORMS__DISCORD__ENABLED": "false",
        }
    )
    rt, _ = make_runtime(settings, store)
    tg = {"platform": "telegram", "chat_type": "dm", "user_id": "111"}
    accepted = accept(
        store, rt.waker, turn(1, "111", text="/handoff discord", **tg), settings=settings,
        clock=time.time,
    )  # fmt: skip
    drain(rt, accepted.session_key)
    answer = _replies(store, "telegram:111")[-1]
    assert "disabled" in answer and "platforms.discord.enabled" in answer
    assert "token" not in answer


def test_a_configured_home_channel_is_the_fallback(
    hermes_env: dict[str, str], store: Store
) -> None:
    settings = load_settings({**hermes_env, "HERMES_PLATFORMS__TELEGRAM__HOME_CHANNEL": "-100555"})
    with store.read() as conn:
        found = chats.get_home_channel(conn, "telegram", configured="-100555")
    assert found == chats.HomeChannel("telegram", "-100555", "group", source="settings")
    assert settings.platforms.telegram.home_channel == "-100555"


def test_shared_rooms_and_per_user_groups(hermes_env: dict[str, str]) -> None:
    group = turn(1, "-100", platform="telegram", chat_type="group", user_id="7", user_name="Ann")
    default = load_settings(hermes_env)
    assert key_for(group, default).key == "agent:main:telegram:group:-100:7"
    assert not key_for(group, default).shared
    shared = load_settings({**hermes_env, "HERMES_PLATFORMS__TELEGRAM__SHARED_ROOMS": "-100,-200"})
    assert shared.platforms.telegram.shared_rooms == ("-100", "-200")
    assert key_for(group, shared).key == "agent:main:telegram:group:-100"
    assert key_for(group, shared).shared
    per_room = load_settings({**hermes_env, "HERMES_GROUP_SESSIONS_PER_USER": "false"})
    assert key_for(group, per_room).key == "agent:main:telegram:group:-100"
    anonymous = turn(2, "-300", platform="telegram", chat_type="group", user_id=None)
    assert key_for(anonymous, default).key == "agent:main:telegram:group:-300"
    topic = turn(3, "-100", platform="telegram", chat_type="group", user_id="7", thread_id="42")
    assert key_for(topic, default).key == "agent:main:telegram:group:-100:42"


def test_in_a_shared_room_turns_carry_the_speakers_name(
    hermes_env: dict[str, str], store: Store
) -> None:
    settings = load_settings({**hermes_env, "HERMES_PLATFORMS__TELEGRAM__SHARED_ROOMS": "-100"})
    rt, _ = make_runtime(settings, store)
    for n, (user, name) in enumerate([("7", "Ann"), ("8", "Bob")]):
        accepted = accept(
            store,
            rt.waker,
            turn(
                n,
                "-100",
                platform="telegram",
                chat_type="group",
                user_id=user,
                user_name=name,
                text=f"hi from {name}",
            ),
            settings=settings,
            clock=time.time,
        )
        drain(rt, accepted.session_key)
    with store.read() as conn:
        users = (
            conn.execute(text("SELECT content FROM messages WHERE role = 'user' ORDER BY id"))
            .scalars()
            .all()
        )
    assert users == ["[Ann] hi from Ann", "[Bob] hi from Bob"]


def test_chat_migration_is_idempotent_and_keeps_the_conversation(
    settings: Settings, store: Store
) -> None:
    rt, _ = make_runtime(settings, store)
    group = {"platform": "telegram", "chat_type": "group", "user_id": "7"}
    first = accept(
        store, rt.waker, turn(1, "-4012", text="hello", **group), settings=settings, clock=time.time
    )
    drain(rt, first.session_key)
    with store.write() as conn:  # a reply still waiting to be sent to the old chat
        outbox.add(conn, platform="telegram", chat_id="-4012", text="queued", now=time.time())
    waiting = accept(
        store,
        rt.waker,
        turn(2, "-4012", text="still waiting", **group),
        settings=settings,
        clock=time.time,
    )
    with store.write() as conn:
        moved = chats.migrate_chat(conn, "telegram", "-4012", "-1009", time.time())
        again = chats.migrate_chat(conn, "telegram", "-4012", "-1009", time.time())
    assert (moved.routes, moved.turns, moved.replies) == (1, 1, 1)
    assert (again.routes, again.turns, again.replies) == (0, 0, 0)
    drain(
        rt, waiting.session_key
    )  # the straggler drains under its old key, answered in the new chat
    after = accept(
        store, rt.waker, turn(3, "-1009", text="after", **group), settings=settings, clock=time.time
    )
    assert after.session_key == "agent:main:telegram:group:-1009:7"
    drain(rt, after.session_key)
    with store.read() as conn:
        sessions = conn.execute(text("SELECT id, chat_id FROM sessions")).all()
        lanes = conn.execute(
            text("SELECT text, lane FROM outbox WHERE text NOT LIKE '[offline%' ORDER BY id")
        ).all()
        later = (
            conn.execute(
                text("SELECT DISTINCT lane FROM outbox WHERE id > (SELECT min(id) FROM outbox)")
            )
            .scalars()
            .all()
        )
    assert len(sessions) == 1 and sessions[0][1] == "-1009"
    assert [tuple(r) for r in lanes] == [("queued", "telegram:-1009")]
    assert later == ["telegram:-1009"]  # everything after the first (sent) reply


def test_telegrams_start_greets_with_the_command_list(settings: Settings, store: Store) -> None:
    rt, _ = make_runtime(settings, store)
    tg = {"platform": "telegram", "chat_type": "dm", "user_id": "111"}
    accepted = accept(
        store, rt.waker, turn(1, "111", text="/start", **tg), settings=settings, clock=time.time
    )
    drain(rt, accepted.session_key)
    reply = _replies(store, "telegram:111")[-1]
    assert reply.startswith("Hello!") and "/new" in reply
