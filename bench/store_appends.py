"""The store bench's appends: one write transaction per message, against a bare twin and beside
a process that checkpoints the WAL (bench/store.py runs them)."""

from __future__ import annotations

import multiprocessing
import random
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from bench import corpus
from bench.common import ms
from bench.common import quantile as pct
from shared.db import sqlite as store_sqlite
from shared.db.engine import Store
from shared.store.messages import append_message


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def append_stream(seed: int, count: int) -> list[dict[str, Any]]:
    """Messages like the corpus's: a user turn, sometimes tool calls and results, a reply."""
    rng = random.Random(f"bench-appends:{seed}")
    out: list[dict[str, Any]] = []
    while len(out) < count:
        language = "zh" if rng.random() < 0.035 else "ja" if rng.random() < 0.025 else "en"
        out.append({"role": "user", "content": corpus.user_text(rng, language)})
        if rng.random() < 0.27:
            call = corpus.tool_call(rng, rng.choice(corpus.TOOLS))
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
            name = call["function"]["name"]
            out.append(
                {
                    "role": "tool",
                    "content": corpus.tool_result(rng, name, language),
                    "tool_call_id": call["id"],
                    "tool_name": name,
                }
            )
        out.append({"role": "assistant", "content": corpus.assistant_text(rng, language)})
    return out[:count]


def timed_append(store: Store, session_id: str, message: dict[str, Any]) -> tuple[float, float]:
    """(wall, cpu) seconds of one append in its own write transaction."""
    started, cpu = time.perf_counter(), time.thread_time()
    with store.write() as conn:
        append_message(
            conn,
            session_id,
            message["role"],
            message["content"],
            now=time.time(),
            tool_calls=message.get("tool_calls"),
            tool_call_id=message.get("tool_call_id"),
            tool_name=message.get("tool_name"),
            token_count=len(message["content"] or "") // 4,
            input_tokens=100 if message["role"] == "assistant" else 0,
            output_tokens=50 if message["role"] == "assistant" else 0,
        )
    return time.perf_counter() - started, time.thread_time() - cpu


def measure_appends(
    store: Store, bare: Store | None, session_ids: list[str], count: int, seed: int
) -> dict[str, Any]:
    stream = append_stream(seed, count)
    rng = random.Random(f"bench-targets:{seed}")
    targets = [rng.choice(session_ids) for _ in range(count)]
    wall: list[float] = []
    cpu: list[float] = []
    bare_wall: list[float] = []
    bare_cpu: list[float] = []
    for i, (session_id, message) in enumerate(zip(targets, stream, strict=True)):
        w, c = timed_append(store, session_id, message)
        wall.append(w)
        cpu.append(c)
        if bare is not None:  # interleaved, so both see the same noise
            w, c = timed_append(bare, session_id, message)
            bare_wall.append(w)
            bare_cpu.append(c)
        if (i + 1) % 500 == 0:
            progress(f"  {i + 1}/{count} appends")
    worst = sorted(range(count), key=lambda i: wall[i])[-5:]
    result: dict[str, Any] = {
        "append_p50_ms": ms(pct(wall, 0.5)),
        "append_p99_ms": ms(pct(wall, 0.99)),
        "append_max_ms": ms(max(wall)),
        "append_cpu_p50_ms": ms(pct(cpu, 0.5)),
        "append_cpu_p99_ms": ms(pct(cpu, 0.99)),
        "append_cpu_max_ms": ms(max(cpu)),
        "append_worst": [
            {"i": i, "wall_ms": ms(wall[i]), "cpu_ms": ms(cpu[i]), "role": stream[i]["role"]}
            for i in reversed(worst)
        ],
        "appends": count,
    }
    if bare is not None:
        result.update(
            bare_append_p50_ms=ms(pct(bare_wall, 0.5)),
            bare_append_p99_ms=ms(pct(bare_wall, 0.99)),
            bare_append_max_ms=ms(max(bare_wall)),
            append_overhead_p50=round(pct(wall, 0.5) / pct(bare_wall, 0.5), 2),
            append_overhead_cpu_p50=round(pct(cpu, 0.5) / max(pct(bare_cpu, 0.5), 1e-9), 2),
        )
    return result


def checkpointer(path: str, interval: float, stop: Any, out: Any) -> None:
    """A stand-in for a maintenance loop: PASSIVE checkpoints every `interval` seconds.

    Runs in its own process, as a maintenance task would; PASSIVE never waits for writers.
    """
    spent: list[float] = []
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(f"PRAGMA busy_timeout = {store_sqlite.BUSY_TIMEOUT_MS}")
        while not stop.is_set():
            started = time.perf_counter()
            store_sqlite.wal_checkpoint(conn)
            spent.append(time.perf_counter() - started)
            stop.wait(interval)
    out.put({"steps": len(spent), "max_ms": ms(max(spent, default=0.0))})


def measure_fleet_appends(
    store: Store, path: Path, session_ids: list[str], count: int, seed: int
) -> dict[str, Any]:
    """Appends while another process checkpoints (PASSIVE, every 100 ms): the WAL never reaches
    the autocheckpoint threshold, so no append copies it. 100 ms at this benchmark's append
    rate (~1,500/s) is a few seconds at a busy fleet's."""
    context = multiprocessing.get_context("spawn")
    stop, out = context.Event(), context.Queue()
    helper = context.Process(target=checkpointer, args=(str(path), 0.1, stop, out))
    helper.start()
    try:
        time.sleep(1.0)  # let it start before the clock runs
        stream = append_stream(seed, count)
        rng = random.Random(f"bench-fleet:{seed}")
        wall, cpu = [], []
        for message in stream:
            w, c = timed_append(store, rng.choice(session_ids), message)
            wall.append(w)
            cpu.append(c)
    finally:
        stop.set()
        steps = out.get(timeout=60)
        helper.join(timeout=60)
    return {
        "fleet_append_p50_ms": ms(pct(wall, 0.5)),
        "fleet_append_p99_ms": ms(pct(wall, 0.99)),
        "fleet_append_max_ms": ms(max(wall)),
        "fleet_append_cpu_max_ms": ms(max(cpu)),
        "fleet_checkpoints": steps["steps"],
        "fleet_checkpoint_max_ms": steps["max_ms"],
    }
