"""A deterministic synthetic fleet: sessions and messages shaped like real chat-agent traffic.

Entry points (same arguments → the same corpus on any machine; only seeded `random.Random`):

- `plan_corpus(sessions=, messages=, seed=)` → one `SessionPlan` per session: id, source, chat,
  lineage (compression chains "x", "x #2"), title, language, time window, message count.
- `iter_corpus(sessions=, messages=, seed=)` → `(session_row, message_rows)` per session, plain
  dicts keyed by the columns of `sessions` / `messages` (no `id` on messages), no database.
- `generate_session(plan, seed)` → the same pair for one planned session (independent of the
  others, so a search benchmark can regenerate any session to know what it holds).
- `build_store(path, sessions=, messages=, seed=)` → writes the corpus into a fresh state.db
  through the real schema (`open_store`: Alembic migrations, the FTS5 table and its triggers,
  the counter triggers) with large `executemany` transactions, and returns `BuildStats`.
- `vocabulary()` → the ranked word list, for picking common / rare query terms.
- `build_store(..., ledger_until=T)` also writes one usage-ledger row per assistant message
  (through shared.store.usage, rollups included), the corpus's 180 days stretched over the
  year before T: the session's model, reply or tool round, input tokens the conversation so
  far, tool outcomes, seeded latencies; about half the models have a price.

What the text looks like: a ~40k-word Zipf vocabulary (real English function and technical
words at the head, so "the", "to", "and" occur in nearly every session; pseudo-words in the
tail) plus a stream of one-off tokens (numbers, hex ids, paths, versions). User messages have a
median of ~80 characters, assistant replies ~400 with a long tail to several KB (markdown lists,
code blocks); about a quarter of turns call tools (assistant `tool_calls` JSON, then JSON tool
results of a few KB). About 5% of sessions are in Chinese or Japanese and other sessions quote
CJK now and then: 5–8% of messages contain CJK. Sources cli / telegram / slack / discord;
most sessions ended; ~6% of lineages are compression chains; about half are titled.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.corpus_plan import SessionPlan, plan_corpus
from bench.corpus_text import (
    BASE_TIME,
    SPAN_SECONDS,
    TOOLS,
    assistant_text,
    prose,
    tool_call,
    tool_result,
    user_text,
    vocabulary,
)

# The corpus's API, with the text generators other benches draw messages from.
__all__ = [
    "TOOLS",
    "BuildStats",
    "SessionPlan",
    "assistant_text",
    "build_store",
    "generate_session",
    "iter_corpus",
    "plan_corpus",
    "tool_call",
    "tool_result",
    "user_text",
    "vocabulary",
]

CHUNK_SESSIONS = 256  # sessions generated, time-interleaved and inserted together

SESSION_COLUMNS = (
    "id", "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id", "title",
    "title_source", "model", "model_config", "system_prompt", "parent_session_id", "started_at",
    "ended_at", "end_reason", "last_active_at", "input_tokens", "output_tokens",
)  # fmt: skip
MESSAGE_COLUMNS = (
    "session_id", "role", "content", "tool_calls", "tool_call_id", "tool_name", "token_count",
    "timestamp", "platform_message_id",
)  # fmt: skip


@dataclass(slots=True)
class BuildStats:
    """What `build_store` wrote and how long it took."""

    path: Path
    sessions: int
    messages: int
    seconds: float
    content_bytes: int = 0  # UTF-8 bytes of content + tool_calls over all messages
    cjk_messages: int = 0
    by_role: dict[str, int] = field(default_factory=dict)
    by_source: dict[str, int] = field(default_factory=dict)

    def add(self, other: ChunkStats) -> None:
        self.content_bytes += other.content_bytes
        self.cjk_messages += other.cjk_messages
        for role, count in other.by_role.items():
            self.by_role[role] = self.by_role.get(role, 0) + count
        for source, count in other.by_source.items():
            self.by_source[source] = self.by_source.get(source, 0) + count


@dataclass(slots=True)
class ChunkStats:
    content_bytes: int = 0
    cjk_messages: int = 0
    by_role: Counter[str] = field(default_factory=Counter)
    by_source: Counter[str] = field(default_factory=Counter)


def _system_prompt(seed: int, variant: int) -> str:
    rng = random.Random(f"hermes-corpus-prompt:{seed}:{variant}")
    return (
        "You are Hermes, an agent with tools. "
        + prose(rng, rng.randint(600, 2800))
        + "\n\n## Memory\n"
        + "\n".join(f"- {prose(rng, rng.randint(40, 120))}" for _ in range(rng.randint(2, 8)))
    )


# --- sessions -------------------------------------------------------------------------------


def _has_cjk(text: str | None) -> bool:
    return text is not None and any("\u3040" <= ch <= "\u9fff" for ch in text)


def _platform_id(rng: random.Random, source: str, ts: float, serial: int) -> str | None:
    if source == "telegram":
        return str(1000 + serial)
    if source == "slack":
        return f"{ts:.6f}"
    if source == "discord":
        return str(((int(ts * 1000) - 1_420_070_400_000) << 22) | rng.getrandbits(22))
    return None


def _tokens(text: str | None) -> int:
    return max(1, len(text.encode("utf-8")) // 4) if text else 0


class _Transcript:
    """Accumulates one session's message rows and its token totals."""

    def __init__(self, plan: SessionPlan, rng: random.Random) -> None:
        self.plan, self.rng = plan, rng
        self.rows: list[dict[str, Any]] = []
        self.ts = plan.started_at
        self.context = 0
        self.input_tokens = 0
        self.output_tokens = 0

    def add(self, role: str, content: str | None, gap: float, **extra: Any) -> None:
        self.ts += gap
        tokens = _tokens(content) + _tokens(extra.get("tool_calls"))
        if role == "assistant":
            self.input_tokens += self.context
            self.output_tokens += tokens
        self.context = min(self.context + tokens, 120_000)
        self.rows.append(
            {
                "session_id": self.plan.id,
                "role": role,
                "content": content,
                "tool_calls": extra.get("tool_calls"),
                "tool_call_id": extra.get("tool_call_id"),
                "tool_name": extra.get("tool_name"),
                "token_count": tokens,
                "timestamp": self.ts,
                "platform_message_id": extra.get("platform_message_id"),
            }
        )

    def full(self) -> bool:
        return len(self.rows) >= self.plan.n_messages

    def turn(self) -> None:
        rng, plan = self.rng, self.plan
        serial = len(self.rows)
        gap = rng.expovariate(1 / 60.0) + (rng.uniform(600, 20_000) if rng.random() < 0.05 else 0)
        self.add(
            "user",
            user_text(rng, plan.language),
            gap,
            platform_message_id=_platform_id(rng, plan.source, self.ts + gap, serial),
        )
        if rng.random() < 0.27:
            while not self.full():
                calls = [
                    tool_call(rng, rng.choice(TOOLS)) for _ in range(1 + (rng.random() < 0.15))
                ]
                words = None if rng.random() < 0.5 else prose(rng, rng.randint(20, 120))
                self.add(
                    "assistant",
                    words,
                    rng.uniform(1.5, 15.0),
                    tool_calls=json.dumps(calls, ensure_ascii=False, separators=(",", ":")),
                )
                for call in calls:
                    if self.full():
                        return
                    name = call["function"]["name"]
                    self.add(
                        "tool",
                        tool_result(rng, name, plan.language),
                        rng.uniform(0.2, 8.0),
                        tool_call_id=call["id"],
                        tool_name=name,
                    )
                if rng.random() < 0.55:
                    break
        if not self.full():
            self.add(
                "assistant",
                assistant_text(rng, plan.language),
                rng.uniform(2.0, 40.0),
                platform_message_id=_platform_id(rng, plan.source, self.ts, serial + 1),
            )


