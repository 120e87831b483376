"""The usage ledger through the real drain and agent against the fake OpenAI server (real HTTP).

Rows carry the tokens the endpoint reported (cached and reasoning included), estimates only
where it reported none (and marked), the cost from the configured price table, tool outcomes;
titles and the offline model leave rows too, and pruning sessions keeps what they spent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from producers.intake import accept
from shared.db import Store
from shared.db.schema import usage_daily, usage_ledger, usage_sessions, usage_tools
from shared.pipeline.inbox import get_turn
from shared.pricing import Pricing
from shared.settings import Settings, load_settings
from shared.store import insights, usage
from shared.store.sessions import end_session, prune_batch
from shared.usage import ModelCall, ToolUse, day_of
from tests.fakes.openai_server import FakeOpenAI, reply, running, tool_call
from tests.integration.storekit import pg_round_trips
from tests.pipeline_helpers import make_runtime, turn
from workers.agent import titles
from workers.agent.factory import build_agent
from workers.drain import drain
from workers.runtime import Runtime

pytestmark = pytest.mark.both_databases

MAIN = "main-model"
AUX = "aux-model"
PRICES = "pricing:\n  main-model: {input: 2.0, output: 10.0, cached: 0.5}\n"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with running() as server:
        yield server


def priced_settings(env: dict[str, str], home: Path, fake: FakeOpenAI, **extra: str) -> Settings:
    (home / "config.yaml").write_text(PRICES, encoding="utf-8")
    return load_settings(
        {
            **env,
            "HERMES_MODEL__BASE_URL": fake.url,
            "HERMES_MODEL__NAME": MAIN,
            "HERMES_MODEL__RETRIES": "0",
            "HERMES_AUXILIARY__NAME": AUX,
            **extra,
        }
    )


@pytest.fixture
def rt(
    hermes_env: dict[str, str], hermes_home: Path, fake: FakeOpenAI, store: Store
) -> Iterator[Runtime]:
    settings = priced_settings(hermes_env, hermes_home, fake)
    agent = build_agent(settings, store)
    runtime, _ = make_runtime(settings, store, agent)
    yield runtime
    runtime.renewer.close()
    agent.close()  # type: ignore[attr-defined]


def run_turn(rt: Runtime, n: int, chat: str = "c1", **extra: Any) -> int:
    accepted = accept(
        rt.store, rt.waker, turn(n, chat, **extra), settings=rt.settings, clock=time.time
    )
    drain(rt, accepted.session_key)
    return accepted.turn_id


def ledger(store: Store) -> list[dict[str, Any]]:
    with store.read() as conn:
        rows = conn.execute(select(usage_ledger).order_by(usage_ledger.c.id)).all()
    return [dict(row._mapping) for row in rows]


def test_rows_carry_the_reported_usage_with_cached_and_reasoning_tokens(
    rt: Runtime, fake: FakeOpenAI
) -> None:
    fake.script(
        tool_call("memory", {"action": "list"}, usage=(120, 9)),
        tool_call("no_such_tool", {}, usage=(150, 4)),
        reply("Done.", (200, 30), cached=80, reasoning=12),
        model=MAIN,
    )
    turn_id = run_turn(rt, 1, platform="telegram")
    rows = ledger(rt.store)
    assert [(r["kind"], r["model"], r["platform"]) for r in rows] == [
        ("tool_round", MAIN, "telegram"),
        ("tool_round", MAIN, "telegram"),
        ("reply", MAIN, "telegram"),
    ]
    first, second, last = rows
    assert (first["input_tokens"], first["output_tokens"], first["estimated"]) == (120, 9, 0)
    assert first["cached_tokens"] is None and first["reasoning_tokens"] is None
    assert (last["input_tokens"], last["output_tokens"]) == (200, 30)
    assert (last["cached_tokens"], last["reasoning_tokens"]) == (80, 12)
    assert json.loads(first["tools"]) == {"memory": [1, 0]}
    assert json.loads(second["tools"]) == {"no_such_tool": [1, 1]}
    assert all(r["turn_id"] == turn_id and r["session_id"] for r in rows)
    assert all(r["latency_ms"] > 0 for r in rows)


def test_cost_comes_from_the_configured_price_table(rt: Runtime, fake: FakeOpenAI) -> None:
    fake.script(reply("Priced.", (1_000, 100), cached=400), model=MAIN)
    run_turn(rt, 1)
    (row,) = ledger(rt.store)
    # 600 fresh input at $2/M, 400 cached at $0.50/M, 100 output at $10/M.
    assert row["cost"] == pytest.approx((600 * 2.0 + 400 * 0.5 + 100 * 10.0) / 1e6)


def test_a_response_without_usage_is_estimated_and_marked(rt: Runtime, fake: FakeOpenAI) -> None:
    fake.script(reply("An answer the endpoint did not count.", usage=None), model=MAIN)
    run_turn(rt, 1)
    (row,) = ledger(rt.store)
    assert row["estimated"] == 1
    assert row["input_tokens"] > 0 and row["output_tokens"] > 0
    assert row["cached_tokens"] is None


def test_a_title_call_is_recorded_and_an_unpriced_model_costs_unknown(
    rt: Runtime, fake: FakeOpenAI
) -> None:
    fake.script(reply("Hello there.", (50, 5)), model=MAIN)
    fake.script(reply("Greeting the assistant", (40, 6)), model=AUX)
    turn_id = run_turn(rt, 1)
    with rt.store.read() as conn:
        found = get_turn(conn, turn_id)
        assert found is not None and found.session_id is not None
        session_id = found.session_id
    assert titles.autotitle(rt, session_id).startswith("titled")
    kinds = {r["kind"]: r for r in ledger(rt.store)}
    assert set(kinds) == {"reply", "title"}
    title = kinds["title"]
    assert (title["model"], title["input_tokens"], title["output_tokens"]) == (AUX, 40, 6)
    assert title["cost"] is None  # aux-model is in no price table: unknown, not a guess
    assert title["session_id"] == session_id


def test_the_offline_model_leaves_estimated_free_rows(settings: Settings, store: Store) -> None:
    runtime, _ = make_runtime(settings, store)
    try:
        accepted = accept(store, runtime.waker, turn(1), settings=settings, clock=time.time)
        drain(runtime, accepted.session_key)
    finally:
        runtime.renewer.close()
    (row,) = ledger(store)
    assert (row["kind"], row["model"], row["estimated"], row["cost"]) == ("reply", "offline", 1, 0)


def test_the_ledger_and_its_rollups_survive_pruning_the_session(
    rt: Runtime, fake: FakeOpenAI
) -> None:
    fake.script(reply("Spent.", (300, 20)), model=MAIN)
    turn_id = run_turn(rt, 1)
    with rt.store.read() as conn:
        found = get_turn(conn, turn_id)
        assert found is not None and found.session_id is not None
        session_id = found.session_id
    with rt.store.write() as conn:
        end_session(conn, session_id, "test", time.time() - 10)
        assert prune_batch(conn, ended_before=time.time())[0] == 1
    (row,) = ledger(rt.store)
    assert row["session_id"] == session_id and row["input_tokens"] == 300
    today = day_of(time.time())
    with rt.store.read() as conn:
        report = insights.report(conn, insights.Window(today - 6, today))
        kept = conn.execute(select(usage_sessions.c.session_id)).scalars().all()
    assert kept == [session_id]
    assert report.total.usage.input_tokens == 300
    (top,) = report.top_sessions
    assert top.session_id == session_id and top.pruned


def _calls(now: float) -> list[ModelCall]:
    return [
        ModelCall("reply", "gpt-4o", now, 1_000, 200, 900.0, cached_tokens=100),
        ModelCall("tool_round", "gpt-4o", now - 86_400, 500, 50, 2_000.0),
        ModelCall("title", "mystery-model", now, 60, 8, 300.0, estimated=True),
    ]


def test_records_add_to_the_rollups_and_the_report_sums_them(store: Store) -> None:
    """A second write adds to the rollup rows the first made (each dialect's upsert); the
    report's sums are exact integers (BIGINT on PostgreSQL)."""
    now = time.time()
    for _ in range(2):
        with store.write() as conn:
            usage.record(conn, _calls(now), usage.Where("slack", "s-pg"), Pricing())
    with store.read() as conn:
        report = insights.report(conn, insights.Window(day_of(now) - 6, day_of(now)))
    total = report.total.usage
    assert (total.calls, total.input_tokens, total.output_tokens) == (6, 3_120, 516)
    assert isinstance(total.input_tokens, int)
    cost = 2 * ((900 * 2.5 + 100 * 1.25 + 200 * 10) + (500 * 2.5 + 50 * 10)) / 1e6
    assert total.cost == pytest.approx(cost)
    assert total.unpriced_calls == 2 and total.estimated_calls == 2
    assert sum(report.daily_calls) == 6 and report.daily_calls[-2:] == [2, 4]


def test_on_postgresql_a_record_is_one_round_trip_with_every_row(
    store: Store, tmp_path: Path
) -> None:
    """The ledger rows and every rollup upsert (per day, per session, per tool; two models, two
    days) go to PostgreSQL as one statement; the rows are those of the statement-per-row path
    (the SQLite run checks the same figures through it)."""
    now = time.time()
    calls = [
        *_calls(now),
        ModelCall(
            "reply",
            "gpt-4o",
            now,
            10,
            2,
            5.0,
            tools=(ToolUse("search"), ToolUse("search", failed=True), ToolUse("fetch")),
        ),
    ]
    for _ in range(2):
        with store.write() as conn:
            if store.dialect == "postgresql":
                with pg_round_trips(conn, tmp_path) as trips:
                    usage.record(conn, calls, usage.Where("slack", "s-one", 7), Pricing())
                assert trips == [1]
            else:
                usage.record(conn, calls, usage.Where("slack", "s-one", 7), Pricing())
    with store.read() as conn:
        ledger_rows = conn.execute(select(usage_ledger.c.turn_id)).scalars().all()
        daily = conn.execute(
            select(usage_daily.c.model, usage_daily.c.kind, usage_daily.c.calls)
        ).all()
        sessions = conn.execute(
            select(usage_sessions.c.model, usage_sessions.c.calls, usage_sessions.c.input_tokens)
        ).all()
        tools = conn.execute(
            select(usage_tools.c.tool, usage_tools.c.calls, usage_tools.c.failures)
        ).all()
    assert ledger_rows == [7] * 8
    assert sorted(daily) == [
        ("gpt-4o", "reply", 4),
        ("gpt-4o", "tool_round", 2),
        ("mystery-model", "title", 2),
    ]
    assert sorted(sessions) == [
        ("gpt-4o", 2, 1_000),
        ("gpt-4o", 4, 2_020),
        ("mystery-model", 2, 120),
    ]
    assert sorted(tools) == [("fetch", 2, 0), ("search", 4, 2)]


def _sessions_in_two_shards() -> tuple[str, str]:
    first = "shard-a"
    other = next(
        f"shard-b{n}"
        for n in range(100)
        if usage.shard_of(usage.Where("slack", f"shard-b{n}"))
        != usage.shard_of(usage.Where("slack", first))
    )
    return first, other


def test_calls_spread_over_shards_sum_to_the_same_report(store: Store) -> None:
    """Sessions' calls land in different rows of one day × platform × model key (and cron jobs
    and sessionless calls in theirs); every report sums them as one."""
    now = time.time()
    first, other = _sessions_in_two_shards()
    for where in (
        usage.Where("slack", first),
        usage.Where("slack", other),
        usage.Where("slack", cron_job="nightly"),
        usage.Where("slack"),
    ):
        with store.write() as conn:
            usage.record(conn, _calls(now), where, Pricing())
    with store.read() as conn:
        report = insights.report(conn, insights.Window(day_of(now) - 6, day_of(now)))
        rows = conn.execute(select(usage_daily.c.shard).distinct()).scalars().all()
    assert len(rows) >= 2
    total = report.total.usage
    assert (total.calls, total.input_tokens, total.output_tokens) == (12, 6_240, 1_032)
    assert sum(report.daily_calls) == 12
    names = [g.name for g in report.by_model]
    assert len(names) == len(set(names)) and sum(g.usage.calls for g in report.by_model) == 12
    assert sum(g.usage.calls for g in report.by_kind) == 12


def test_two_sessions_usage_writes_do_not_wait_for_each_other(store: Store) -> None:
    """On PostgreSQL a rollup row stays locked until its turn commits: a second session's turn
    must not queue behind a first one still open (one row per key made every worker of a
    fleet wait on it)."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite has one writer at a time by design")
    now = time.time()
    first, other = _sessions_in_two_shards()
    holding, release = threading.Event(), threading.Event()

    def hold_first() -> None:
        with store.write() as conn:
            usage.record(conn, _calls(now), usage.Where("slack", first), Pricing())
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold_first)
    holder.start()
    try:
        assert holding.wait(30)
        with store.write() as conn:
            conn.exec_driver_sql("SET LOCAL lock_timeout = '2s'")
            usage.record(conn, _calls(now), usage.Where("slack", other), Pricing())
    finally:
        release.set()
        holder.join(30)
    with store.read() as conn:
        report = insights.report(conn, insights.Window(day_of(now) - 6, day_of(now)))
    assert report.total.usage.calls == 6
