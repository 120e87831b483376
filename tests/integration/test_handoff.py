"""`/handoff telegram` from a terminal session, against the fake Bot API (python-telegram-bot)
on real Redis: the worker's task completes it once, and each failure is reported as one."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from producers.cli.chat_handoff import await_handoff
from producers.intake import accept
from shared.db import Store, open_store
from shared.db.schema import routes
from shared.pipeline import inbox, outbox, route_sessions
from shared.settings import Settings, load_settings
from shared.store import chats, handoffs
from shared.turns import InboundTurn
from tests.fakes.delivery import delivery_runtime
from tests.fakes.stack import redis_db_url
from tests.fakes.telegram_api import FakeTelegram
from tests.pipeline_helpers import turn
from workers.drain import drain
from workers.handoff import run_handoff
from workers.redrive import redrive
from workers.runtime import Runtime

pytestmark = pytest.mark.both_databases

TOKEN = "123456789:AAFakeTokenForTestsSecretPart"
HOME = chats.HomeChannel(
    "telegram", "-100777", "group", None, "42", "agent:main:telegram:group:-100777:42"
)
ROOM = "agent:main:telegram:group:-100777"  # the home channel's key shared by the whole room
CLI = {"platform": "cli", "chat_type": "dm", "user_id": "local"}


@pytest.fixture
def fake() -> Iterator[FakeTelegram]:
    with FakeTelegram(TOKEN) as server:
        yield server


@pytest.fixture
def tg(hermes_env: dict[str, str], redis_url: str, fake: FakeTelegram) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url),
            "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN,
            "HERMES_PLATFORMS__TELEGRAM__API_BASE": fake.api_base,
            "HERMES_SESSIONS__HANDOFF_TIMEOUT_SECONDS": "1",
        }
    )


@pytest.fixture
def tg_store(tg: Settings) -> Iterator[Store]:
    store = open_store(tg.resolved_database_url)
    yield store
    store.close()


def _say(rt: Runtime, n: int, text: str) -> list[str]:
    """A terminal turn, drained; the replies it got."""
    accepted = accept(
        rt.store, rt.waker, turn(n, "abc123", text=text, **CLI), settings=rt.settings,
        clock=time.time,
    )  # fmt: skip
    drain(rt, accepted.session_key)
    with rt.store.read() as conn:
        return [row.text for row in outbox.for_turn(conn, accepted.turn_id)]


def _session(rt: Runtime) -> str:
    with rt.store.read() as conn:
        found = conn.execute(
            select(routes.c.session_id).where(routes.c.session_key == "agent:main:cli:dm:abc123")
        ).scalar()
    assert found is not None
    return str(found)


def _bound(rt: Runtime, key: str) -> str | None:
    with rt.store.read() as conn:
        found = conn.execute(select(routes.c.session_id).where(routes.c.session_key == key))
        return found.scalar()


def _group_turn(n: int, user_id: str, text: str) -> InboundTurn:
    return turn(
        n, "-100777", text=text, platform="telegram", chat_type="group", user_id=user_id
    )  # fmt: skip


def test_handoff_completes_once_and_the_group_continues_the_session(
    tg: Settings, tg_store: Store, fake: FakeTelegram
) -> None:
    with tg_store.write() as conn:
        chats.set_home_channel(conn, HOME)
    with delivery_runtime(tg, tg_store) as (rt, waker):
        _say(rt, 1, "plan my trip to Lisbon")
        session_id = _session(rt)
        assert _say(rt, 2, "/handoff telegram") == [
            "Handing off to telegram: waiting for its gateway to take the session…"
        ]
        assert _say(rt, 3, "/handoff telegram") == [
            "A handoff to telegram is already under way for this session."
        ]
        ((handoff_id, _),) = waker.handoffs
        assert run_handoff(rt, handoff_id).outcome == "completed"
        assert run_handoff(rt, handoff_id).outcome == "skipped"
        ended = await_handoff(tg_store, session_id, time.time)
        assert ended is not None and ended.completed
        assert ended.lines == [
            "↻ Handoff complete. The session is now active on telegram.",
            "Resume it on this terminal later with: /resume Plan my trip to Lisbon",
        ]
        assert fake.methods().count("createForumTopic") == 1  # not a forum: the channel itself
        assert all("message_thread_id" not in m for m in fake.sent("-100777"))
        texts = [m["text"] for m in fake.sent("-100777")]
        assert texts[0].startswith("↻ Continuing session ")
        assert "handed off from the terminal to telegram" in texts[1]  # the summary, delivered
        # No thread: the room's key (no user in it) holds the session, for everyone there.
        assert _bound(rt, ROOM) == session_id and _bound(rt, HOME.session_key or "") is None
        answered = []
        for n, user in ((7, "99"), (8, "42")):  # a second user, then the one who ran /sethome
            accepted = accept(
                tg_store, rt.waker, _group_turn(n, user, "and the hotel?"), settings=tg,
                clock=time.time,
            )  # fmt: skip
            assert accepted.session_key == ROOM
            drain(rt, accepted.session_key)
            with tg_store.read() as conn:
                answered.append(inbox.get_turn(conn, accepted.turn_id))
        assert [t.session_id if t else None for t in answered] == [session_id, session_id]
        # /new ends the handed-off session there: the room is per user again
        assert accept(
            tg_store, rt.waker, _group_turn(9, "99", "/new"), settings=tg, clock=time.time
        ).session_key == ROOM  # fmt: skip
        drain(rt, ROOM)
        after = accept(
            tg_store, rt.waker, _group_turn(10, "99", "hi"), settings=tg, clock=time.time
        )
        assert after.session_key == "agent:main:telegram:group:-100777:99"


def test_a_refused_send_fails_the_handoff_with_the_platforms_reason(
    tg: Settings, tg_store: Store, fake: FakeTelegram
) -> None:
    with tg_store.write() as conn:
        chats.set_home_channel(conn, HOME)
    fake.script("sendMessage", "403")
    with delivery_runtime(tg, tg_store) as (rt, waker):
        _say(rt, 1, "plan my trip")
        session_id = _session(rt)
        _say(rt, 2, "/handoff telegram")
        ((handoff_id, _),) = waker.handoffs
        result = run_handoff(rt, handoff_id)
        ended = await_handoff(tg_store, session_id, time.time)
        assert result.outcome == "failed" and "403" in (result.error or "")
        assert ended is not None and not ended.completed
        assert ended.lines[0].startswith("Handoff to telegram failed: telegram refused the message")
        assert "Forbidden" in ended.lines[0] and "stays on the session" in ended.lines[0]
        assert _bound(rt, HOME.session_key or "") is None  # nothing moved
        # cleared, so it can be retried (the fake answers normally now)
        assert _say(rt, 3, "/handoff telegram")[0].startswith("Handing off to telegram")
        assert run_handoff(rt, waker.handoffs[-1][0]).outcome == "completed"
    with tg_store.read() as conn:
        unsent = [r for r in outbox.pending(conn, "telegram:-100777")]
    assert unsent == []  # the refused note is failed, never sent later


def test_a_refused_summary_fails_the_handoff_and_gives_the_key_back(
    tg: Settings, tg_store: Store, fake: FakeTelegram
) -> None:
    with tg_store.write() as conn:
        chats.set_home_channel(conn, HOME)
    fake.script("sendMessage", "ok", "403")  # the note goes out, the summary is refused
    with delivery_runtime(tg, tg_store) as (rt, waker):
        _say(rt, 1, "plan my trip")
        session_id = _session(rt)
        _say(rt, 2, "/handoff telegram")
        result = run_handoff(rt, waker.handoffs[0][0])
        assert result.outcome == "failed"
        assert (result.error or "").startswith("telegram refused the summary: ")
        assert "Forbidden" in (result.error or "")
        ended = await_handoff(tg_store, session_id, time.time)
        assert ended is not None and not ended.completed
        assert ended.lines[0].startswith("Handoff to telegram failed: telegram refused the summary")
        # the room's key is given back: the group is per user again, nothing points there
        assert _bound(rt, ROOM) is None
        other = accept(
            tg_store, rt.waker, _group_turn(7, "99", "hello"), settings=tg, clock=time.time
        )
        assert other.session_key == "agent:main:telegram:group:-100777:99"
        # and a retry starts clean and completes
        assert _say(rt, 3, "/handoff telegram")[0].startswith("Handing off to telegram")
        assert run_handoff(rt, waker.handoffs[-1][0]).outcome == "completed"
        assert _bound(rt, ROOM) == session_id


def test_no_pickup_fails_the_request_after_the_timeout_so_it_cannot_fire_later(
    tg: Settings, tg_store: Store, fake: FakeTelegram
) -> None:
    with tg_store.write() as conn:
        chats.set_home_channel(conn, HOME)
    with delivery_runtime(tg, tg_store) as (rt, waker):
        _say(rt, 1, "plan my trip")
        session_id = _session(rt)
        _say(rt, 2, "/handoff telegram")
        ended = await_handoff(tg_store, session_id, time.time)  # nobody runs the task
        assert ended is not None and not ended.completed
        assert ended.lines == [
            "Handoff to telegram failed: no gateway picked it up within 1s. Start one with "
            "`hermes up` or `hermes gateway telegram`, then /handoff again. "
            "This terminal stays on the session."
        ]
        ((handoff_id, _),) = waker.handoffs
        assert run_handoff(rt, handoff_id).outcome == "skipped"  # too late: it never fires
    assert fake.sent("-100777") == []
    with tg_store.read() as conn:
        found = handoffs.get(conn, handoff_id)
    assert found is not None and found.status == handoffs.FAILED


def test_refusals_without_a_home_channel_and_while_a_reply_is_generated(
    tg: Settings, tg_store: Store
) -> None:
    with delivery_runtime(tg, tg_store) as (rt, waker):
        _say(rt, 1, "plan my trip")
        session_id = _session(rt)
        assert _say(rt, 2, "/handoff telegram") == [
            "telegram has no home channel yet: send /sethome in the chat you want there."
        ]
        with tg_store.write() as conn:
            chats.set_home_channel(conn, HOME)
            # another route of the same session has a turn being answered right now
            other = turn(9, "555", text="still thinking?", platform="telegram", user_id="555")
            from shared.session_key import derive_session_key

            key = derive_session_key(other)
            from shared.pipeline import routes as route_rows

            place = route_rows.Place("telegram", "555", "dm", None, "555")
            route_sessions.bind_route(conn, key.key, session_id, place, time.time())
            busy = inbox.record_turn(conn, other, key, now=time.time())
            inbox.mark_running(conn, busy.turn_id, session_id, time.time())
        assert _say(rt, 3, "/handoff telegram") == [
            "A reply is being generated: wait for the current reply, then /handoff again."
        ]
        assert waker.handoffs == []


def test_a_forum_home_gets_a_topic_that_anyone_in_it_continues(
    tg: Settings, tg_store: Store, fake: FakeTelegram
) -> None:
    with tg_store.write() as conn:
        chats.set_home_channel(conn, HOME)
    fake.forums.add("-100777")
    with delivery_runtime(tg, tg_store) as (rt, waker):
        _say(rt, 1, "plan my trip to Lisbon")
        session_id = _session(rt)
        _say(rt, 2, "/handoff telegram")
        assert run_handoff(rt, waker.handoffs[0][0]).outcome == "completed"
        (created,) = [c.params for c in fake.calls if c.method == "createForumTopic"]
        assert created["name"] == "Plan my trip to Lisbon"
        sent = fake.sent("-100777")
        topic = sent[0]["message_thread_id"]
        assert [m["message_thread_id"] for m in sent] == [topic, topic]  # note and summary
        thread_key = f"agent:main:telegram:group:-100777:{topic}"
        assert _bound(rt, thread_key) == session_id
        # a second user in the topic joins the same session (threads do not split by user)
        other = turn(
            7, "-100777", text="and the hotel?", platform="telegram", chat_type="group",
            user_id="99", thread_id=str(topic),
        )  # fmt: skip
        accepted = accept(tg_store, rt.waker, other, settings=tg, clock=time.time)
        assert accepted.session_key == thread_key
        drain(rt, accepted.session_key)
    with tg_store.read() as conn:
        answered = inbox.get_turn(conn, accepted.turn_id)
    assert answered is not None and answered.session_id == session_id


def test_a_private_chat_with_topics_on_gets_a_topic_of_its_own(
    tg: Settings, tg_store: Store, fake: FakeTelegram
) -> None:
    dm = chats.HomeChannel("telegram", "555", "dm", None, "555", "agent:main:telegram:dm:555")
    with tg_store.write() as conn:
        chats.set_home_channel(conn, dm)
    fake.forums.add("555")  # the bot has topics enabled in private chats
    with delivery_runtime(tg, tg_store) as (rt, waker):
        _say(rt, 1, "plan my trip to Lisbon")
        session_id = _session(rt)
        _say(rt, 2, "/handoff telegram")
        assert run_handoff(rt, waker.handoffs[0][0]).outcome == "completed"
        sent = fake.sent("555")
        topic = sent[0]["message_thread_id"]
        assert [m["message_thread_id"] for m in sent] == [topic, topic]
        assert "handed off from the terminal to telegram" in sent[1]["text"]
        assert _bound(rt, f"agent:main:telegram:dm:555:{topic}") == session_id
        assert _bound(rt, "agent:main:telegram:dm:555") is None  # the chat itself is untouched


def test_a_disabled_or_unconfigured_platform_is_refused_at_once(
    hermes_env: dict[str, str], redis_url: str
) -> None:
    disabled = load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url),
            "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN,
            "HERMES_PLATFORMS__TELEGRAM__ENABLED": "false",
        }
    )
    store = open_store(disabled.resolved_database_url)
    try:
        with store.write() as conn:
            chats.set_home_channel(conn, HOME)
        with delivery_runtime(disabled, store) as (rt, waker):
            _say(rt, 1, "plan my trip")
            assert _say(rt, 2, "/handoff telegram") == [
                "telegram is disabled on this fleet (platforms.telegram.enabled: false)."
            ]
            assert _say(rt, 3, "/handoff slack") == [
                "slack is not configured on this fleet (no token)."
            ]
            assert _say(rt, 4, "/handoff myspace")[0].startswith("Unknown platform 'myspace'.")
            assert waker.handoffs == []
    finally:
        store.close()


def test_redrive_rewakes_pending_requests_and_fails_ones_left_running(
    tg: Settings, tg_store: Store
) -> None:
    with delivery_runtime(tg, tg_store) as (rt, waker):
        now = time.time()
        with tg_store.write() as conn:
            lost = handoffs.request(conn, "s-lost", "k1", "telegram", now - 400, 3600)
            assert handoffs.claim(conn, lost, now - 400)  # its worker died mid-way
            waiting = handoffs.request(conn, "s-wait", "k2", "telegram", now, 60)
        result = redrive(rt)
        assert (waiting, None) in waker.handoffs and (lost, None) not in waker.handoffs
        assert result.dead == 0
        assert run_handoff(rt, lost).outcome == "skipped"  # never delivered a second time
    with tg_store.read() as conn:
        found = handoffs.get(conn, lost)
    assert found is not None and found.status == handoffs.FAILED
    assert found.error is not None and "restarted" in found.error