def generate_session(plan: SessionPlan, seed: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One session's row and its message rows (in order), determined by (plan, seed) alone."""
    rng = random.Random(f"hermes-corpus:{seed}:{plan.index}")
    transcript = _Transcript(plan, rng)
    while not transcript.full():
        transcript.turn()
    rows = transcript.rows[: plan.n_messages]
    # Squeeze the conversation into its planned window (continuations start after it).
    span = rows[-1]["timestamp"] - plan.started_at
    if span > plan.window:
        factor = plan.window / span
        for row in rows:
            row["timestamp"] = plan.started_at + (row["timestamp"] - plan.started_at) * factor
    last = rows[-1]["timestamp"]
    ended_at = None
    if plan.end_reason == "compression":
        ended_at = last
    elif plan.end_reason is not None:
        ended_at = min(last + rng.uniform(60.0, 3600.0), BASE_TIME)
    session = {
        "id": plan.id,
        "source": plan.source,
        "user_id": plan.chat.user_id,
        "session_key": plan.chat.session_key,
        "chat_id": plan.chat.chat_id,
        "chat_type": plan.chat.chat_type,
        "thread_id": plan.chat.thread_id,
        "title": plan.title,
        "title_source": plan.title_source,
        "model": plan.model,
        "model_config": json.dumps(
            {"temperature": 0.7, "max_tokens": 8192, "provider": plan.model.split("/")[0]}
        ),
        "system_prompt": f"{_system_prompt(seed, plan.prompt_variant)}\nPlatform: {plan.source}."
        f" Started {time.strftime('%Y-%m-%d', time.gmtime(plan.started_at))}.",
        "parent_session_id": plan.parent_id,
        "started_at": plan.started_at,
        "ended_at": ended_at,
        "end_reason": plan.end_reason,
        "last_active_at": last,
        "message_count": len(rows),
        "input_tokens": transcript.input_tokens,
        "output_tokens": transcript.output_tokens,
    }
    return session, rows


def iter_corpus(
    *, sessions: int, messages: int, seed: int = 1
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Every session of the corpus with its messages, in plan order."""
    for plan in plan_corpus(sessions=sessions, messages=messages, seed=seed):
        yield generate_session(plan, seed)


# --- the bulk loader ------------------------------------------------------------------------

_Chunk = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], ChunkStats]


def _generate_chunk(plans: Sequence[SessionPlan], seed: int) -> _Chunk:
    """Rows for a run of sessions, messages interleaved by time as a live fleet writes them."""
    session_rows: list[tuple[Any, ...]] = []
    message_rows: list[dict[str, Any]] = []
    stats = ChunkStats()
    for plan in plans:
        session, rows = generate_session(plan, seed)
        session_rows.append(tuple(session[c] for c in SESSION_COLUMNS))
        message_rows.extend(rows)
        stats.by_source[plan.source] += len(rows)
    message_rows.sort(key=lambda row: row["timestamp"])
    tuples = []
    for row in message_rows:
        content, calls = row["content"], row["tool_calls"]
        stats.content_bytes += len(content.encode("utf-8")) if content else 0
        stats.content_bytes += len(calls.encode("utf-8")) if calls else 0
        stats.cjk_messages += _has_cjk(content)
        stats.by_role[row["role"]] += 1
        tuples.append(tuple(row[c] for c in MESSAGE_COLUMNS))
    return session_rows, tuples, stats


def _chunks(plans: Sequence[SessionPlan], seed: int, workers: int) -> Iterator[_Chunk]:
    slices = [plans[i : i + CHUNK_SESSIONS] for i in range(0, len(plans), CHUNK_SESSIONS)]
    if workers <= 0:
        for part in slices:
            yield _generate_chunk(part, seed)
        return
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        pending: list[Future[_Chunk]] = []
        ahead = 2 * workers + 1
        for part in slices:
            pending.append(pool.submit(_generate_chunk, part, seed))
            if len(pending) > ahead:
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()


def ledger_calls(
    session_rows: Sequence[tuple[Any, ...]],
    message_rows: Sequence[tuple[Any, ...]],
    *,
    until: float,
    seed: int,
) -> dict[str, tuple[str, list[Any]]]:
    """One ledger call per assistant message of a chunk: session id → (source, calls)."""
    from shared.usage import REPLY, TOOL_ROUND, ModelCall, ToolUse

    meta = {
        row[SESSION_COLUMNS.index("id")]: (
            row[SESSION_COLUMNS.index("source")],
            row[SESSION_COLUMNS.index("model")],
        )
        for row in session_rows
    }
    column = {name: i for i, name in enumerate(MESSAGE_COLUMNS)}
    rng = random.Random(f"hermes-ledger:{seed}:{message_rows[0][column['timestamp']]!r}")
    context: dict[str, int] = {}
    calls: dict[str, tuple[str, list[Any]]] = {}
    start = BASE_TIME - SPAN_SECONDS
    for row in message_rows:
        session_id = row[column["session_id"]]
        tokens = int(row[column["token_count"]] or 0)
        seen = context.get(session_id, 0)
        context[session_id] = min(seen + tokens, 120_000)
        if row[column["role"]] != "assistant":
            continue
        source, model = meta[session_id]
        at = until - 365 * 86_400 + (row[column["timestamp"]] - start) / SPAN_SECONDS * 365 * 86_400
        raw_calls = row[column["tool_calls"]]
        tools = tuple(
            ToolUse(call["function"]["name"], rng.random() < 0.04)
            for call in (json.loads(raw_calls) if raw_calls else [])
        )
        big = seen > 2_000 and not model.startswith(("local/", "qwen/"))
        call = ModelCall(
            kind=TOOL_ROUND if tools else REPLY,
            model=model,
            at=min(at, until),
            input_tokens=seen + 200,
            output_tokens=tokens,
            latency_ms=rng.lognormvariate(7.0, 0.7),
            cached_tokens=int(seen * 0.6) if big else None,
            tools=tools,
        )
        calls.setdefault(session_id, (source, []))[1].append(call)
    return calls


def build_store(
    path: Path,
    *,
    sessions: int,
    messages: int,
    seed: int = 1,
    workers: int = 1,
    progress: Any = None,
    ledger_until: float | None = None,
) -> BuildStats:
    """Write the corpus into a new state.db at `path` through the real schema; return its stats.

    The file (and its -wal/-shm) must not exist. Tables, FTS5 index and counters come from
    `open_store` and the triggers it installs; rows go in with `executemany` in transactions of
    `CHUNK_SESSIONS` sessions. `workers` processes generate text while this one inserts
    (0: generate in-process). `progress(done_messages, total_messages)` is called per chunk.
    With `ledger_until`, the usage ledger is written too (`ledger_calls`).
    """
    from shared.db.engine import open_store  # the store is only needed to build one
    from shared.pricing import Pricing
    from shared.store import usage

    for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if leftover.exists():
            raise FileExistsError(f"{leftover} exists; build_store writes a new store")
    started = time.perf_counter()
    plans = plan_corpus(sessions=sessions, messages=messages, seed=seed)
    stats = BuildStats(path=path, sessions=len(plans), messages=messages, seconds=0.0)
    insert_session = (
        f"INSERT INTO sessions ({', '.join(SESSION_COLUMNS)}) "
        f"VALUES ({', '.join('?' * len(SESSION_COLUMNS))})"
    )
    insert_message = (
        f"INSERT INTO messages ({', '.join(MESSAGE_COLUMNS)}) "
        f"VALUES ({', '.join('?' * len(MESSAGE_COLUMNS))})"
    )
    store = open_store(f"sqlite:///{path}")
    pricing = Pricing()
    try:
        done = 0
        for session_rows, message_rows, chunk_stats in _chunks(plans, seed, workers):
            with store.write() as conn:
                conn.exec_driver_sql(insert_session, session_rows)
                conn.exec_driver_sql(insert_message, message_rows)
                if ledger_until is not None:
                    found = ledger_calls(session_rows, message_rows, until=ledger_until, seed=seed)
                    for session_id, (source, calls) in found.items():
                        where = usage.Where(source, session_id)
                        usage.record(conn, calls, where, pricing)
            stats.add(chunk_stats)
            done += len(message_rows)
            if progress is not None:
                progress(done, messages)
    finally:
        store.close()
    stats.seconds = time.perf_counter() - started
    return stats
