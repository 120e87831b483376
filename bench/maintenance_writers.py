"""The maintenance bench's turn writers: processes appending while maintenance runs, and the
stalls they saw, overall and per maintenance phase (bench/maintenance.py runs them)."""

from __future__ import annotations

import multiprocessing
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import corpus
from bench.common import ms
from bench.common import quantile as pct
from shared.db.engine import open_store
from shared.store.messages import append_message


def writer(
    path: str, session_ids: list[str], interval: float, seed: int, stop: Any, ready: Any, out: Any
) -> None:
    """One turn writer: appends until `stop`, then sends [(started epoch, seconds, error)].

    Says `ready` after its first 20 writes (connections open, statements compiled) and leaves
    them out, so the cold start of a process is not counted as a stall."""
    store = open_store(f"sqlite:///{path}")
    rng = random.Random(seed)
    samples: list[tuple[float, float, str | None]] = []
    try:
        while not stop.is_set():
            if len(samples) == 20:
                ready.put(seed)
            started_at, started = time.time(), time.perf_counter()
            error: str | None = None
            try:
                with store.write() as conn:
                    append_message(
                        conn,
                        rng.choice(session_ids),
                        "user",
                        corpus.user_text(rng, "zh" if rng.random() < 0.05 else "en"),
                        now=started_at,
                        token_count=20,
                    )
            except Exception as exc:  # a lost write is what this bench counts
                error = f"{type(exc).__name__}: {exc}"[:200]
            samples.append((started_at, time.perf_counter() - started, error))
            stop.wait(interval)
    finally:
        store.close()
        out.put(samples[20:])


@contextmanager
def writers(path: Path, ids: list[str], count: int, interval: float) -> Iterator[list[Any]]:
    """Run `count` writer processes for the body; yields the list their samples land in."""
    ctx = multiprocessing.get_context("spawn")
    stop, ready, out = ctx.Event(), ctx.Queue(), ctx.Queue()
    procs = [
        ctx.Process(
            target=writer, args=(str(path), ids, interval, n, stop, ready, out), daemon=True
        )
        for n in range(count)
    ]
    for proc in procs:
        proc.start()
    collected: list[Any] = []
    try:
        for _ in procs:
            ready.get(timeout=120)
        time.sleep(1.0)  # a baseline before maintenance starts
        yield collected
        time.sleep(1.0)
    finally:
        stop.set()
        for _ in procs:
            collected.extend(out.get(timeout=120))
        for proc in procs:
            proc.join(timeout=30)


def summarise(
    samples: list[tuple[float, float, str | None]], start: float, end: float
) -> dict[str, Any]:
    """Writes that overlapped the maintenance window [start, end]."""
    during = _during(samples, start, end)
    before = [s for s in samples if s[0] + s[1] < start]
    failed = [s for s in during if s[2] is not None]
    waits = [s[1] for s in during]
    return {
        "writes": len(during),
        "failed_writes": len(failed),
        "max_stall_ms": ms(max(waits, default=0.0)),
        "p99_write_ms": ms(pct(waits, 0.99)),
        "p50_write_ms": ms(pct(waits, 0.5)),
        "writes_over_250ms": sum(wait > 0.25 for wait in waits),
        "baseline_max_ms": ms(max((s[1] for s in before), default=0.0)),
        "errors": sorted({s[2] for s in failed if s[2]})[:3],
    }


def _during(
    samples: list[tuple[float, float, str | None]], start: float, end: float
) -> list[tuple[float, float, str | None]]:
    return [s for s in samples if s[0] <= end and s[0] + s[1] >= start]


def stall_by_phase(
    samples: list[tuple[float, float, str | None]], end: float, phases: list[tuple[str, float]]
) -> dict[str, float]:
    """The longest write in each of `phases` ((name, seconds), in order, ending at `end`)."""
    out: dict[str, float] = {}
    stop = end
    for name, seconds in reversed(phases):
        begin = stop - seconds
        out[name] = ms(max((s[1] for s in _during(samples, begin, stop)), default=0.0))
        stop = begin
    return dict(reversed(out.items()))
